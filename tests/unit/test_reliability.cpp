// Regression tests for issue 18 (reliability) at the library level: deep JSON everywhere it enters, the n cap,
// unsupported OpenAI fields, corrupt model files (config.json, tokenizer.json, safetensors), the max_tokens
// overflow and non-finite logits failing only the affected requests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dsinfer/batch.h"
#include "dsinfer/engine.h"
#include "dsinfer/request.h"
#include "dsinfer/tokenizer.h"
#include "io/config.h"
#include "io/json_limits.h"
#include "io/safetensors.h"
#include "model/deepseek_v4.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string nested(int depth, const std::string& open = "[", const std::string& close = "]") {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(JsonDepth, ScannerIgnoresBracketsInStrings) {
  EXPECT_EQ(io::json_nesting_depth(R"({"a": "[[[[{{{{", "b": [1, [2]]})"), 3);
  EXPECT_EQ(io::json_nesting_depth(R"(["\"[[[["])"), 1);
  EXPECT_EQ(io::json_nesting_depth(nested(1000), 128), 129);
  EXPECT_TRUE(io::check_json_depth(nested(128), "x").is_ok());
  Status s = io::check_json_depth(nested(129), "x");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("x: JSON nested deeper than 128 levels"), std::string::npos) << s.message();
}

// Defect 4: JSON nested 100,000 deep in custom_id, method, an extra body field or a json_schema crashed when the
// error record (or the prompt) dumped it.
TEST(JsonDepth, DeepBatchLinesAreErrorsNotCrashes) {
  const std::string deep = nested(100000);
  const std::string deep_obj = nested(100000, "{\"a\":", "}");  // {"a":{"a":...}} (invalid JSON at the core)
  const std::vector<std::string> lines = {
      R"({"custom_id": )" + deep + R"(, "body": {"prompt": [1]}})",
      R"({"custom_id": "x", "method": )" + deep + R"(, "body": {"prompt": [1]}})",
      R"({"custom_id": "x", "body": {"prompt": [1], "extra": )" + deep + "}}",
      R"({"custom_id": "x", "body": {"messages": [{"role": "user", "content": "hi"}], "response_format": )"
      R"({"type": "json_schema", "json_schema": {"name": "s", "schema": )" + deep + "}}}}",
      deep_obj,
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    BatchLine bl;
    std::string err;
    EXPECT_FALSE(parse_batch_line(lines[i], i + 1, &bl, &err)) << i;
    EXPECT_NE(err.find("nested deeper than 128"), std::string::npos) << i << ": " << err.substr(0, 200);
    const std::string rec = batch_error_line(i + 1, bl.custom_id, "invalid_request", err);
    EXPECT_FALSE(json::parse(rec, nullptr, false).is_discarded());
  }
  Request r;
  std::string err;
  EXPECT_FALSE(parse_request(R"({"prompt": [1], "x": )" + deep + "}", Endpoint::kCompletions, &r, &err));
  EXPECT_NE(err.find("nested deeper"), std::string::npos) << err;
}

TEST(JsonDepth, DeepToolCallArgumentsAreAnError) {
  // A JSON string holding deep JSON passes the line check; the arguments parser must bound it too.
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}},
                                         {{"role", "assistant"},
                                          {"content", ""},
                                          {"tool_calls", json::array({{{"id", "c1"},
                                                                       {"type", "function"},
                                                                       {"function", {{"name", "f"}, {"arguments", "{\"a\":" + nested(100000) + "}"}}}}})}},
                                         {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}})}};
  Request r;
  std::string err;
  EXPECT_FALSE(parse_request(body.dump(), Endpoint::kChatCompletions, &r, &err));
  EXPECT_NE(err.find("nested deeper than 128"), std::string::npos) << err.substr(0, 300);
}

TEST(JsonDepth, DeepModelFilesAreErrors) {
  auto c = io::parse_model_config_json("{\"x\": " + nested(100000) + "}", "config.json");
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("config.json: JSON nested deeper"), std::string::npos);
  auto t = tokenizer::Tokenizer::from_json_text("{\"normalizer\": " + nested(100000) + "}", "tok.json");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("nested deeper"), std::string::npos) << t.status().message();
  std::string header = "{\"t\": " + nested(100000) + "}";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  std::map<std::string, io::TensorView> tensors;
  std::map<std::string, std::string> meta;
  Status s = io::parse_safetensors(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "m.safetensors", tensors, meta);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("m.safetensors: header: JSON nested deeper"), std::string::npos) << s.message();
}

