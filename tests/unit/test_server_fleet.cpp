// What a router in front of several `dsinfer serve` replicas reads from one of them (src/server/fleet.h,
// docs/fleet.md), through the server on a loopback port with models/dsv4-small: the load while a request runs and
// after it ends, the model / server descriptions, liveness; and the graceful drain: /health 503 while requests are
// still admitted, then new requests 503 with Retry-After too, while a request in flight streams on to its natural
// end (not "abort"), then nothing in flight.
// The drain of the real command (`dsinfer serve` + SIGTERM) runs the same way and must exit 0.
// The router endpoints beyond those: /tokenize and /detokenize (vLLM's shapes, checked against what a completion
// counts and against each other), /flush_cache (a repeated prompt hits the prefix cache, and after a flush no longer
// does; refused while a request runs) and /health_generate.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <regex>
#include <thread>

#include "cli_test_util.h"
#include "dsinfer/engine.h"
#include "dsinfer/server.h"
#include "test_server_util.h"
#include "test_util.h"

namespace {

using json = nlohmann::json;
using dsinfer::test::Client;
using dsinfer::test::request;
using Clock = std::chrono::steady_clock;

constexpr double kDeadlineS = 120;  // every wait below polls against this deadline

std::unique_ptr<dsinfer::server::Server> start_server(int max_model_len = 512, const char* prefix_caching = "off",
                                                      const char* get_load_format = "vllm") {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::source_dir() + "/models/dsv4-small";
  o.max_model_len = max_model_len;
  o.enable_prefix_caching = prefix_caching;
  o.max_num_seqs = 8;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  dsinfer::test::require(e != nullptr, err);
  dsinfer::server::ServerOptions so;
  so.port = 0;
  so.get_load_format = get_load_format;
  auto srv = std::make_unique<dsinfer::server::Server>(std::move(e), so);
  dsinfer::test::require(srv->start(&err), err);
  return srv;
}

// A long streamed completion (it cannot end before the test is done looking at it: max_tokens with ignore_eos).
std::string long_stream_body(int max_tokens) {
  return json{{"prompt", "The fleet of replicas"}, {"max_tokens", max_tokens}, {"ignore_eos", true},
              {"temperature", 0}, {"stream", true}}
      .dump();
}

// Sends the body on `c` and reads until the first token chunk arrived (the request is running).
void start_stream(Client& c, const std::string& body) {
  ASSERT_TRUE(c.send("POST", "/v1/completions", body));
  auto first = c.read(kDeadlineS, [](const std::string& b) { return b.find("\"text\":\"") != std::string::npos; });
  ASSERT_EQ(first.status, 200) << first.body;
}

json get_json(int port, const std::string& path) {
  auto r = request(port, "GET", path);
  EXPECT_EQ(r.status, 200) << path << ": " << r.body;
  return json::parse(r.body, nullptr, false);
}

// Polls GET /get_load until pred holds; the last load seen.
json poll_load(int port, const std::function<bool(const json&)>& pred) {
  const auto t0 = Clock::now();
  json l;
  while (std::chrono::duration<double>(Clock::now() - t0).count() < kDeadlineS) {
    l = get_json(port, "/get_load");
    if (pred(l)) return l;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a polling interval
  }
  return l;
}

TEST(ServerFleet, LoadFollowsARunningRequestAndReturnsToIdle) {
  auto srv = start_server();
  const int port = srv->port();
  const json idle = get_json(port, "/get_load");
  EXPECT_EQ(idle["load"], 0);
  EXPECT_EQ(idle["num_running_reqs"], 0);
  EXPECT_EQ(idle["draining"], false);
  ASSERT_GT(idle["state_bytes_budget"].get<int64_t>(), 0);
  EXPECT_EQ(idle["state_bytes_free"], idle["state_bytes_budget"]);
  {
    Client c(port);
    start_stream(c, long_stream_body(400));
    const json busy = poll_load(port, [](const json& l) { return l["num_running_reqs"] == 1; });
    EXPECT_EQ(busy["num_running_reqs"], 1) << busy.dump();
    EXPECT_EQ(busy["load"], 1);
    EXPECT_EQ(busy["server_load"], 1);
    EXPECT_LT(busy["state_bytes_free"].get<int64_t>(), busy["state_bytes_budget"].get<int64_t>());
    EXPECT_EQ(get_json(port, "/load")["server_load"], 1);  // vLLM's name for the same answer
  }  // the client hangs up: the server aborts the request and frees its state
  const json after = poll_load(port, [](const json& l) { return l["load"] == 0 && l["server_load"] == 0; });
  EXPECT_EQ(after["load"], 0) << after.dump();
  EXPECT_EQ(after["state_bytes_free"], after["state_bytes_budget"]);
}

TEST(ServerFleet, ModelAndServerInfoAndLiveness) {
  auto srv = start_server(384);
  const int port = srv->port();
  for (const char* path : {"/get_model_info", "/model_info"}) {
    const json m = get_json(port, path);
    EXPECT_EQ(m["model_path"], "dsv4-small") << path;
    EXPECT_EQ(m["is_generation"], true);
    EXPECT_EQ(m["max_model_len"], 384);
  }
  for (const char* path : {"/get_server_info", "/server_info"}) {
    const json s = get_json(port, path);
    EXPECT_EQ(s["served_model_name"], "dsv4-small") << path;
    EXPECT_EQ(s["max_model_len"], 384);
    EXPECT_EQ(s["load"]["load"], 0);
  }
  EXPECT_EQ(request(port, "GET", "/live").status, 200);
  EXPECT_EQ(request(port, "POST", "/get_load").status, 405);
}

TEST(ServerFleet, DrainRefusesNewWorkAndFinishesWhatIsInFlight) {
  auto srv = start_server();
  const int port = srv->port();
  Client c(port);
  start_stream(c, long_stream_body(200));
  srv->begin_drain();
  auto health = request(port, "GET", "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.headers["Retry-After"], "1");
  EXPECT_NE(health.body.find("server_draining"), std::string::npos) << health.body;
  EXPECT_EQ(request(port, "GET", "/live").status, 200);
  // Readiness is off but requests are still admitted (the grace period): answered, on a closing connection.
  const std::string small = json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}}.dump();
  auto admitted = request(port, "POST", "/v1/chat/completions", small);
  EXPECT_EQ(admitted.status, 200) << admitted.body;
  EXPECT_EQ(admitted.headers["Connection"], "close");
  srv->refuse_new();
  auto refused = request(port, "POST", "/v1/chat/completions", small);
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.headers["Retry-After"], "1");
  EXPECT_EQ(refused.headers["Connection"], "close");
  EXPECT_NE(refused.body.find("server_draining"), std::string::npos) << refused.body;
  EXPECT_EQ(get_json(port, "/get_load")["draining"], true);
  EXPECT_NE(request(port, "GET", "/metrics").body.find("\ndsinfer_server_draining 1\n"), std::string::npos);
  // The stream in flight runs to its own end.
  auto rest = c.read(kDeadlineS);
  ASSERT_EQ(rest.status, 200);
  const auto data = dsinfer::test::sse_data(rest.body);
  ASSERT_FALSE(data.empty());
  EXPECT_EQ(data.back(), "[DONE]");
  const json folded = dsinfer::test::fold_stream(data, /*chat=*/false);
  ASSERT_EQ(folded["choices"].size(), 1u);
  EXPECT_EQ(folded["choices"][0]["finish_reason"], "length");
  const auto t0 = Clock::now();
  while (srv->in_flight() > 0 && std::chrono::duration<double>(Clock::now() - t0).count() < kDeadlineS)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a polling interval
  EXPECT_EQ(srv->in_flight(), 0);
  srv->stop();
}

