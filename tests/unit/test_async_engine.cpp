// Asynchronous steps end to end on the CPU: the engine over HostSamplingRunner (test_async_runner.h: the CPU
// runner's logits of models/dsv4-small, "device" sampling done on the host) with async scheduling on must give,
// token for token and logprob for logprob, what it gives with async scheduling off and what the plain host-sampling
// engine gives: greedy and seeded requests, n > 1, stop strings, EOS, max_tokens, penalties (steps that wait), a
// tiny state budget, and aborts.
#include <gtest/gtest.h>

#include <map>

#include "api/request.h"
#include "engine/engine.h"
#include "engine/runner_factory.h"
#include "test_async_runner.h"
#include "test_util.h"

using namespace dsinfer;
using nlohmann::json;

namespace {

enum class Mode { kHost, kSync, kAsync };

EngineOptions options(double state_gb = 0) {
  EngineOptions o;
  o.model_dir = test::source_dir() + "/models/dsv4-small";
  o.max_model_len = 256;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 96;
  o.seed = 7;
  o.state_memory_gb = state_gb;
  return o;
}

std::unique_ptr<engine::Engine> make(EngineOptions o, Mode m, test::HostSamplingRunner** fake = nullptr) {
  if (m == Mode::kHost) {
    o.sampling = "host";
    return test::unwrap(engine::Engine::create(o));
  }
  o.async_scheduling = m == Mode::kAsync ? "on" : "off";
  runner::RunnerOptions ro;
  ro.model_dir = o.model_dir;
  auto inner = test::unwrap(engine::create_runner(ro));
  auto runner = std::make_unique<test::HostSamplingRunner>(std::move(inner), m == Mode::kAsync);
  if (fake) *fake = runner.get();
  auto e = test::unwrap(engine::Engine::create_with_runner(o, std::move(runner)));
  EXPECT_EQ(e->step_mode(), m == Mode::kAsync ? "async" : "sync (async scheduling off)");
  return e;
}

std::vector<json> bodies(bool penalties) {
  const char* prompts[] = {"The quick brown fox", "Once upon a time", "1, 2, 3, 4,", "Hello", "In the beginning",
                           "def main():", "A list of colors:", "Question: why is the sky blue? Answer:"};
  std::vector<json> out;
  for (int i = 0; i < 20; ++i) {
    json b = {{"prompt", prompts[i % 8]}, {"max_tokens", 1 + (i * 5) % 23}};
    if (i % 3 == 0) b["temperature"] = 0.0;
    else b.update({{"temperature", 0.8}, {"top_p", 0.9}, {"seed", 100 + i}});
    if (i % 4 == 1) b["stop"] = json::array({"e", " t"});
    if (i % 5 == 2) b["logprobs"] = 2;
    if (i % 7 == 3) b["n"] = 2;
    if (i % 6 == 5) b["ignore_eos"] = true;
    if (penalties && i % 4 == 2) b.update({{"presence_penalty", 0.5}, {"repetition_penalty", 1.2}});
    out.push_back(b);
  }
  return out;
}

Result<scheduler::RequestId> add(engine::Engine& e, const json& body) {
  Request r;
  DSI_RETURN_IF_ERROR(api::parse_request_body(nlohmann::ordered_json::parse(body.dump()), std::nullopt, r));
  return e.add(r);
}

// Everything a client sees of one request, as one comparable string per choice.
std::vector<std::string> describe(const engine::RequestOutput& r) {
  std::vector<std::string> out;
  for (const engine::Choice& c : r.choices) {
    std::string s = c.finish_reason + "|";
    for (int32_t t : c.token_ids) s += std::to_string(t) + ",";
    s += "|" + c.text + "|";
    for (const auto& lp : c.logprobs) {
      s += fmt::format("[{}:{:a}", lp.token, lp.logprob);
      for (const auto& t : lp.top) s += fmt::format(" {}:{:a}", t.token, t.logprob);
      s += "]";
    }
    out.push_back(s);
  }
  out.push_back("completion_tokens=" + std::to_string(r.completion_tokens));
  return out;
}

// Runs the bodies together; abort_at: {request index, step} aborts that request after that many steps.
std::vector<std::vector<std::string>> run(engine::Engine& e, const std::vector<json>& bs, int abort_index = -1,
                                          int abort_step = 0) {
  std::map<scheduler::RequestId, size_t> idx;
  std::vector<scheduler::RequestId> ids;
  for (size_t i = 0; i < bs.size(); ++i) {
    ids.push_back(test::unwrap(add(e, bs[i])));
    idx[ids.back()] = i;
  }
  std::vector<std::vector<std::string>> out(bs.size());
  for (int steps = 0; e.has_unfinished() && steps < 5000; ++steps) {
    if (steps == abort_step && abort_index >= 0) {
      EXPECT_TRUE(e.abort(ids[size_t(abort_index)]).is_ok());
    }
    const Status s = e.step();
    EXPECT_TRUE(s.is_ok()) << s.message();
    for (const auto& r : e.take_finished()) out[idx[r.id]] = describe(r);
  }
  EXPECT_FALSE(e.has_unfinished());
  return out;
}

}  // namespace

