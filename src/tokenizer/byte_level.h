// GPT-2 byte-level alphabet: each byte 0..255 is spelled as one printable code point in vocab strings
// (printable Latin-1 bytes as themselves, the rest as U+0100 + k). Used by the ByteLevel pre-tokenizer/decoder.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsinfer::tokenizer {

// Code point that spells byte b.
uint32_t byte_to_codepoint(uint8_t b);
// Byte spelled by code point cp, or -1 if cp is not in the byte-level alphabet.
int codepoint_to_byte(uint32_t cp);
// Byte-level spelling (UTF-8) of raw bytes.
std::string bytes_to_byte_level(std::string_view raw);
// Raw bytes of a vocab string. Mirrors HF's ByteLevel decoder: when any code point of `token` is outside the
// alphabet (or `token` is not valid UTF-8), the token's own UTF-8 bytes are returned unchanged.
std::string byte_level_to_bytes(std::string_view token);

}  // namespace dsinfer::tokenizer
