// The engine features of the one CUDA runner, for every model family (issue 26): each case runs through the public
// Engine API (--backend cuda, hf numerics) on DeepSeek-V4 (models/dsv4-small, its checkpoint) and on DeepSeek-V4.1
// (the tiny-v41-a config with dummy weights: the engine needs a BPE tokenizer and the V4.1 fixtures have a WordLevel
// one, so the V4.1 model is the fixture's config with the V4 model's vocabulary size and tokenizer; numerics of the
// V4.1 forward against the CPU on the fixture's own weights: test_v41_runner_gpu.cpp), so a feature written once in
// CudaRunner is checked on both forwards:
//   graphs vs eager             DSINFER_CUDA_GRAPHS=0 against the default: every token and logprob bit-identical
//                               (a decode step is laid out for max_model_len graphed or not);
//   async vs sync               async scheduling on vs off under --batch-invariant (an async step may plan a surplus
//                               row; invariance makes every row independent of it): bit-identical;
//   device vs host sampling     --sampling device vs host, greedy and seeded: identical token ids (the two samplers
//                               share their draw rule; logprobs differ only in the last ulps, so they are compared
//                               to 1e-4, the device softmax being fp32 against the host's);
//   batch invariance            requests alone vs mixed with others under a state budget that forces preemption:
//                               bit-identical;
//   prefix caching              exact prefix caching (with a host tier) vs off on shared-prefix prompts: identical;
//                               bounded mode runs clean;
//   structured outputs          a regex constraint, device vs host sampling (grammar masks on the GPU vs the host):
//                               identical tokens, and the text matches the pattern;
//   speculative decoding        V4: covered by test_spec_gpu.cpp; V4.1: test_spec_v41_gpu.cpp (a checkpoint with a
//                               drafter); here the dummy V4.1 model has no drafter stages: refused, naming that;
//   official numerics           both families run them (the profile named in the backend).
// Requests are token ids (no tokenizer needed), except the structured-output case. Without a device or the model
// files, the tests skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/gpu_test_util.h"
#include "dsinfer/engine.h"
#include "scoped_env.h"
#include "tests/build_paths.h"

namespace {

struct Family {
  const char* name;
  const char* dir;  // relative to the checkout
};

const std::string kV4 = std::string(DSINFER_SOURCE_DIR) + "/models/dsv4-small";

// The V4.1 model of these tests: tiny-v41-a's config with the V4 model's vocabulary size, and the V4 tokenizer
// (written once into a temporary folder; dummy weights).
std::string v41_model_dir() {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "dsinfer_families_v41";
  if (std::filesystem::exists(dir / "config.json")) return dir.string();
  std::filesystem::create_directories(dir);
  std::ifstream in(std::string(DSINFER_SOURCE_DIR) + "/tests/fixtures/tiny-v41-a/config.json");
  std::ifstream v4(kV4 + "/config.json");
  if (!in || !v4) return "";
  nlohmann::json c = nlohmann::json::parse(in);
  c["text_config"]["vocab_size"] = nlohmann::json::parse(v4)["vocab_size"];
  std::ofstream(dir / "config.json") << c.dump(2);
  std::filesystem::copy_file(kV4 + "/tokenizer.json", dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  return dir.string();
}

std::string model_dir(const Family& f) {
  return std::string(f.name) == "v41" ? v41_model_dir() : std::string(DSINFER_SOURCE_DIR) + "/" + f.dir;
}

class EngineFamilies : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    DSI_SKIP_WITHOUT_GPU();
    if (!std::filesystem::exists(kV4 + "/model.safetensors") ||
        !std::filesystem::exists(std::string(DSINFER_SOURCE_DIR) + "/" + GetParam().dir + "/config.json"))
      GTEST_SKIP() << GetParam().dir << " or models/dsv4-small not present";
  }
  dsinfer::EngineOptions options() const {
    dsinfer::EngineOptions o;
    o.model_dir = model_dir(GetParam());
    o.backend = "cuda";
    o.numerics = "hf";
    if (std::string(GetParam().name) == "v41") o.load_format = "dummy";
    o.max_num_seqs = 16;
    o.max_num_batched_tokens = 96;
    o.max_model_len = 512;
    o.seed = 5;
    return o;
  }
};

