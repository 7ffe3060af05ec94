// io::parse_json (the linear-time parser of untrusted JSON): the same values, key order and duplicate-key rule as
// nlohmann's own ordered_json parser, on small and large objects, and clear errors.
#include <gtest/gtest.h>

#include <string>

#include "io/json_parse.h"

namespace {

using ojson = nlohmann::ordered_json;

void expect_same(const std::string& text) {
  auto mine = dsinfer::io::parse_json(text, "test");
  ASSERT_TRUE(mine.is_ok()) << mine.status().message();
  const ojson ref = ojson::parse(text);
  EXPECT_EQ(mine->dump(), ref.dump()) << text.substr(0, 200);
}

TEST(JsonParse, SameAsNlohmann) {
  expect_same(R"({"b": 1, "a": [1, 2.5, -3, 18446744073709551615, true, null, "x"], "c": {"z": {}, "y": []}})");
  expect_same(R"([{"k": 1, "k": 2, "j": 3, "k": 4}])");  // duplicates: the last value at the first position
  expect_same(R"("just a string")");
  expect_same("17");
  std::string big = "{";  // past the linear-scan threshold, with duplicates before and after it
  for (int i = 0; i < 300; ++i) big += "\"k" + std::to_string(i % 200) + "\": " + std::to_string(i) + ",";
  big += "\"last\": {\"a\": 1, \"a\": 2}}";
  expect_same(big);
}

TEST(JsonParse, ErrorsNameTheInput) {
  auto r = dsinfer::io::parse_json("{\"a\": ", "request body");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("request body is not valid JSON"), std::string::npos) << r.status().message();
  r = dsinfer::io::parse_json(std::string(200, '[') + std::string(200, ']'), "request body");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nested deeper"), std::string::npos) << r.status().message();
  EXPECT_FALSE(dsinfer::io::parse_json("{} extra", "x").is_ok());
  EXPECT_FALSE(dsinfer::io::parse_json("", "x").is_ok());
}

}  // namespace
