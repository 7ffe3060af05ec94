// A bounded load test on loopback: 200 concurrent streaming clients (10 % hang up at random points, one never
// reads at all) -> no crash, every other stream folds to exactly the response the same request gets alone,
// /metrics adds up, and the state cache is empty at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "dsinfer/engine.h"
#include "dsinfer/server.h"
#include "test_server_util.h"
#include "test_util.h"

namespace {

using json = nlohmann::json;
using dsinfer::test::Client;
using dsinfer::test::request;

double metric(int port, const std::string& name) {
  const std::string m = request(port, "GET", "/metrics").body;
  const size_t p = m.find("\n" + name + " ");
  return p == std::string::npos ? 0 : std::stod(m.substr(p + name.size() + 2));
}

TEST(ServerLoad, TwoHundredStreamsWithDisconnects) {
  dsinfer::EngineOptions o;
  o.model_dir = dsinfer::test::source_dir() + "/models/dsv4-small";
  o.max_model_len = 256;
  o.max_num_seqs = 64;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  ASSERT_TRUE(e) << err;
  dsinfer::server::ServerOptions so;
  so.port = 0;
  dsinfer::server::Server srv(std::move(e), so);
  ASSERT_TRUE(srv.start(&err)) << err;
  const int port = srv.port();

  const std::vector<std::string> prompts = {"def parse(s):", "import json\n", "class Queue:", "# Utility functions\n"};
  std::vector<json> bodies, want;
  for (size_t k = 0; k < prompts.size(); ++k) {
    json b = {{"prompt", prompts[k]}, {"max_tokens", 10}, {"temperature", 0.9}, {"seed", 100 + int(k)}, {"ignore_eos", true}};
    bodies.push_back(b);
    want.push_back(json::parse(request(port, "POST", "/v1/completions", b.dump()).body)["choices"]);
  }

  constexpr int kClients = 200;
  std::atomic<int> completed{0}, hung_up{0}, bad{0};
  std::atomic<bool> all_done{false};
  std::vector<std::thread> threads;
  // One client asks for a long stream and never reads it: nobody may wait for it.
  threads.emplace_back([&] {
    Client c(port);
    c.send("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 200, "ignore_eos": true, "stream": true})");
    for (int i = 0; i < 6000 && !all_done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  });
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      json b = bodies[size_t(i) % bodies.size()];
      b["stream"] = true;
      Client c(port);
      if (!c.send("POST", "/v1/completions", b.dump())) return void(++bad);
      if (i % 10 == 3) {  // hang up after a random number of chunks (0..5)
        const size_t after = std::mt19937(uint32_t(i))() % 6;
        c.read(300, [&](const std::string& body) { return dsinfer::test::sse_data(body).size() >= after; });
        c.close();
        ++hung_up;
        return;
      }
      auto r = c.read(300);
      const json got = dsinfer::test::fold_stream(dsinfer::test::sse_data(r.body), false)["choices"];
      if (r.status == 200 && got == want[size_t(i) % bodies.size()]) ++completed;
      else ++bad;
    });
  for (size_t t = 1; t < threads.size(); ++t) threads[t].join();
  all_done = true;
  threads[0].join();

  EXPECT_EQ(bad, 0);
  EXPECT_EQ(hung_up, 20);
  EXPECT_EQ(completed, kClients - 20);
  // The engine settles: every request finished or aborted, nothing holds state.
  double slots = -1, running = -1;
  for (int i = 0; i < 400 && (slots != 0 || running != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    slots = metric(port, "dsinfer_state_cache_slots_used");
    running = metric(port, "dsinfer_num_requests_running") + metric(port, "dsinfer_num_requests_waiting");
  }
  EXPECT_EQ(slots, 0);
  EXPECT_EQ(running, 0);
  EXPECT_EQ(metric(port, "dsinfer_state_cache_blocks_used"), 0);
  const double ok = metric(port, "dsinfer_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"}");
  EXPECT_EQ(ok, double(prompts.size() + kClients - 20)) << "plain references + completed streams";
  const double finished = metric(port, "dsinfer_request_success_total{finished_reason=\"length\"}") +
                          metric(port, "dsinfer_request_success_total{finished_reason=\"abort\"}");
  EXPECT_EQ(finished, double(prompts.size() + kClients + 1));  // every request ended one way or the other
  EXPECT_GE(metric(port, "dsinfer_request_success_total{finished_reason=\"abort\"}"), 1);
  EXPECT_EQ(metric(port, "dsinfer_e2e_request_latency_seconds_count"), finished);
}

}  // namespace
