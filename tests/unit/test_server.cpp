// `dsinfer serve`'s server in process on a loopback ephemeral port with models/dsv4-small: every endpoint,
// streamed responses folded back equal the non-streaming response of the same seeded request, and both equal
// the offline engine's response (the `generate` path).
#include <gtest/gtest.h>

#include "dsinfer/engine.h"
#include "dsinfer/server.h"
#include "test_server_util.h"
#include "test_util.h"

namespace {

using json = nlohmann::json;
using dsinfer::test::Client;
using dsinfer::test::request;

dsinfer::EngineOptions engine_options() {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::source_dir() + "/models/dsv4-small";
  o.max_model_len = 512;
  o.max_num_seqs = 8;
  return o;
}

class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string err;
    auto e = dsinfer::Engine::create(engine_options(), &err);
    ASSERT_TRUE(e) << err;
    dsinfer::server::ServerOptions so;
    so.port = 0;
    so.max_body_bytes = 64 << 10;
    so.max_header_bytes = 4 << 10;
    server_ = new dsinfer::server::Server(std::move(e), so);
    ASSERT_TRUE(server_->start(&err)) << err;
    port_ = server_->port();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static json post(const std::string& path, const json& body, int want_status = 200) {
    auto r = request(port_, "POST", path, body.dump());
    EXPECT_EQ(r.status, want_status) << r.body;
    return json::parse(r.body, nullptr, false);
  }
  // The stream of `body` ("stream": true added), folded into choices + usage.
  static json post_stream(const std::string& path, json body, std::vector<std::string>* raw = nullptr) {
    body["stream"] = true;
    auto r = request(port_, "POST", path, body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers["Content-Type"], "text/event-stream");
    auto data = dsinfer::test::sse_data(r.body);
    EXPECT_FALSE(data.empty());
    if (!data.empty()) {
      EXPECT_EQ(data.back(), "[DONE]");
    }
    if (raw) *raw = data;
    return dsinfer::test::fold_stream(data, path == "/v1/chat/completions");
  }
  // The offline engine's response for the same body (what `generate` writes).
  static json offline(const std::string& path, const json& body) {
    std::string err;
    auto e = dsinfer::Engine::create(engine_options(), &err);
    EXPECT_TRUE(e) << err;
    dsinfer::Request req;
    dsinfer::Endpoint ep;
    EXPECT_TRUE(dsinfer::endpoint_from_url(path, &ep));
    EXPECT_TRUE(dsinfer::parse_request(body.dump(), ep, &req, &err)) << err;
    EXPECT_NE(e->submit(req, &err), 0u) << err;
    std::vector<dsinfer::RequestResult> rs;
    EXPECT_TRUE(e->run_until_idle(rs, &err)) << err;
    return rs.empty() ? json() : json::parse(rs[0].response_json);
  }
  // Streamed == non-streamed == offline (choices and usage).
  static json check_three_ways(const std::string& path, const json& body) {
    const json plain = post(path, body);
    const json streamed = post_stream(path, body);
    const json off = offline(path, body);
    EXPECT_EQ(streamed["choices"], plain["choices"]) << "streamed " << streamed.dump() << "\nplain " << plain.dump();
    EXPECT_EQ(plain["choices"], off["choices"]);
    EXPECT_EQ(plain["usage"], off["usage"]);
    if (body.contains("stream_options")) {
      EXPECT_EQ(streamed["usage"], plain["usage"]);
    }
    return plain;
  }
  static std::string metrics() { return request(port_, "GET", "/metrics").body; }
  // The value of an unlabelled metric line "name value" (-1 when absent).
  static double metric(const std::string& name) {
    const std::string m = metrics();
    const size_t p = m.find("\n" + name + " ");
    return p == std::string::npos ? -1 : std::stod(m.substr(p + name.size() + 2));
  }

  static dsinfer::server::Server* server_;
  static int port_;
};

dsinfer::server::Server* Server::server_ = nullptr;
int Server::port_ = 0;

TEST_F(Server, CompletionsPlainAndStreamedEqualOffline) {
  const json body = {{"model", "dsv4-small"}, {"prompt", "def fibonacci(n):"}, {"max_tokens", 24}, {"temperature", 0},
                     {"stream_options", {{"include_usage", true}}}};
  json plain_body = body;
  plain_body.erase("stream_options");
  const json r = check_three_ways("/v1/completions", plain_body);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["usage"]["completion_tokens"], 24);
  json with_usage = body;
  const json streamed = post_stream("/v1/completions", with_usage);
  EXPECT_EQ(streamed["usage"], r["usage"]);
  EXPECT_EQ(streamed["choices"], r["choices"]);
}

