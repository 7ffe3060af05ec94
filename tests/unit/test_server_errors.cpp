// The server under bad input and bad clients: OpenAI error objects with the right status for every kind of
// mistake, an API key checked on /v1/*, overload answered with 503 + Retry-After, and a streaming client that
// disconnects aborts its request (state freed, "abort" counted) while the other requests finish unaffected.
#include <gtest/gtest.h>

#include <thread>

#include "dsinfer/engine.h"
#include "server/handlers.h"
#include "dsinfer/server.h"
#include "test_server_util.h"
#include "test_util.h"

namespace {

using json = nlohmann::json;
using dsinfer::test::Client;
using dsinfer::test::request;

std::unique_ptr<dsinfer::server::Server> start(dsinfer::server::ServerOptions so, int32_t max_seqs = 8) {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::source_dir() + "/models/dsv4-small";
  o.max_model_len = 1024;
  o.max_num_seqs = max_seqs;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  EXPECT_TRUE(e) << err;
  so.port = 0;
  auto s = std::make_unique<dsinfer::server::Server>(std::move(e), so);
  EXPECT_TRUE(s->start(&err)) << err;
  return s;
}

// The error object of a response, checked for shape.
json error_of(const dsinfer::test::HttpResponse& r) {
  const json j = json::parse(r.body, nullptr, false);
  EXPECT_TRUE(j.is_object() && j.contains("error")) << r.body;
  if (!j.is_object() || !j.contains("error")) return json::object();
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(k)) << k;
  return j["error"];
}

double metric_value(int port, const std::string& line_prefix) {
  const std::string m = request(port, "GET", "/metrics").body;
  const size_t p = m.find("\n" + line_prefix + " ");
  return p == std::string::npos ? 0 : std::stod(m.substr(p + line_prefix.size() + 2));
}

