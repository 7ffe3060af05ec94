// serde_json-compatible number and value printing for prompt text (see chat_json.h).
#include "chat/chat_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace dsinfer::chat {
namespace {

// Shortest round-trip digits of |d| and the decimal exponent of the first digit (d = 0.DIGITS * 10^(exp+1)).
void shortest_digits(double d, std::string& digits, int& exp) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), std::fabs(d), std::chars_format::scientific);
  std::string_view s(buf, size_t(r.ptr - buf));  // "1.2345e+15", "5e-324"
  size_t e = s.find('e');
  digits.clear();
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  exp = std::atoi(std::string(s.substr(e + 1)).c_str());
}

std::string format_double(double d, JsonNumbers numbers) {
  if (!std::isfinite(d)) return "null";  // JSON text cannot hold these; serde_json writes null as well
  std::string digits;
  int exp = 0;
  shortest_digits(d, digits, exp);
  std::string out;
  if (std::signbit(d)) out.push_back('-');
  const int lowest_positional = numbers == JsonNumbers::kPython ? -4 : -5;
  if (exp >= lowest_positional && exp < 16) {
    if (exp >= 0) {
      const size_t int_len = size_t(exp) + 1;
      out.append(digits, 0, std::min(int_len, digits.size()));
      if (digits.size() < int_len) out.append(int_len - digits.size(), '0');
      out.push_back('.');
      if (digits.size() > int_len) out.append(digits, int_len, std::string::npos);
      else out.push_back('0');
    } else {
      out.append("0.");
      out.append(size_t(-exp - 1), '0');
      out.append(digits);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  out.append(exp < 0 ? "e-" : "e+");
  if (numbers == JsonNumbers::kPython && std::abs(exp) < 10) out.push_back('0');
  out.append(std::to_string(std::abs(exp)));
  return out;
}

}  // namespace

std::string format_json_number(const ojson& v, JsonNumbers numbers) {
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return format_double(v.get<double>(), numbers);
}

std::string dump_python_style(const ojson& v, JsonNumbers numbers) {
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += ojson(it.key()).dump(-1, ' ', false, ojson::error_handler_t::replace);
      out += ": ";
      out += dump_python_style(it.value(), numbers);
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      out += dump_python_style(v[i], numbers);
    }
    return out + "]";
  }
  if (v.is_number()) return format_json_number(v, numbers);
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace dsinfer::chat
