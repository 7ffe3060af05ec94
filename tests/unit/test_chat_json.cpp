// JSON in the V4 prompt: numbers as deepseek-recipe 0.2.0 prints them (serde_json 1.0.151), each pair below
// observed from the reference (a tool schema "default" parsed from the left spelling, as rendered).
#include <gtest/gtest.h>

#include "chat/chat_json.h"

namespace dsinfer::chat {
namespace {

TEST(ChatJson, NumbersAsTheReferencePrintsThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"1e15", "1000000000000000.0"}, {"1e16", "1e+16"}, {"1e-5", "0.00001"}, {"-1e-5", "-0.00001"},
      {"1e-4", "0.0001"}, {"1e-6", "1e-6"}, {"1.5e-7", "1.5e-7"}, {"-0.0", "-0.0"}, {"0.0", "0.0"}, {"0", "0"},
      {"1.0", "1.0"}, {"100.0", "100.0"}, {"1E+2", "100.0"}, {"0.1", "0.1"}, {"1e21", "1e+21"},
      {"123456789012345678901234", "1.2345678901234569e+23"}, {"5e-324", "5e-324"},
      {"1.7976931348623157e308", "1.7976931348623157e+308"}, {"12345678901234567.0", "1.2345678901234568e+16"},
      {"1234567890123456.0", "1234567890123456.0"}, {"2.5e-5", "0.000025"}, {"-1.5e20", "-1.5e+20"},
      {"18446744073709551615", "18446744073709551615"}, {"18446744073709551616", "1.8446744073709552e+19"},
      {"-9223372036854775808", "-9223372036854775808"}, {"-9223372036854775809", "-9.223372036854776e+18"},
      {"9.999999999999998e15", "9999999999999998.0"}, {"1234567890123456.8", "1234567890123456.8"},
      {"9.99999e-6", "9.99999e-6"}, {"123e-7", "0.0000123"}, {"1e0", "1.0"}, {"2e1", "20.0"},
      {"3e-100", "3e-100"}, {"1.25e+100", "1.25e+100"}, {"0.000123", "0.000123"}, {"3.14159", "3.14159"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(format_json_number(ojson::parse(in)), want) << in;
  // Divergence (docs/decisions.md): the integer literal -0 is 0 here; serde_json reads it as the float -0.0.
  EXPECT_EQ(format_json_number(ojson::parse("-0")), "0");
}

// DeepSeek-V4.1: Python's json.dumps notation (the release encoder; deepseek-recipe's DeepseekV41Encoding prints the
// same), each right side observed from recipe 0.2.0 (tools/chat/gen_chat_diff.py --family v41).
TEST(ChatJson, V41NumbersAsPythonPrintsThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"1e-05", "1e-05"}, {"1e-5", "1e-05"}, {"-1e-05", "-1e-05"}, {"1e-4", "0.0001"}, {"1.5e-7", "1.5e-07"},
      {"2.5e-8", "2.5e-08"}, {"7.0E-10", "7e-10"}, {"3.0", "3.0"}, {"1E2", "100.0"}, {"1.0e+05", "100000.0"},
      {"1e15", "1000000000000000.0"}, {"1e16", "1e+16"}, {"1e21", "1e+21"}, {"5e-324", "5e-324"},
      {"1.7976931348623157e308", "1.7976931348623157e+308"}, {"20240501.120000", "20240501.12"}, {"-0.0", "-0.0"},
      {"1e-400", "0.0"}, {"0.30000000000000004", "0.30000000000000004"}, {"9007199254740993", "9007199254740993"},
      {"123456789012345678901234567890", "1.2345678901234568e+29"}, {"3e-100", "3e-100"}, {"42", "42"},
  };
  for (const auto& [in, want] : cases)
    EXPECT_EQ(format_json_number(ojson::parse(in), JsonNumbers::kPython), want) << in;
  EXPECT_EQ(dump_python_style(ojson::parse(R"({"a": [1e-05, 2]})"), JsonNumbers::kPython), R"({"a": [1e-05, 2]})");
}

TEST(ChatJson, SeparatorsKeyOrderAndStrings) {
  const ojson v = ojson::parse(R"({"z": [1, 2.5, {"b": null, "a": true}], "é\n\"": "\u0001\u007f\u2028 ok", "n": -0.0})");
  EXPECT_EQ(dump_python_style(v), "{\"z\": [1, 2.5, {\"b\": null, \"a\": true}], \"é\\n\\\"\": \"\\u0001\x7f\u2028 ok\", \"n\": -0.0}");
}

}  // namespace
}  // namespace dsinfer::chat