TEST(ServerErrors, StatusCodesAndErrorObjects) {
  dsinfer::server::ServerOptions so;
  so.max_body_bytes = 4096;
  so.max_header_bytes = 2048;
  auto s = start(so);
  const int port = s->port();
  auto r = request(port, "POST", "/v1/completions", "{not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r)["message"].get<std::string>().find("not valid JSON"), std::string::npos);
  r = request(port, "POST", "/v1/completions", R"({"prompt": "x", "temperature": -1})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "temperature");
  r = request(port, "POST", "/v1/completions", R"({"prompt": "x", "stop": ["a", 3]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "stop");
  r = request(port, "POST", "/v1/chat/completions", R"({"prompt": "x"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "messages");
  r = request(port, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 100000})");
  EXPECT_EQ(r.status, 400);  // found by the engine (max_model_len), not the parser
  EXPECT_EQ(error_of(r)["param"], "max_tokens");
  r = request(port, "POST", "/v1/completions", R"({"prompt": "x", "n": 17})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "n");
  r = request(port, "POST", "/v1/completions", R"({"prompt": "x", "stream_options": {"include_usage": true}})");
  EXPECT_EQ(r.status, 400);
  r = request(port, "POST", "/v1/completions", R"({"model": "gpt-4", "prompt": "x"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r)["code"], "model_not_found");
  // Fields of the wrong JSON type are 400s, never an exception (these three used to abort the process).
  for (const char* b : {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": 0, "function": "x"}]})",
                        R"({"messages": [{"role": "user", "content": [{"type": 1, "text": "a"}]}]})",
                        R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": []}})"}) {
    r = request(port, "POST", "/v1/chat/completions", b);
    EXPECT_EQ(r.status, 400) << b;
    error_of(r);
  }
  // Deep nesting is refused before parsing (printing or destroying it recursively could exhaust the stack).
  r = request(port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"stop\": " + std::string(1500, '[') + std::string(1500, ']') + "}");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(error_of(r)["message"].get<std::string>().find("nested deeper than 128"), std::string::npos) << r.body;
  dsinfer::Request parsed;
  std::string err;
  const std::string deep = "{\"prompt\": " + std::string(1 << 20, '[') + std::string(1 << 20, ']') + "}";
  EXPECT_FALSE(dsinfer::parse_request(deep, dsinfer::Endpoint::kCompletions, &parsed, &err));
  EXPECT_NE(err.find("nested deeper"), std::string::npos) << err;
  EXPECT_TRUE(dsinfer::parse_request("{\"prompt\": \"[[[[\\\"\", \"max_tokens\": 1}", dsinfer::Endpoint::kCompletions, &parsed, &err))
      << err;  // brackets inside strings do not count
  r = request(port, "GET", "/v2/nothing");
  EXPECT_EQ(r.status, 404);
  error_of(r);
  r = request(port, "GET", "/v1/chat/completions");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["Allow"], "POST");
  r = request(port, "POST", "/v1/completions", "{\"prompt\": \"" + std::string(5000, 'a') + "\"}");
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(error_of(r)["code"], "request_too_large");
  r = request(port, "GET", "/health", "", {{"X-Padding", std::string(3000, 'b')}});
  EXPECT_EQ(r.status, 431);
  {
    Client c(port);
    c.send_raw("BLAH /health HTTP/1.1\r\nHost: x\r\nContent-Length: -4\r\n\r\n");
    EXPECT_EQ(c.read(10).status, 400);
  }
  {
    Client c(port);  // a client that sends half a request and leaves must not disturb anything
    c.send_raw("POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro");
  }
  // Keep-alive: two requests on one connection.
  Client c(port);
  ASSERT_TRUE(c.send("GET", "/health", ""));
  EXPECT_EQ(c.read(10).status, 200);
  ASSERT_TRUE(c.send("POST", "/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 2})"));
  EXPECT_EQ(c.read(60).status, 200);
  EXPECT_GE(metric_value(port, "dsinfer_http_requests_total{endpoint=\"/v1/completions\",status=\"400\"}"), 5);
}

TEST(ServerErrors, ApiKey) {
  dsinfer::server::ServerOptions so;
  so.api_key = "sk-test-123";
  auto s = start(so);
  const int port = s->port();
  const std::string body = R"({"prompt": "a", "max_tokens": 2})";
  auto r = request(port, "POST", "/v1/completions", body);
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(error_of(r)["code"], "invalid_api_key");
  EXPECT_EQ(request(port, "POST", "/v1/completions", body, {{"Authorization", "Bearer sk-test-124"}}).status, 401);
  EXPECT_EQ(request(port, "POST", "/v1/completions", body, {{"Authorization", "Bearer sk-test-1234"}}).status, 401);
  EXPECT_EQ(request(port, "GET", "/v1/models", "", {{"Authorization", "sk-test-123"}}).status, 401);
  EXPECT_EQ(request(port, "POST", "/v1/completions", body, {{"Authorization", "Bearer sk-test-123"}}).status, 200);
  EXPECT_EQ(request(port, "GET", "/health").status, 200);  // monitoring needs no key
  EXPECT_TRUE(dsinfer::server::constant_time_equal("abc", "abc"));
  EXPECT_FALSE(dsinfer::server::constant_time_equal("abc", "abd"));
  EXPECT_FALSE(dsinfer::server::constant_time_equal("", "abc"));
  EXPECT_FALSE(dsinfer::server::constant_time_equal("abcd", "abc"));
}

TEST(ServerErrors, OverloadIs503WithRetryAfter) {
  dsinfer::server::ServerOptions so;
  so.max_waiting_requests = 0;  // nothing may wait: with no free engine capacity every request is refused
  auto s = start(so);
  auto r = request(s->port(), "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 2})");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers["Retry-After"], "1");
  EXPECT_EQ(error_of(r)["code"], "overloaded");
}

TEST(ServerErrors, DisconnectAbortsAndFreesStateOthersUnaffected) {
  auto s = start({}, 4);
  const int port = s->port();
  const json other = {{"prompt", "def add(a, b):"}, {"max_tokens", 40}, {"temperature", 0.9}, {"seed", 3}};
  const json want = json::parse(request(port, "POST", "/v1/completions", other.dump()).body)["choices"];
  // A long streaming request; read a few chunks, then hang up.
  const json long_body = {{"prompt", "import os"}, {"max_tokens", 900}, {"ignore_eos", true}, {"stream", true}};
  std::thread bystander_thread;
  json got;
  {
    Client c(port);
    ASSERT_TRUE(c.send("POST", "/v1/completions", long_body.dump()));
    bystander_thread = std::thread([&] { got = json::parse(request(port, "POST", "/v1/completions", other.dump()).body); });
    auto partial = c.read(60, [](const std::string& b) { return dsinfer::test::sse_data(b).size() >= 5; });
    EXPECT_EQ(partial.status, 200);
    EXPECT_GE(dsinfer::test::sse_data(partial.body).size(), 5u);
    EXPECT_GE(metric_value(port, "dsinfer_state_cache_slots_used"), 1);
  }  // closed mid-stream
  bystander_thread.join();
  EXPECT_EQ(got["choices"], want);
  // The aborted request's state is freed long before its 900 tokens could have been generated.
  double slots = 1, aborted = 0;
  for (int i = 0; i < 200 && (slots != 0 || aborted < 1); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    slots = metric_value(port, "dsinfer_state_cache_slots_used");
    aborted = metric_value(port, "dsinfer_request_success_total{finished_reason=\"abort\"}");
  }
  EXPECT_EQ(slots, 0);
  EXPECT_EQ(aborted, 1);
  EXPECT_EQ(metric_value(port, "dsinfer_state_cache_blocks_used"), 0);
  EXPECT_EQ(metric_value(port, "dsinfer_num_requests_running"), 0);
  EXPECT_LT(metric_value(port, "dsinfer_generation_tokens_total"), 900);
}

TEST(ServerErrors, StopAbortsStreamsInFlight) {
  auto s = start({});
  Client c(s->port());
  ASSERT_TRUE(c.send("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 1000, "ignore_eos": true, "stream": true})"));
  auto head = c.read(60, [](const std::string& b) { return dsinfer::test::sse_data(b).size() >= 2; });
  ASSERT_EQ(head.status, 200);
  std::thread stopper([&] { s->stop(); });
  auto rest = c.read(30);  // the stream ends properly: a last chunk with finish_reason "abort", then [DONE]
  stopper.join();
  const auto data = dsinfer::test::sse_data(rest.body);
  ASSERT_GE(data.size(), 2u) << rest.body;
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(json::parse(data[data.size() - 2])["choices"][0]["finish_reason"], "abort");
}

// OpenAI's "param" comes from the error itself (Status::field), for errors found by the request parser, the
// chat layer, the sampling checks, the scheduler and the grammar compiler alike. Numbers above 2^63 - 1 are
// printed as sent, not as their wrapped int64.
TEST(ServerErrors, ParamComesFromTheError) {
  auto s = start({});
  const int port = s->port();
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], )";
  const std::string comp = R"({"prompt": "hi", )";
  const std::string big(3000, 'x');
  struct Case {
    std::string path, body, param, in_message;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", comp + R"("temperature": -1})", "temperature", ""},
      {"/v1/completions", comp + R"("top_p": 2})", "top_p", ""},
      {"/v1/completions", comp + R"("top_k": 9223372036854775808})", "top_k", "9223372036854775808"},
      {"/v1/completions", comp + R"("max_tokens": 9223372036854775808})", "max_tokens", "9223372036854775808"},
      {"/v1/completions", comp + R"("max_tokens": 100000})", "max_tokens", "max_model_len"},
      {"/v1/completions", comp + R"("min_tokens": 5, "max_tokens": 2})", "min_tokens", ""},
      {"/v1/completions", comp + R"("n": 0})", "n", ""},
      {"/v1/completions", comp + R"("seed": "x"})", "seed", ""},
      {"/v1/completions", comp + R"("stop": ["a", 3]})", "stop", ""},
      {"/v1/completions", comp + R"("stop_token_ids": [18446744073709551615]})", "stop_token_ids",
       "18446744073709551615"},
      {"/v1/completions", comp + R"("logit_bias": {"x": 1}})", "logit_bias", ""},
      {"/v1/completions", comp + R"("stream": "yes"})", "stream", ""},
      {"/v1/completions", R"({"prompt": [1, -1]})", "prompt", ""},
      {"/v1/completions", R"({"prompt": ")" + big + R"("})", "prompt", "max_model_len"},
      {"/v1/completions", comp + R"("guided_regex": "(a"})", "guided_regex", "regex"},
      {"/v1/completions", comp + R"("structured_outputs": {"regex": 3}})", "structured_outputs", ""},
      {"/v1/chat/completions", R"({"messages": []})", "messages", ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "bogus", "content": "x"}]})", "messages", ""},
      {"/v1/chat/completions", chat + R"("tools": "x"})", "tools", ""},
      {"/v1/chat/completions", chat + R"("tool_choice": "sometimes"})", "tool_choice", ""},
      {"/v1/chat/completions", chat + R"("response_format": {"type": "xml"}})", "response_format", ""},
      {"/v1/chat/completions", chat + R"("reasoning_effort": "lots"})", "reasoning_effort", ""},
      {"/v1/chat/completions", chat + R"("thinking": {"type": "maybe"}})", "thinking", ""},
  };
  for (const Case& c : cases) {
    const auto r = request(port, "POST", c.path, c.body);
    EXPECT_EQ(r.status, 400) << c.body;
    const json e = error_of(r);
    EXPECT_EQ(e["param"], c.param) << c.body << " -> " << r.body;
    const std::string msg = e.value("message", "");
    if (!c.in_message.empty()) {
      EXPECT_NE(msg.find(c.in_message), std::string::npos) << r.body;
    }
    EXPECT_EQ(msg.find("-9223372036854775808"), std::string::npos) << r.body;
  }
  const json e = error_of(request(port, "POST", "/v1/completions", "{not json"));
  EXPECT_TRUE(e["param"].is_null());  // about no field
}

}  // namespace