TEST(AsyncEngine, AsyncEqualsSyncEqualsHostTokenForToken) {
  const auto bs = bodies(/*penalties=*/false);
  auto host = make(options(), Mode::kHost);
  auto sync = make(options(), Mode::kSync);
  test::HostSamplingRunner* fake = nullptr;
  auto async = make(options(), Mode::kAsync, &fake);
  const auto h = run(*host, bs), s = run(*sync, bs), a = run(*async, bs);
  EXPECT_GT(fake->steps_with_fills, 10) << "the asynchronous path was not taken";
  for (size_t i = 0; i < bs.size(); ++i) {
    EXPECT_EQ(s[i], h[i]) << "request " << i << " " << bs[i].dump();
    EXPECT_EQ(a[i], s[i]) << "request " << i << " " << bs[i].dump();
  }
  // The stop strings and the EOS / length limits did end requests (the cases are exercised).
  int stopped = 0, length = 0;
  for (const auto& r : a)
    for (const auto& c : r) {
      stopped += c.rfind("stop|", 0) == 0;
      length += c.rfind("length|", 0) == 0;
    }
  EXPECT_GT(stopped, 0);
  EXPECT_GT(length, 0);
  EXPECT_EQ(async->state_cache().free_slots(), async->state_cache().num_slots()) << "a slot was never freed";
}

TEST(AsyncEngine, PenaltyStepsWaitAndStayExact) {
  const auto bs = bodies(/*penalties=*/true);
  auto sync = make(options(), Mode::kSync);
  auto async = make(options(), Mode::kAsync);
  const auto s = run(*sync, bs), a = run(*async, bs);
  for (size_t i = 0; i < bs.size(); ++i) EXPECT_EQ(a[i], s[i]) << "request " << i << " " << bs[i].dump();
}

TEST(AsyncEngine, TightStateBudgetStaysExact) {
  auto bs = bodies(/*penalties=*/false);
  for (auto& b : bs) b["prompt"] = std::string(b["prompt"]) + " " + std::string(b["prompt"]) + " " + std::string(b["prompt"]);
  auto roomy = make(options(), Mode::kSync);
  const auto want = run(*roomy, bs);
  // Slots for all 16 sequences but token blocks for only two full-length ones: the sequences are admitted, then
  // outgrow the blocks, so the scheduler must preempt (and later recompute) while async steps are in flight.
  cache::StateCacheConfig cc;
  cc.max_num_seqs = 16;
  cc.max_model_len = 96;
  cc.kv_elem_bytes = roomy->runner().kv_elem_bytes();
  const auto layout = test::unwrap(cache::compute_state_layout(roomy->model_config(), cc));
  const int64_t budget = 16 * layout.slot_bytes + 2 * layout.blocks_per_sequence(96) * layout.block_bytes;
  auto o = options(double(budget) / double(int64_t(1) << 30));
  o.max_model_len = 96;
  auto tight = make(o, Mode::kAsync);
  const auto got = run(*tight, bs);
  EXPECT_GT(tight->stats().num_preemptions, 0) << "the budget was meant to force preemption";
  for (size_t i = 0; i < bs.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i << " " << bs[i].dump();
}

TEST(AsyncEngine, AbortDropsTheInFlightTokenAndLeavesOthersExact) {
  auto bs = bodies(/*penalties=*/false);
  bs[0] = {{"prompt", "Count:"}, {"max_tokens", 40}, {"temperature", 0.0}, {"ignore_eos", true}};
  auto full_engine = make(options(), Mode::kSync);
  const auto full = run(*full_engine, bs);
  for (Mode m : {Mode::kSync, Mode::kAsync}) {
    auto e = make(options(), m);
    const auto got = run(*e, bs, /*abort_index=*/0, /*abort_step=*/6);
    for (size_t i = 1; i < bs.size(); ++i) EXPECT_EQ(got[i], full[i]) << "request " << i;
    ASSERT_EQ(got[0].size(), 2u);
    EXPECT_EQ(got[0][0].rfind("abort|", 0), 0u) << got[0][0];
    // Its tokens are a prefix of the full run's (nothing of the dropped in-flight token leaked).
    auto ids_of = [](const std::string& c) {
      const size_t b = c.find('|') + 1;
      return c.substr(b, c.find('|', b) - b);
    };
    const std::string ids = ids_of(got[0][0]), full_ids = ids_of(full[0][0]);
    EXPECT_LT(ids.size(), full_ids.size());
    EXPECT_EQ(full_ids.rfind(ids, 0), 0u) << ids << " vs " << full_ids;
    EXPECT_EQ(e->state_cache().free_slots(), e->state_cache().num_slots());
  }
}