TEST_F(Server, ChatThinkingStreamsReasoning) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "Write a Python function that adds two numbers."}}}},
                     {"max_tokens", 40}, {"temperature", 0.7}, {"seed", 11}, {"thinking", {{"type", "enabled"}}},
                     {"stream_options", {{"include_usage", true}}}};
  json b = body;
  b.erase("stream_options");
  const json r = check_three_ways("/v1/chat/completions", b);
  EXPECT_EQ(r["object"], "chat.completion");
  std::vector<std::string> raw;
  const json s = post_stream("/v1/chat/completions", body, &raw);
  EXPECT_EQ(s["usage"], r["usage"]);
  // The first chunk announces the role; every chunk but the usage one has "usage": null.
  ASSERT_GE(raw.size(), 3u);
  const json first = json::parse(raw[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  const json usage = json::parse(raw[raw.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  // Thinking mode: the output starts as reasoning_content (whatever this small model writes).
  bool saw_reasoning = false;
  for (const auto& d : raw)
    if (d != "[DONE]" && d.find("\"reasoning_content\"") != std::string::npos) saw_reasoning = true;
  EXPECT_EQ(saw_reasoning, r["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_TRUE(saw_reasoning);
}

TEST_F(Server, ChatToolsStreamLikeTheResponse) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
  for (const char* choice : {"auto", "required"}) {
    const json body = {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
                       {"tools", tools}, {"tool_choice", choice}, {"thinking", {{"type", "disabled"}}},
                       {"max_tokens", 32}, {"temperature", 0}};
    const json r = check_three_ways("/v1/chat/completions", body);
    EXPECT_EQ(r["choices"].size(), 1u) << choice;
  }
}

TEST_F(Server, NTwoWithLogprobsAndTokenIds) {
  const json chat = {{"messages", {{{"role", "user"}, {"content", "import numpy as"}}}}, {"max_tokens", 12}, {"n", 2},
                     {"temperature", 1.0}, {"seed", 5}, {"logprobs", true}, {"top_logprobs", 2},
                     {"thinking", {{"type", "disabled"}}}};
  const json r = check_three_ways("/v1/chat/completions", chat);
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][1]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  const json comp = {{"prompt", "class Stack:"}, {"max_tokens", 10}, {"n", 2}, {"temperature", 1.0}, {"seed", 9},
                     {"logprobs", 3}, {"return_token_ids", true}};
  const json c = check_three_ways("/v1/completions", comp);
  ASSERT_EQ(c["choices"].size(), 2u);
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"].size(), c["choices"][0]["token_ids"].size());
}

TEST_F(Server, StopStringsEndTheTextAsOffline) {
  const json base = {{"prompt", "def fibonacci(n):"}, {"max_tokens", 30}, {"temperature", 0}};
  const std::string text = post("/v1/completions", base)["choices"][0]["text"];
  ASSERT_GT(text.size(), 12u);
  json body = base;
  const std::string stop = text.substr(8, 3);
  body["stop"] = {stop, "@@never@@"};
  const json r = check_three_ways("/v1/completions", body);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["text"], text.substr(0, text.find(stop)));
}

TEST_F(Server, ModelsHealthMetrics) {
  auto h = request(port_, "GET", "/health");
  EXPECT_EQ(h.status, 200);
  auto m = request(port_, "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  const json models = json::parse(m.body);
  EXPECT_EQ(models["data"][0]["id"], "dsv4-small");
  EXPECT_EQ(models["data"][0]["max_model_len"], 512);
  post("/v1/completions", {{"prompt", "x = 1"}, {"max_tokens", 3}});
  const std::string text = metrics();
  for (const char* name : {"dsinfer_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"}",
                           "dsinfer_prompt_tokens_total", "dsinfer_generation_tokens_total",
                           "dsinfer_time_to_first_token_seconds_bucket{le=\"+Inf\"}", "dsinfer_inter_token_latency_seconds_sum",
                           "dsinfer_e2e_request_latency_seconds_count", "dsinfer_num_requests_running",
                           "dsinfer_num_requests_waiting", "dsinfer_state_cache_usage_ratio", "dsinfer_num_preemptions_total",
                           "dsinfer_request_success_total{finished_reason=\"length\"}"})
    EXPECT_NE(text.find(name), std::string::npos) << name;
  EXPECT_GE(metric("dsinfer_generation_tokens_total"), 3);
}

}  // namespace

namespace {

// Tool-call pieces as the engine reports them become OpenAI tool_call deltas: id, type and name first, then
// argument pieces; folded, they are the message's tool_calls.
TEST(StreamFormatter, ToolCallDeltas) {
  std::string err;
  auto e = dsinfer::Engine::create(engine_options(), &err);
  ASSERT_TRUE(e) << err;
  dsinfer::Request req;
  ASSERT_TRUE(dsinfer::parse_request(R"({"messages": [{"role": "user", "content": "hi"}], "stream": true})",
                                     dsinfer::Endpoint::kChatCompletions, &req, &err)) << err;
  dsinfer::StreamFormatter f(*e, req, 42);
  EXPECT_EQ(f.response_id(), "chatcmpl-42");
  std::vector<std::string> data = f.start();
  dsinfer::TokenEvent ev;
  ev.request_id = 42;
  ev.token_ids = {1};
  ev.tool_calls = {{0, "call_0", "get_weather", ""}};
  data.push_back(f.chunk(ev));
  ev.tool_calls = {{0, "", "", "{\"city\": \"Pa"}};
  data.push_back(f.chunk(ev));
  ev.tool_calls = {{0, "", "", "ris\"}"}, {1, "call_1", "now", "{}"}};
  ev.finished = true;
  ev.finish_reason = "tool_calls";
  data.push_back(f.chunk(ev));
  const json second = json::parse(data[1])["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(second["id"], "call_0");
  EXPECT_EQ(second["type"], "function");
  EXPECT_FALSE(json::parse(data[2])["choices"][0]["delta"]["tool_calls"][0].contains("id"));
  const json folded = dsinfer::test::fold_stream(data, true)["choices"][0];
  EXPECT_EQ(folded["finish_reason"], "tool_calls");
  EXPECT_EQ(folded["message"]["tool_calls"], json::parse(R"([
      {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}])"));
  dsinfer::TokenEvent empty;  // tokens that released nothing (held back) produce no chunk
  empty.token_ids = {3};
  EXPECT_EQ(f.chunk(empty), "");
  EXPECT_EQ(f.usage_chunk({}), "");  // not asked for
}

}  // namespace
