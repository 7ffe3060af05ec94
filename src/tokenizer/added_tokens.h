// Added tokens (tokenizer.json "added_tokens"): their flags and the leftmost-longest matcher that splits text
// around them before pre-tokenization, with HF's two passes (non-normalized tokens, then normalized ones).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"

namespace dsinfer::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// A byte trie over token spellings; immutable after construction.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(const std::vector<const AddedToken*>& tokens);
  bool empty() const { return nodes_.size() <= 1; }

  struct Match {
    const AddedToken* token;
    uint32_t begin, end;  // the whole span the token absorbs (incl. lstrip/rstrip whitespace)
  };
  // Finds the matches in text[range) (HF AddedVocabulary::find_matches): leftmost-longest, then single_word,
  // lstrip and rstrip applied. Appends to `out`.
  void find(std::string_view text, Span range, std::vector<Match>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> edges;  // sorted by byte
    const AddedToken* token = nullptr;
  };
  int32_t child(int32_t node, unsigned char b) const;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace dsinfer::tokenizer