// The command: SIGTERM while a stream is in flight (with a 1 s grace) -> the stream ends with "length", exit 0.
TEST(ServerFleet, SigtermDrainsTheCommandAndExitsZero) {
  const dsinfer::test::ScratchDir dir("serve_drain");
  const std::string log = dir.str() + "/serve.log";
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::freopen("/dev/null", "w", stdout);
    const std::string model = dsinfer::test::source_dir() + "/models/dsv4-small";
    execl(dsinfer::test::binary(), dsinfer::test::binary(), "serve", "--model", model.c_str(), "--port", "0",
          "--max-model-len", "512", "--drain-grace", "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  int port = 0;
  const std::regex listening("listening on http://[^:]+:(\\d+)");
  const auto t0 = Clock::now();
  while (port == 0 && std::chrono::duration<double>(Clock::now() - t0).count() < kDeadlineS) {
    std::smatch m;
    const std::string text = dsinfer::test::slurp(log);
    if (std::regex_search(text, m, listening)) port = std::stoi(m[1]);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a polling interval
  }
  ASSERT_GT(port, 0) << dsinfer::test::slurp(log);
  {
    Client c(port);
    start_stream(c, long_stream_body(200));
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    auto rest = c.read(kDeadlineS);
    ASSERT_EQ(rest.status, 200);
    const json folded = dsinfer::test::fold_stream(dsinfer::test::sse_data(rest.body), false);
    ASSERT_EQ(folded["choices"].size(), 1u);
    EXPECT_EQ(folded["choices"][0]["finish_reason"], "length");
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << dsinfer::test::slurp(log);
  EXPECT_EQ(WEXITSTATUS(st), 0);
  const std::string text = dsinfer::test::slurp(log);
  EXPECT_NE(text.find("draining 1 request(s) in flight"), std::string::npos) << text;
  EXPECT_NE(text.find("drained, stopping"), std::string::npos) << text;
}


json post_json(int port, const std::string& path, const json& body, int want_status) {
  auto r = request(port, "POST", path, body.dump());
  EXPECT_EQ(r.status, want_status) << path << " " << body.dump() << ": " << r.body;
  return json::parse(r.body, nullptr, false);
}

TEST(ServerFleet, TokenizeAndDetokenizeAgreeWithTheCompletionEndpoints) {
  auto srv = start_server(384);
  const int port = srv->port();
  // A completions prompt: the ids the engine runs (usage.prompt_tokens counts them), back to the same text.
  const std::string text = "The fleet of replicas answers";
  const json t = post_json(port, "/tokenize", {{"prompt", text}}, 200);
  ASSERT_TRUE(t["tokens"].is_array()) << t.dump();
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["max_model_len"], 384);
  const json done = post_json(port, "/v1/completions", {{"prompt", text}, {"max_tokens", 1}}, 200);
  EXPECT_EQ(t["count"], done["usage"]["prompt_tokens"]);
  EXPECT_EQ(post_json(port, "/detokenize", {{"tokens", t["tokens"]}}, 200)["prompt"], text);
  // Token ids stay as given.
  EXPECT_EQ(post_json(port, "/tokenize", {{"prompt", {5, 6, 7}}}, 200)["tokens"], json({5, 6, 7}));
  // Chat: rendered with the template (and the model's chat defaults), as /v1/chat/completions runs it.
  const json messages = {{{"role", "user"}, {"content", "hi there"}}};
  const json ct = post_json(port, "/tokenize", {{"model", "dsv4-small"}, {"messages", messages}}, 200);
  const json chat = post_json(port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}}, 200);
  EXPECT_EQ(ct["count"], chat["usage"]["prompt_tokens"]);
  const auto rendered =
      post_json(port, "/detokenize", {{"tokens", ct["tokens"]}}, 200)["prompt"].get<std::string>();
  EXPECT_NE(rendered.find("hi there"), std::string::npos) << rendered;
  EXPECT_NE(rendered, "hi there");
  // vllm-router's render calls before each request: the same ids, in vLLM's shapes (chat: one object; completions:
  // a list, one per prompt).
  const json cr = post_json(port, "/v1/chat/completions/render", {{"messages", messages}, {"max_tokens", 1}}, 200);
  EXPECT_EQ(cr["token_ids"], ct["tokens"]) << cr.dump();
  const json pr = post_json(port, "/v1/completions/render", {{"prompt", text}, {"max_tokens", 1}}, 200);
  ASSERT_TRUE(pr.is_array()) << pr.dump();
  EXPECT_EQ(pr[0]["token_ids"], t["tokens"]);
  EXPECT_EQ(request(port, "POST", "/v1/chat/completions/render", json{{"prompt", text}}.dump()).status, 400);
  // Errors: 400 naming the problem.
  auto bad = request(port, "POST", "/tokenize", "{}");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("'prompt'"), std::string::npos) << bad.body;
  EXPECT_EQ(request(port, "POST", "/tokenize", "not json").status, 400);
  EXPECT_EQ(request(port, "POST", "/tokenize", json{{"prompt", text}, {"model", "other"}}.dump()).status, 404);
  auto outside = request(port, "POST", "/detokenize", json{{"tokens", {1, 2000000000}}}.dump());
  EXPECT_EQ(outside.status, 400);
  EXPECT_NE(outside.body.find("outside the vocabulary"), std::string::npos) << outside.body;
  EXPECT_EQ(request(port, "POST", "/detokenize", json{{"tokens", {"a"}}}.dump()).status, 400);
  EXPECT_EQ(request(port, "POST", "/detokenize", json{{"tokens", {-1}}}.dump()).status, 400);
  EXPECT_EQ(request(port, "POST", "/detokenize", "{}").status, 400);
  EXPECT_EQ(request(port, "GET", "/tokenize").status, 405);
}

