// JSON text as the DeepSeek-V4 prompt shows it: deepseek-recipe's stringify_spaced (serde_json 1.0.151 with
// ", " / ": " separators, keys in the order given, non-ASCII kept). Numbers follow serde_json: integers as
// written (i64 / u64 range), other numbers in the shortest round-trip digits, positional when the decimal
// exponent is in [-5, 16) ("1000000000000000.0", "0.00001", "-0.0"), otherwise scientific ("1e+16", "1.5e-7").
// DeepSeek-V4.1 prints numbers as its release encoder does (Python's json.dumps, which deepseek-recipe's V4.1
// encoding reproduces): positional only for exponents in [-4, 16), exponents of at least two digits ("1e-05",
// "1.5e-07", "1e+16"); integers as for V4 (docs/decisions.md, 2026-12-02).
#pragma once
#include <string>

#include "chat/chat_types.h"

namespace dsinfer::chat {

enum class JsonNumbers { kSerde, kPython };  // V4 / V4.1 (chat_encoding.h: numbers_of)

std::string dump_python_style(const ojson& v, JsonNumbers numbers = JsonNumbers::kSerde);

// One number (v.is_number()) in the notation above.
std::string format_json_number(const ojson& v, JsonNumbers numbers = JsonNumbers::kSerde);

}  // namespace dsinfer::chat