namespace {

// /metrics carries the speculative-decoding counters (vLLM's spec_decode_* names), from the engine's own counts.
TEST(ServerMetrics, SpeculativeDecodingCounters) {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::source_dir() + "/models/dsv4-small";
  o.max_model_len = 256;
  o.speculative = "dspark";
  o.speculative_cost_model = "off";  // every draft verified (the cpu fallback drafts nothing for greedy requests)
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  ASSERT_TRUE(e) << err;
  dsinfer::server::ServerOptions so;
  so.port = 0;
  dsinfer::server::Server s(std::move(e), so);
  ASSERT_TRUE(s.start(&err)) << err;
  const int port = s.port();
  EXPECT_EQ(metric_value(port, "dsinfer_spec_decode_num_draft_tokens_total"), 0);
  auto r = request(port, "POST", "/v1/completions",
                   R"({"prompt": "def add(a, b):\n    return", "max_tokens": 24, "temperature": 0, "ignore_eos": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  const double rounds = metric_value(port, "dsinfer_spec_decode_num_drafts_total");
  const double drafted = metric_value(port, "dsinfer_spec_decode_num_draft_tokens_total");
  const double accepted = metric_value(port, "dsinfer_spec_decode_num_accepted_tokens_total");
  const double emitted = metric_value(port, "dsinfer_spec_decode_num_emitted_tokens_total");
  EXPECT_GT(rounds, 0);
  EXPECT_GT(drafted, 0);
  EXPECT_LE(accepted, drafted);
  EXPECT_GT(emitted, 0);
  EXPECT_LE(emitted, accepted + rounds);  // a round emits its accepted drafts and at most one more token
  double per_pos = 0;
  for (int k = 0; k < 16; ++k)
    per_pos += metric_value(port, "dsinfer_spec_decode_num_accepted_tokens_per_pos_total{position=\"" + std::to_string(k) + "\"}");
  EXPECT_EQ(per_pos, accepted);
  EXPECT_EQ(metric_value(port, "dsinfer_generation_tokens_total"), 24);
  s.stop();
}

}  // namespace
