// Streaming detokenizer: turns token ids into text as they arrive without ever emitting a broken UTF-8
// sequence. Policy for invalid bytes: identical to Tokenizer::decode (one U+FFFD per maximal invalid subpart),
// so the concatenation of all push() results plus finish() equals decode(all ids), byte for byte.
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::tokenizer {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = false)
      : tok_(tok), skip_special_(skip_special_tokens) {}

  // Appends to `out` the text that is final after `id`: complete characters only. Bytes that may still
  // become a valid character (at most 3) are held back; bytes that can no longer become one are emitted as
  // U+FFFD right away. An unknown id is an error and changes nothing.
  Status push(int32_t id, std::string& out);
  // End of stream: a held-back incomplete sequence becomes one U+FFFD.
  void finish(std::string& out);
  // Bytes currently held back (0..3).
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace dsinfer::tokenizer
