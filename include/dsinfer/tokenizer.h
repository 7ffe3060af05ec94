// dsinfer public tokenizer API: a Hugging Face tokenizer.json (byte-level BPE, as DeepSeek-V4 ships) for encode
// and decode, the same tokenizer the engine uses. No third-party types here; errors come back as text.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer {

namespace tokenizer {
class Tokenizer;
}

class Tokenizer {
 public:
  // Loads a tokenizer.json. nullptr on failure, with *error naming the file and the offending field.
  static std::unique_ptr<Tokenizer> load(const std::string& path, std::string* error);
  ~Tokenizer();

  // Appends the token ids of `text` to *ids. special_tokens = true: added-token spellings in the text become
  // their ids (Hugging Face `encode(text, add_special_tokens=False)`); false: the whole text is plain text, so
  // user text cannot produce control tokens. Fails (naming the byte offset) when text is not valid UTF-8;
  // *ids is then unchanged.
  bool encode(std::string_view text, std::vector<int32_t>* ids, std::string* error, bool special_tokens = true) const;
  // The text of `ids` (invalid UTF-8 from partial tokens becomes U+FFFD). Fails naming the first id outside
  // [0, vocab_size()).
  bool decode(std::span<const int32_t> ids, std::string* text, std::string* error,
              bool skip_special_tokens = false) const;
  // Number of token ids (the largest id + 1).
  size_t vocab_size() const;

 private:
  Tokenizer();
  std::unique_ptr<tokenizer::Tokenizer> impl_;
};

}  // namespace dsinfer
