// Leftmost-longest added-token matching with the single_word / lstrip / rstrip rules of HF tokenizers.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer {
namespace {

// Rust char::is_whitespace (Unicode White_Space).
bool is_ws(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
// HF's "word" test for single_word: alphanumeric or '_' (approximated for non-ASCII by "not whitespace and
// not ASCII punctuation"; only used by tokens with single_word=true).
bool is_word_char(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !is_ws(c);
}
// Code point ending at byte `end` (exclusive) in s; s is valid UTF-8.
uint32_t cp_before(std::string_view s, size_t end, size_t* start) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len;
  *start = i;
  return utf8_decode(s, i, &len);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens) {
  nodes_.emplace_back();
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    int32_t node = 0;
    for (unsigned char b : t->content) {
      int32_t c = child(node, b);
      if (c < 0) {
        c = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& edges = nodes_[node].edges;
        edges.insert(std::lower_bound(edges.begin(), edges.end(), std::make_pair(b, int32_t(-1))), {b, c});
      }
      node = c;
    }
    if (!nodes_[node].token) nodes_[node].token = t;  // first definition of a spelling wins
    first_byte_[static_cast<unsigned char>(t->content[0])] = true;
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char b) const {
  const auto& edges = nodes_[node].edges;
  auto it = std::lower_bound(edges.begin(), edges.end(), std::make_pair(b, int32_t(-1)));
  return it != edges.end() && it->first == b ? it->second : -1;
}

void AddedTokenMatcher::find(std::string_view text, Span range, std::vector<Match>& out) const {
  if (empty()) return;
  uint32_t start_offset = range.first;  // end of the previous emitted match
  for (uint32_t i = range.first; i < range.second;) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    // Longest match at i.
    const AddedToken* best = nullptr;
    uint32_t best_end = 0;
    int32_t node = 0;
    for (uint32_t k = i; k < range.second; ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      if (nodes_[node].token) {
        best = nodes_[node].token;
        best_end = k + 1;
      }
    }
    if (!best) {
      ++i;
      continue;
    }
    uint32_t b = i, e = best_end;
    i = best_end;  // matches never overlap, even when this one is rejected below
    if (best->single_word) {
      size_t cs;
      bool start_ok = b == range.first || !is_word_char(cp_before(text, b, &cs));
      size_t len;
      bool end_ok = e == range.second || !is_word_char(utf8_decode(text, e, &len));
      if (!start_ok || !end_ok) continue;
    }
    if (best->lstrip) {
      while (b > start_offset) {
        size_t cs;
        if (!is_ws(cp_before(text, b, &cs))) break;
        b = static_cast<uint32_t>(cs);
      }
    }
    if (best->rstrip) {
      while (e < range.second) {
        size_t len;
        if (!is_ws(utf8_decode(text, e, &len))) break;
        e += static_cast<uint32_t>(len);
      }
      i = e;
    }
    out.push_back(Match{best, b, e});
    start_offset = e;
  }
}

}  // namespace dsinfer::tokenizer
