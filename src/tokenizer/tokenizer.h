// Tokenizer: a Hugging Face tokenizer.json (byte-level BPE + regex pre-tokenizer + added tokens) for encode and
// decode. encode(kWithAddedTokens) == HF `encode(text, add_special_tokens=False)`; kPlainText ignores added
// tokens so user text cannot produce control tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace dsinfer::tokenizer {

enum class EncodeMode {
  kWithAddedTokens,  // added-token spellings in the text become their ids (HF default)
  kPlainText,        // the whole text is ordinary text, added-token spellings included
};

class Tokenizer {
 public:
  // Loads a tokenizer.json file / its contents. Errors name the file and the offending field.
  static Result<std::unique_ptr<Tokenizer>> from_file(const std::string& path);
  static Result<std::unique_ptr<Tokenizer>> from_json_text(std::string_view json_text, std::string_view source_name);

  // Appends the ids of `text` to `out`. Fails (with the byte offset) when `text` is not valid UTF-8; `out` is
  // then left as it was. Thread-safe: calls are serialised on an internal mutex (the word cache is shared).
  Status encode(std::string_view text, std::vector<int32_t>& out, EncodeMode mode = EncodeMode::kWithAddedTokens) const;
  Result<std::vector<int32_t>> encode(std::string_view text, EncodeMode mode = EncodeMode::kWithAddedTokens) const;

  // HF decode (ByteLevel decoder): concatenated token bytes, invalid UTF-8 replaced by U+FFFD per maximal
  // subpart. An id outside [0, vocab_size()) is an error naming it.
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Raw bytes of one token (may be a partial UTF-8 sequence); empty for an unused id.
  std::string_view token_bytes(int32_t id) const;
  bool is_valid_id(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < id_offsets_.size() - 1; }
  bool is_special(int32_t id) const;
  // Id of an added token or vocab entry spelled `content` (vocab spelling is byte-level), if any.
  std::optional<int32_t> token_to_id(std::string_view content) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  size_t vocab_size() const { return id_offsets_.size() - 1; }

 private:
  Tokenizer() = default;
  Status encode_plain(std::string_view text, Span range, std::vector<int32_t>& out) const;

  std::vector<AddedToken> added_;
  std::unordered_map<std::string, int32_t> vocab_;       // byte-level spelling -> id
  std::unordered_map<std::string, int32_t> added_ids_;   // added-token content -> id
  std::vector<char> is_special_;
  std::string id_bytes_;              // raw bytes of every id, concatenated
  std::vector<uint32_t> id_offsets_;  // id -> [offsets[id], offsets[id+1]) in id_bytes_
  AddedTokenMatcher raw_matcher_;         // normalized=false tokens, matched on the raw text first
  AddedTokenMatcher normalized_matcher_;  // normalized=true tokens, matched in the gaps

  mutable std::mutex mu_;
  mutable std::unique_ptr<Pretokenizer> pre_;
  mutable std::unique_ptr<BpeModel> bpe_;
  mutable std::vector<Span> pieces_;
  mutable std::vector<AddedTokenMatcher::Match> matches_, matches2_;
};

}  // namespace dsinfer::tokenizer
