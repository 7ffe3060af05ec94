// UTF-8 helpers for the tokenizer: validation with a byte offset for errors, code-point iteration, and the
// lossy decoding rule (one U+FFFD per maximal invalid subpart, as Rust's String::from_utf8_lossy / WHATWG).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsinfer::tokenizer {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there are not a complete valid
// sequence (overlongs, surrogates and > U+10FFFF are invalid). `incomplete` is set when the bytes are a valid
// prefix of a sequence that the end of `s` cut short.
size_t utf8_valid_len(std::string_view s, size_t i, bool* incomplete = nullptr);

// Offset of the first invalid byte, or npos when `s` is entirely valid UTF-8.
size_t utf8_first_invalid(std::string_view s);

// Appends `s` to `out` replacing each maximal invalid subpart by U+FFFD (EF BF BD).
void utf8_append_lossy(std::string_view s, std::string& out);

// Appends code point `cp` (must be a valid scalar value) to `out`.
void utf8_append(uint32_t cp, std::string& out);

// Decodes the valid sequence at s[i] (caller checked validity); sets *len.
uint32_t utf8_decode(std::string_view s, size_t i, size_t* len);

}  // namespace dsinfer::tokenizer