TEST(ServerFleet, FlushCacheDropsThePrefixCacheOnlyWhenIdle) {
  auto srv = start_server(1024, "exact");
  const int port = srv->port();
  const int64_t block = get_json(port, "/get_server_info")["state_block_size"].get<int64_t>();
  ASSERT_GT(block, 0);
  // A prompt of two whole blocks and a token (token ids: the count is exact).
  json prompt = json::array();
  for (int64_t i = 0; i < 2 * block + 1; ++i) prompt.push_back(10 + i % 50);
  const json body = {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}};
  auto hits = [&] { return get_json(port, "/get_load")["prefix_cache_hit_tokens"].get<int64_t>(); };
  EXPECT_EQ(post_json(port, "/flush_cache", json::object(), 200)["dropped_blocks"], 0);  // empty: nothing to drop
  post_json(port, "/v1/completions", body, 200);
  const int64_t h0 = hits();
  post_json(port, "/v1/completions", body, 200);
  const int64_t h1 = hits();
  EXPECT_GE(h1 - h0, block) << "the repeated prompt did not hit the prefix cache";
  EXPECT_GT(post_json(port, "/flush_cache", json::object(), 200)["dropped_blocks"].get<int64_t>(), 0);
  post_json(port, "/v1/completions", body, 200);
  EXPECT_EQ(hits(), h1) << "the prompt hit the prefix cache after /flush_cache";
  post_json(port, "/v1/completions", body, 200);  // and the cache fills again
  EXPECT_GT(hits(), h1);
  {
    Client c(port);
    start_stream(c, long_stream_body(400));
    const json refused = post_json(port, "/flush_cache", json::object(), 400);
    EXPECT_NE(refused.dump().find("queued or running"), std::string::npos) << refused.dump();
  }
  EXPECT_EQ(request(port, "GET", "/flush_cache").status, 405);
}