// Request i: `len` prompt ids (optionally after a shared prefix of `shared` ids), greedy or seeded, logprobs with
// 3 alternatives, ignore_eos so that every request runs to max_tokens.
dsinfer::Request request(int i, int len, int shared = 0) {
  dsinfer::Request r;
  r.prompt_is_ids = true;
  for (int k = 0; k < shared; ++k) r.prompt_ids.push_back(10 + (k * 37) % 400);
  for (int k = 0; k < len; ++k) r.prompt_ids.push_back(10 + (i * 131 + k * 29 + (k * k) % 17) % 400);
  r.sampling.max_tokens = 6 + (i * 5) % 18;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 3;
  if (i % 2) {
    r.sampling.temperature = 0.8;
    r.sampling.seed = uint64_t(100 + i);
  } else {
    r.sampling.temperature = 0;
  }
  return r;
}

std::vector<dsinfer::Request> requests(int n, int shared = 0) {
  std::vector<dsinfer::Request> out;
  for (int i = 0; i < n; ++i) out.push_back(request(i, 5 + (i * 11) % 40, shared));
  return out;
}

struct Out {
  std::vector<int32_t> tokens;
  std::vector<dsinfer::TokenLogprob> logprobs;
  std::string text;
};

// Runs the requests to completion; `preemptions` (optional) gets the engine's count.
std::vector<Out> run(const dsinfer::EngineOptions& o, const std::vector<dsinfer::Request>& reqs,
                     int64_t* preemptions = nullptr) {
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  EXPECT_TRUE(e) << err;
  if (!e) return {};
  std::map<uint64_t, size_t> idx;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const uint64_t id = e->submit(reqs[i], &err);
    EXPECT_NE(id, 0u) << err;
    idx[id] = i;
  }
  std::vector<dsinfer::RequestResult> results;
  EXPECT_TRUE(e->run_until_idle(results, &err)) << err;
  if (preemptions) *preemptions = e->stats().num_preemptions;
  std::vector<Out> out(reqs.size());
  for (const auto& r : results) {
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(r.completions.size(), 1u);
    if (r.completions.empty()) continue;
    out[idx[r.id]] = {r.completions[0].token_ids, r.completions[0].logprobs, r.completions[0].text};
  }
  return out;
}

// Requests whose tokens differ, or (tol < 0: bitwise) whose logprobs or alternatives differ by more than tol.
int differing(const std::vector<Out>& a, const std::vector<Out>& b, double tol, const std::string& what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    bool same = a[i].tokens == b[i].tokens && a[i].logprobs.size() == b[i].logprobs.size();
    for (size_t k = 0; same && k < a[i].logprobs.size(); ++k) {
      const auto &x = a[i].logprobs[k], &y = b[i].logprobs[k];
      if (tol < 0) {
        same = x.logprob == y.logprob && x.top == y.top;
      } else {
        same = std::fabs(x.logprob - y.logprob) <= tol;
      }
    }
    if (!same) {
      ++bad;
      ADD_FAILURE() << what << ": request " << i << " differs (" << a[i].tokens.size() << " vs " << b[i].tokens.size()
                    << " tokens)";
    }
  }
  return bad;
}

}  // namespace

TEST_P(EngineFamilies, GraphsEqualEager) {
  const auto reqs = requests(12);
  const std::vector<Out> graphs = run(options(), reqs);
  std::vector<Out> eager;
  {
    dsinfer::test::ScopedEnv off("DSINFER_CUDA_GRAPHS", "0");
    eager = run(options(), reqs);
  }
  EXPECT_EQ(differing(graphs, eager, -1, "graphs vs eager"), 0);
}

