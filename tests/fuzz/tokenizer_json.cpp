// Fuzz target: tokenizer.json text -> Tokenizer, then encode / decode a fixed text and every id.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsinfer;
  auto t = tokenizer::Tokenizer::from_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!t.is_ok()) return 0;
  const tokenizer::Tokenizer& tok = **t;
  std::vector<int32_t> ids;
  for (auto mode : {tokenizer::EncodeMode::kWithAddedTokens, tokenizer::EncodeMode::kPlainText}) {
    ids.clear();
    (void)tok.encode("Hello, world! 123 <｜User｜>  héllo\n\n", ids, mode);
    (void)tok.decode(ids, false);
    (void)tok.decode(ids, true);
  }
  std::vector<int32_t> all;
  for (int32_t i = 0; i < int32_t(tok.vocab_size()) && i < 4096; ++i) all.push_back(i);
  all.push_back(int32_t(tok.vocab_size()));  // out of range: an error, not a crash
  (void)tok.decode(all, false);
  return 0;
}
