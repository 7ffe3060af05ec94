// Fuzz target: arbitrary text through the shipped DeepSeek-V4 tokenizer (both encode modes), the decode of the
// result (must round-trip), the streaming decoder, and the input bytes read as token ids for decode.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsinfer;
  const tokenizer::Tokenizer& tok = fuzz::shipped_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = tokenizer::utf8_first_invalid(text) == std::string_view::npos;
  for (auto mode : {tokenizer::EncodeMode::kWithAddedTokens, tokenizer::EncodeMode::kPlainText}) {
    std::vector<int32_t> ids;
    Status s = tok.encode(text, ids, mode);
    if (s.is_ok() != valid) std::abort();  // fails exactly on invalid UTF-8
    if (!s.is_ok()) continue;
    auto back = tok.decode(ids, false);
    if (!back.is_ok()) std::abort();
    // Byte-level BPE is lossless; added tokens may absorb whitespace (lstrip / rstrip), so only plain text
    // must round-trip exactly.
    if (mode == tokenizer::EncodeMode::kPlainText && *back != text) std::abort();
    tokenizer::StreamDecoder sd(tok, /*skip_special_tokens=*/false);
    std::string streamed;  // push() and finish() append
    for (int32_t id : ids)
      if (!sd.push(id, streamed).is_ok()) std::abort();
    sd.finish(streamed);
    if (streamed != *back) std::abort();
  }
  // The same bytes as token ids (ids outside the vocabulary are errors).
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  for (int32_t& id : ids) id = int32_t(uint32_t(id) % uint32_t(tok.vocab_size() + 8));
  (void)tok.decode(ids, true);
  return 0;
}