TEST_P(EngineFamilies, AsyncEqualsSync) {
  const auto reqs = requests(12);
  dsinfer::EngineOptions o = options();
  o.batch_invariant = true;
  o.async_scheduling = "on";
  const std::vector<Out> async = run(o, reqs);
  o.async_scheduling = "off";
  EXPECT_EQ(differing(async, run(o, reqs), -1, "async vs sync"), 0);
}

TEST_P(EngineFamilies, DeviceSamplingEqualsHost) {
  const auto reqs = requests(12);
  dsinfer::EngineOptions o = options();
  o.sampling = "device";
  const std::vector<Out> device = run(o, reqs);
  o.sampling = "host";
  EXPECT_EQ(differing(device, run(o, reqs), 1e-4, "device vs host sampling"), 0);
}

TEST_P(EngineFamilies, BatchInvariantAloneEqualsMixedWithPreemption) {
  const auto mine = requests(6);
  dsinfer::EngineOptions o = options();
  o.batch_invariant = true;
  const std::vector<Out> alone = run(o, mine);
  // The same six among 30 others (20..79 prompt tokens, 30..69 generated) under a state budget with all 16 slots but
  // token blocks for little more than one max_model_len (512) sequence. Preemption has to come from decode growth:
  // admission takes blocks for a sequence's first chunk only and waits when they are short, and with 64 tokens a
  // step, long prompts prefill one after the other, so long prompts with short outputs never overlap enough to
  // preempt (this test saw 0 preemptions that way). Here all 16 slots are soon decoding at once and their contexts
  // together outgrow the blocks several times over: preemption is certain and deterministic (the schedule depends
  // only on token counts; the CPU engine preempts 46 times on the V4 model at this budget).
  std::vector<dsinfer::Request> mixed;
  std::vector<size_t> where;
  for (int i = 0; i < 36; ++i) {
    if (i % 6 == 3) {
      where.push_back(mixed.size());
      mixed.push_back(mine[size_t(i / 6)]);
    } else {
      mixed.push_back(request(50 + i, 20 + (i * 97) % 60));
      mixed.back().sampling.max_tokens = 30 + (i * 37) % 40;
    }
  }
  o.max_num_batched_tokens = 64;
  // The smallest budget that still gives every slot (slots are taken before blocks: state_cache.cpp), by bisection
  // over the engine's own sizing.
  auto slots_at = [&](double bytes) {
    dsinfer::EngineOptions p = o;
    p.state_memory_gb = bytes / double(int64_t(1) << 30);
    std::string err;
    auto e = dsinfer::Engine::create(p, &err);
    return e ? e->stats().state_slots : 0;
  };
  dsinfer::EngineOptions one = o;
  one.max_num_seqs = 1;
  std::string err;
  auto probe = dsinfer::Engine::create(one, &err);
  ASSERT_TRUE(probe) << err;
  double lo = double(probe->stats().state_bytes_budget), hi = 16.0 * lo;  // one sequence; room for all 16
  probe.reset();
  ASSERT_EQ(slots_at(hi), o.max_num_seqs);
  for (int k = 0; k < 12; ++k) {
    const double mid = 0.5 * (lo + hi);
    (slots_at(mid) == o.max_num_seqs ? hi : lo) = mid;
  }
  o.state_memory_gb = hi / double(int64_t(1) << 30);
  int64_t preemptions = 0;
  const std::vector<Out> together = run(o, mixed, &preemptions);
  ASSERT_EQ(together.size(), mixed.size());
  EXPECT_GT(preemptions, 0) << "the state budget did not force a preemption";
  std::vector<Out> picked;
  for (size_t w : where) picked.push_back(together[w]);
  EXPECT_EQ(differing(alone, picked, -1, "alone vs mixed with preemption"), 0);
}