// Found by fuzz_chat_request: a "type" of another JSON type made json::value() throw out of the chat parser
// (std::terminate in `generate`, losing the whole batch).
TEST(RequestLimits, NonStringTypeFieldsInChatRequests) {
  const std::string user = R"({"role": "user", "content": "hi"})";
  for (const std::string& body : std::vector<std::string>{
           R"({"messages": [)" + user + R"(], "tools": [{"type": {"name": "f"}, "function": {"name": "f"}}]})",
           R"({"messages": [{"role": "user", "content": [{"type": ["text"], "text": "x"}]}]})",
           R"({"messages": [)" + user + R"(], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": 1, "function": {"name": "f"}}})",
       }) {
    Request r;
    std::string err;
    EXPECT_FALSE(parse_request(body, Endpoint::kChatCompletions, &r, &err)) << body;
    EXPECT_FALSE(err.empty());
  }
}

// Defect 5: n had no cap (OpenAI caps it at 128); n = 2^31-1 exhausted memory.
TEST(RequestLimits, NIsCappedAt128) {
  Request r;
  std::string err;
  EXPECT_TRUE(parse_request(R"({"prompt": [1], "n": 128})", Endpoint::kCompletions, &r, &err)) << err;
  EXPECT_FALSE(parse_request(R"({"prompt": [1], "n": 2147483647})", Endpoint::kCompletions, &r, &err));
  EXPECT_NE(err.find("n must be at most 128, got 2147483647"), std::string::npos) << err;
}

// Defect 9: fields dsinfer does not implement were silently accepted.
TEST(RequestLimits, UnsupportedFieldsAreRejected) {
  struct Case { std::string body; Endpoint ep; std::string want; };
  const std::vector<Case> cases = {
      {R"({"prompt": [1], "echo": true})", Endpoint::kCompletions, "'echo' is not supported"},
      {R"({"prompt": [1], "suffix": "x"})", Endpoint::kCompletions, "'suffix' is not supported"},
      {R"({"prompt": [1], "best_of": 3})", Endpoint::kCompletions, "'best_of' is not supported"},
      // (response_format on completions is not ignored: it constrains the output, src/structured.)
      {R"({"prompt": [1], "response_format": {"type": "xml"}})", Endpoint::kCompletions, "response_format.type must be"},
      {R"({"prompt": [1], "stream": "yes"})", Endpoint::kCompletions, "'stream' must be true or false"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": 1})", Endpoint::kChatCompletions, "'stream' must be true or false"},
  };
  for (const Case& c : cases) {
    Request r;
    std::string err;
    EXPECT_FALSE(parse_request(c.body, c.ep, &r, &err)) << c.body;
    EXPECT_NE(err.find(c.want), std::string::npos) << c.body << " -> " << err;
  }
  Request r;
  std::string err;
  EXPECT_TRUE(parse_request(R"({"prompt": [1], "echo": false, "suffix": null, "best_of": 1, "stream": false, "model": "m", "user": "u"})",
                            Endpoint::kCompletions, &r, &err)) << err;
  BatchLine bl;
  EXPECT_FALSE(parse_batch_line(R"({"custom_id": "s", "body": {"prompt": [1], "stream": "true"}})", 1, &bl, &err));
  EXPECT_NE(err.find("'stream' must be true or false"), std::string::npos) << err;
}

// Defect 6: corrupt config.json values crashed (uncaught type_error) or were allocated from.
TEST(CorruptModel, ConfigValuesAreCheckedWithTheKey) {
  const std::string base = read_text(test::own_fixture("tiny-v4-c") + "/config.json");
  auto with = [&](const char* key, json v) {
    json j = json::parse(base);
    j[key] = v;
    auto c = io::parse_model_config_json(j.dump(), "cfg/config.json");
    return c.is_ok() ? std::string("ok") : c.status().message();
  };
  EXPECT_EQ(with("eos_token_id", json::array({1, 0})), "ok");
  EXPECT_NE(with("eos_token_id", json::array({"x"})).find("cfg/config.json: 'eos_token_id[0]' must be an integer"), std::string::npos)
      << with("eos_token_id", json::array({"x"}));
  EXPECT_NE(with("eos_token_id", 256).find("'eos_token_id' = 256 is outside the vocabulary [0, 256)"), std::string::npos);
  EXPECT_NE(with("vocab_size", int64_t(1) << 40).find("'vocab_size' must be in [1, 16777216], found 1099511627776"),
            std::string::npos) << with("vocab_size", int64_t(1) << 40);
  EXPECT_NE(with("hidden_size", 1e300).find("'hidden_size' must be an integer"), std::string::npos) << with("hidden_size", 1e300);
  EXPECT_NE(with("hidden_size", uint64_t(1) << 63).find("'hidden_size' must be an integer"), std::string::npos);
}

