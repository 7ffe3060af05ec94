// JSON nesting-depth check (see json_limits.h).
#include "io/json_limits.h"

namespace dsinfer::io {

namespace {

// Returns the byte offset where the depth first exceeds `limit`, or npos; *max_depth gets the deepest level.
size_t scan(std::string_view text, int limit, int* max_depth) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // skip the escaped character (\" does not end the string)
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (depth > limit) {
        *max_depth = depth;
        return i;
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  *max_depth = deepest;
  return std::string_view::npos;
}

}  // namespace

int json_nesting_depth(std::string_view text, int limit) {
  int d = 0;
  scan(text, limit, &d);
  return d;
}

Status check_json_depth(std::string_view text, std::string_view what, int limit) {
  int d = 0;
  const size_t at = scan(text, limit, &d);
  if (at == std::string_view::npos) return Status::ok();
  return Status::errorf("{}: JSON nested deeper than {} levels (at byte {})", what, limit, at);
}

}  // namespace dsinfer::io