TEST_P(EngineFamilies, PrefixCachingEqualsOff) {
  const auto reqs = requests(10, 150);  // a 150-token shared prefix
  dsinfer::EngineOptions o = options();
  o.batch_invariant = true;  // a hit computes fewer tokens in its step: invariance keeps its rows exact
  const std::vector<Out> off = run(o, reqs);
  o.enable_prefix_caching = "exact";
  o.prefix_cache_host_bytes = int64_t(64) << 20;
  EXPECT_EQ(differing(off, run(o, reqs), -1, "prefix caching exact vs off"), 0);
  // Bounded mode (sliding windows replayed, an approximation by design): runs clean, every request to max_tokens.
  o.enable_prefix_caching = "bounded";
  const std::vector<Out> bounded = run(o, reqs);
  ASSERT_EQ(bounded.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(int64_t(bounded[i].tokens.size()), reqs[i].sampling.max_tokens);
}

TEST_P(EngineFamilies, StructuredOutputsOnDeviceEqualHost) {
  const std::string pattern = "(ab|cd)+ [0-9]{2}";
  dsinfer::EngineOptions o = options();
  std::map<std::string, std::vector<std::string>> texts;
  for (const char* mode : {"device", "host"}) {
    o.sampling = mode;
    std::string err;
    auto e = dsinfer::Engine::create(o, &err);
    ASSERT_TRUE(e) << err;
    for (int i = 0; i < 4; ++i) {
      const std::string body = R"({"prompt": "Write: )" + std::to_string(i) +
                               R"(", "max_tokens": 40, "temperature": )" +
                               (i % 2 ? std::string("0.7, \"seed\": ") + std::to_string(9 + i) : std::string("0")) +
                               R"(, "structured_outputs": {"regex": ")" + pattern + R"("}})";
      ASSERT_NE(e->submit(body, &err), 0u) << err;
    }
    std::vector<dsinfer::RequestResult> results;
    ASSERT_TRUE(e->run_until_idle(results, &err)) << err;
    std::sort(results.begin(), results.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    for (const auto& r : results) {
      ASSERT_EQ(r.completions.size(), 1u);
      const auto& c = r.completions[0];
      if (c.finish_reason == "stop")
        EXPECT_TRUE(std::regex_match(c.text, std::regex(pattern))) << mode << ": '" << c.text << "'";
      texts[mode].push_back(c.text + "|" + c.finish_reason);
    }
  }
  EXPECT_EQ(texts["device"], texts["host"]);
}

TEST_P(EngineFamilies, SpeculativeDecodingWithoutDrafterStagesIsRefusedByName) {
  if (std::string(GetParam().name) != "v41") GTEST_SKIP() << "V4: test_spec_gpu.cpp";
  dsinfer::EngineOptions o = options();
  o.speculative = "dspark";
  o.num_speculative_tokens = 2;
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  EXPECT_FALSE(e);
  EXPECT_NE(err.find("no DSpark drafter"), std::string::npos) << err;
}

TEST_P(EngineFamilies, OfficialNumericsRun) {
  dsinfer::EngineOptions o = options();
  o.numerics = "official";
  std::string err;
  auto e = dsinfer::Engine::create(o, &err);
  ASSERT_TRUE(e) << err;
  EXPECT_NE(e->backend_name().find("official"), std::string::npos) << e->backend_name();
  std::vector<dsinfer::RequestResult> results;
  EXPECT_NE(e->submit(request(0, 9), &err), 0u) << err;
  EXPECT_TRUE(e->run_until_idle(results, &err)) << err;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(int64_t(results[0].completions.at(0).token_ids.size()), request(0, 9).sampling.max_tokens);
}

INSTANTIATE_TEST_SUITE_P(Both, EngineFamilies,
                         ::testing::Values(Family{"v4", "models/dsv4-small"},
                                           Family{"v41", "tests/fixtures/tiny-v41-a"}),
                         [](const ::testing::TestParamInfo<Family>& i) { return std::string(i.param.name); });