TEST(ServerFleet, FlushCacheWithoutPrefixCachingSaysSo) {
  auto srv = start_server();
  auto r = request(srv->port(), "POST", "/flush_cache", "");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("prefix caching is off"), std::string::npos) << r.body;
}

TEST(ServerFleet, HealthGenerateRunsOneTokenAndFailsWhileRefusing) {
  auto srv = start_server();
  const int port = srv->port();
  auto ok = request(port, "GET", "/health_generate");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(get_json(port, "/get_load")["load"], 0);  // the probe's request is gone
  srv->refuse_new();
  auto refused = request(port, "GET", "/health_generate");
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("server_draining"), std::string::npos) << refused.body;
}

TEST(ServerFleet, SglangLoadFormatIsAListOfRanksWithTokens) {
  auto srv = start_server(512, "off", "sglang");
  const int port = srv->port();
  const json idle = get_json(port, "/get_load");
  ASSERT_TRUE(idle.is_array()) << idle.dump();
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0]["dp_rank"], 0);
  EXPECT_EQ(idle[0]["num_tokens"], 0);
  EXPECT_EQ(idle[0]["num_reqs"], 0);
  {
    Client c(port);
    start_stream(c, long_stream_body(400));
    const auto t0 = Clock::now();
    json busy = get_json(port, "/get_load");
    while (busy[0]["num_tokens"] == 0 && std::chrono::duration<double>(Clock::now() - t0).count() < kDeadlineS)
      busy = get_json(port, "/get_load");
    EXPECT_GT(busy[0]["num_tokens"].get<int64_t>(), 0) << busy.dump();
    EXPECT_EQ(busy[0]["num_reqs"], 1);
  }
  EXPECT_TRUE(get_json(port, "/load").is_object());  // vLLM's path keeps vLLM's shape
  // A format neither router reads is refused at start, naming it.
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::source_dir() + "/models/dsv4-small";
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  ASSERT_NE(e, nullptr) << err;
  dsinfer::server::ServerOptions so;
  so.port = 0;
  so.get_load_format = "trtllm";
  dsinfer::server::Server bad(std::move(e), so);
  EXPECT_FALSE(bad.start(&err));
  EXPECT_NE(err.find("get_load format 'trtllm'"), std::string::npos) << err;
}

}  // namespace
