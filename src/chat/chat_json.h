// JSON text as the DeepSeek-V4 prompt shows it: deepseek-recipe's stringify_spaced (serde_json 1.0.151 with
// ", " / ": " separators, keys in the order given, non-ASCII kept). Numbers follow serde_json: integers as
// written (i64 / u64 range), other numbers in the shortest round-trip digits, positional when the decimal
// exponent is in [-5, 16) ("1000000000000000.0", "0.00001", "-0.0"), otherwise scientific ("1e+16", "1.5e-7").
#pragma once
#include <string>

#include "chat/chat_types.h"

namespace dsinfer::chat {

std::string dump_python_style(const ojson& v);

// One number (v.is_number()) in the notation above.
std::string format_json_number(const ojson& v);

}  // namespace dsinfer::chat