// A config.json whose sizes are in range but do not match the checkpoint: the loader must report the tensor
// before allocating [vocab_size, hidden_size] floats (2^48 here: allocating first threw std::bad_alloc).
TEST(CorruptModel, ShapeIsCheckedBeforeAllocation) {
  test::ScratchDir d("bigvocab");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(test::own_fixture("tiny-v4-c") + "/" + f, d.path / f);
  json j = json::parse(read_text((d.path / "config.json").string()));
  j["vocab_size"] = 1 << 24;
  j["hidden_size"] = 1 << 24;
  std::ofstream(d.path / "config.json") << j.dump();
  auto m = model::DeepseekV4Cpu::load(d.str(), model::Numerics::hf());
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("tensor 'embed.weight'"), std::string::npos) << m.status().message().substr(0, 400);
}

std::string tiny_tokenizer_json(const std::string& added_id) {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
             "added_tokens": [{"id": )" + added_id + R"(, "content": "<x>", "special": true}]})";
}

// Defect 6: an added-token id of 2^31-1 overflowed max_id + 1; 4e8 allocated 400 million strings.
TEST(CorruptModel, FarOutAddedTokenIdIsAnError) {
  auto ok = tokenizer::Tokenizer::from_json_text(tiny_tokenizer_json("3"), "tok.json");
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_EQ((*ok)->vocab_size(), 4u);
  for (const char* id : {"2147483647", "400000000", "70000"}) {
    auto t = tokenizer::Tokenizer::from_json_text(tiny_tokenizer_json(id), "tok.json");
    ASSERT_FALSE(t.is_ok()) << id;
    EXPECT_NE(t.status().message().find(std::string("tokenizer \"tok.json\": added_tokens[0].id = ") + id +
                                        " is far outside the vocabulary"),
              std::string::npos)
        << t.status().message();
  }
  auto v = tokenizer::Tokenizer::from_json_text(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2147483647}, "merges": []}})", "tok.json");
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.status().message().find("model.vocab[\"b\"] = 2147483647 is far outside"), std::string::npos)
      << v.status().message();
}

// Found by fuzz_tokenizer_json: a non-string "type" made json::value() throw out of the loader (terminate).
TEST(CorruptModel, NonStringTypeFieldsInTokenizerJson) {
  for (const char* text : {R"({"model": {"type": [1], "vocab": {}, "merges": []}})",
                           R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": 5}})",
                           R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": {"type": {}}})"}) {
    auto t = tokenizer::Tokenizer::from_json_text(text, "tok.json");
    ASSERT_FALSE(t.is_ok()) << text;
    EXPECT_NE(t.status().message().find("not supported"), std::string::npos) << t.status().message();
  }
}

TEST(CorruptModel, SafetensorsShapeOverflowIsAnError) {
  // 2^32 x 2^32 F32 elements wrap to 0 bytes in 64-bit arithmetic: it must not pass as an empty tensor.
  const std::string header = R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  std::map<std::string, io::TensorView> tensors;
  std::map<std::string, std::string> meta;
  Status s = io::parse_safetensors(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "m.safetensors", tensors, meta);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("m.safetensors: tensor 'w': shape [4294967296,4294967296] needs more bytes"), std::string::npos)
      << s.message();
}

TEST(PublicTokenizer, EncodeDecodeAndErrors) {
  std::string err;
  EXPECT_EQ(Tokenizer::load("/nonexistent/tokenizer.json", &err), nullptr);
  EXPECT_NE(err.find("/nonexistent/tokenizer.json"), std::string::npos) << err;
  auto tok = Tokenizer::load(test::source_dir() + "/models/dsv4-small/tokenizer.json", &err);
  ASSERT_NE(tok, nullptr) << err;
  std::vector<int32_t> ids, plain;
  ASSERT_TRUE(tok->encode("hello <｜User｜> world", &ids, &err)) << err;
  ASSERT_TRUE(tok->encode("hello <｜User｜> world", &plain, &err, /*special_tokens=*/false)) << err;
  EXPECT_LT(ids.size(), plain.size());  // the control token is one id only when special tokens are on
  std::string text;
  ASSERT_TRUE(tok->decode(ids, &text, &err)) << err;
  EXPECT_EQ(text, "hello <｜User｜> world");
  ASSERT_TRUE(tok->decode(plain, &text, &err)) << err;
  EXPECT_EQ(text, "hello <｜User｜> world");
  EXPECT_FALSE(tok->encode("caf\xe9", &ids, &err));
  EXPECT_NE(err.find("not valid UTF-8"), std::string::npos) << err;
  const std::vector<int32_t> bad = {1, int32_t(tok->vocab_size())};
  EXPECT_FALSE(tok->decode(bad, &text, &err));
  EXPECT_NE(err.find("outside the vocabulary"), std::string::npos) << err;
}

