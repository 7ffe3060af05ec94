// Limits applied to JSON text before it is parsed. nlohmann's parser copes with any nesting, but dumping,
// copying and comparing a value recurse once per level: a line nested 100,000 deep would overflow the stack
// far from the edge where it came in. Every JSON input (request bodies, batch lines, config.json,
// tokenizer.json, safetensors headers, tokenize input) is checked here first.
#pragma once
#include <string_view>

#include "core/status.h"

namespace dsinfer::io {

// Deeper than any real request, schema or model file; shallow enough for every recursive walk.
inline constexpr int kMaxJsonDepth = 128;

// Deepest nesting of [ and { outside strings (scanning stops once `limit` is exceeded, returning limit + 1).
// Meant for text about to be parsed: for malformed text it is only an estimate, and the parser reports the
// real problem.
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

// Error "<what>: JSON nested deeper than <limit> levels (at byte N)" when the text is too deep.
Status check_json_depth(std::string_view text, std::string_view what, int limit = kMaxJsonDepth);

}  // namespace dsinfer::io
