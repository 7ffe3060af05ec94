// GPT-2 byte <-> code point tables (openai/gpt-2 encoder.py bytes_to_unicode, as HF tokenizers' ByteLevel).
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer {
namespace {

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // all alphabet code points are < 0x144
  Tables() {
    to_byte.fill(-1);
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : 256 + extra++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const Tables& tables() {
  static const Tables t;  // immutable after construction
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) { return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1; }

std::string bytes_to_byte_level(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) utf8_append(byte_to_codepoint(c), out);
  return out;
}

std::string byte_level_to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    size_t len = utf8_valid_len(token, i);
    if (len == 0) return std::string(token);
    uint32_t cp = utf8_decode(token, i, &len);
    int b = codepoint_to_byte(cp);
    if (b < 0) return std::string(token);
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return out;
}

}  // namespace dsinfer::tokenizer