// Defect 3: max_tokens = INT64_MAX overflowed the context check and the batch never finished; now it is a
// per-request error and the other requests complete.
TEST(RequestLimits, HugeMaxTokensIsAnErrorAndTheRestFinish) {
  EngineOptions eo;
  eo.model_dir = test::own_fixture("tiny-v4-c");
  eo.max_model_len = 64;
  std::string err;
  auto e = Engine::create(eo, &err);
  ASSERT_NE(e, nullptr) << err;
  EXPECT_EQ(e->submit(R"({"prompt": [5, 6], "max_tokens": 9223372036854775807, "ignore_eos": true})", &err), 0u);
  EXPECT_NE(err.find("max_tokens 9223372036854775807 + prompt 2 tokens exceeds max_model_len 64"), std::string::npos) << err;
  EXPECT_EQ(e->submit(R"({"prompt": [5, 6], "max_tokens": 9223372036854775807, "min_tokens": 9223372036854775807})", &err), 0u);
  // No max_tokens with ignore_eos: runs to max_model_len and finishes.
  const uint64_t id = e->submit(R"({"prompt": [5, 6], "ignore_eos": true, "temperature": 0})", &err);
  ASSERT_NE(id, 0u) << err;
  std::vector<RequestResult> res;
  ASSERT_TRUE(e->run_until_idle(res, &err)) << err;
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0].completion_tokens, 62);
  EXPECT_EQ(res[0].completions[0].finish_reason, "length");
}

// Defect 7: NaN weights produced "successful" garbage. A NaN in one embedding row poisons exactly the requests
// whose prompt holds that token: they fail with a clear error, the others complete unchanged.
TEST(NonFiniteLogits, FailOnlyTheAffectedRequests) {
  test::ScratchDir d("nanmodel");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(test::own_fixture("tiny-v4-c") + "/" + f, d.path / f);
  {
    auto ck = io::Checkpoint::open(d.str());
    ASSERT_TRUE(ck.is_ok()) << ck.status().message();
    const io::TensorView* emb = ck->find("model.embed_tokens.weight");
    if (!emb) emb = ck->find("embed.weight");
    ASSERT_NE(emb, nullptr);
    ASSERT_EQ(emb->dtype, DType::F32);
    const std::string path = emb->file;
    const size_t row = size_t(emb->shape[1]) * 4;
    // Byte offset of row 7 inside the file, from the header.
    std::ifstream in(path, std::ios::binary);
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    in.read(header.data(), std::streamsize(n));
    const json h = json::parse(header);
    const size_t begin = h[emb->name]["data_offsets"][0].get<size_t>();
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(8 + n + begin + 7 * row));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t k = 0; k < emb->shape[1]; ++k) f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  auto run = [&](const std::string& dir, std::vector<RequestResult>& out) {
    EngineOptions eo;
    eo.model_dir = dir;
    std::string err;
    auto e = Engine::create(eo, &err);
    ASSERT_NE(e, nullptr) << err;
    for (const char* body : {R"({"prompt": [5, 6, 8], "max_tokens": 4, "temperature": 0})",
                             R"({"prompt": [5, 7, 8], "max_tokens": 4, "temperature": 0})",
                             R"({"prompt": [9, 9], "max_tokens": 4, "n": 2, "temperature": 0.5, "seed": 3})",
                             R"({"prompt": [7], "max_tokens": 4, "n": 3, "temperature": 0.5})"})
      ASSERT_NE(e->submit(body, &err), 0u) << err;
    ASSERT_TRUE(e->run_until_idle(out, &err)) << err;
    std::sort(out.begin(), out.end(), [](const RequestResult& a, const RequestResult& b) { return a.id < b.id; });
  };
  std::vector<RequestResult> good, bad;
  run(test::own_fixture("tiny-v4-c"), good);
  run(d.str(), bad);
  ASSERT_EQ(bad.size(), 4u);
  for (size_t i : {size_t(0), size_t(2)}) {
    EXPECT_TRUE(bad[i].error.empty()) << bad[i].error;
    ASSERT_EQ(bad[i].completions.size(), good[i].completions.size());
    for (size_t k = 0; k < bad[i].completions.size(); ++k)
      EXPECT_EQ(bad[i].completions[k].token_ids, good[i].completions[k].token_ids);
  }
  for (size_t i : {size_t(1), size_t(3)}) {
    EXPECT_NE(bad[i].error.find("non-finite logits (NaN or Inf)"), std::string::npos) << bad[i].error;
    for (const Completion& c : bad[i].completions) EXPECT_EQ(c.finish_reason, "error");
  }
}

}  // namespace
}  // namespace dsinfer
