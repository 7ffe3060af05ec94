// P/D disaggregation on the CUDA runner (CudaRunner::read_state / write_state; tests/unit/test_pd_transfer.cpp is the
// CPU side): a CUDA engine that imports the prefix state another CUDA engine exported continues exactly like one
// CUDA engine that computed the whole prompt (greedy tokens equal, the imported tokens counted as one exact hit), and
// the exported bytes are the state layout's prediction to the byte (skips without a device).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cache/state_blob.h"
#include "cuda/gpu_test_util.h"
#include "dsinfer/engine.h"
#include "test_util.h"

using namespace dsinfer;
using json = nlohmann::json;

namespace {

std::unique_ptr<Engine> cuda_engine(const std::string& model, const std::string& prefix) {
  EngineOptions o;
  o.model_dir = model;
  o.backend = "cuda";
  o.numerics = "hf";  // the V4.1 CUDA runner refuses official numerics by name
  o.max_num_seqs = 4;
  o.max_model_len = 256;
  o.enable_prefix_caching = prefix;
  o.prefix_snapshot_memory_gb = prefix == "off" ? 0 : 0.01;
  std::string err;
  auto e = Engine::create(o, &err);
  test::require(e != nullptr, err);
  return e;
}

RequestResult run(Engine& e, const std::vector<int32_t>& prompt, int max_tokens) {
  const json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0}};
  std::string err;
  test::require(e.submit(body.dump(), &err) != 0, err);
  std::vector<RequestResult> out;
  test::require(e.run_until_idle(out, &err), err);
  test::require(out.size() == 1, "one result");
  return out[0];
}

}  // namespace

TEST(GpuPdTransfer, ImportedStateContinuesExactlyLikeOneEngine) {
  DSI_SKIP_WITHOUT_GPU();
  for (const char* name : {"tiny-v4-a", "tiny-v41-a"}) {
    SCOPED_TRACE(name);
    const std::string model = test::own_fixture(name);
    auto prefill = cuda_engine(model, "exact");
    auto decode = cuda_engine(model, "exact");
    auto single = cuda_engine(model, "off");
    const int64_t bs = prefill->stats().state_block_size;
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < 3 * bs + 5; ++i) prompt.push_back(int32_t(2 + (i * 37 + i * i) % 200));
    run(*prefill, prompt, 1);
    std::string blob, err;
    ASSERT_TRUE(prefill->export_prefix_state(prompt, &blob, &err)) << err;
    const EngineStats st = prefill->stats();
    EXPECT_EQ(int64_t(blob.size()),
              cache::state_blob_bytes({0, bs, st.state_block_bytes, st.state_slot_bytes, 3 * bs}));
    ASSERT_EQ(decode->import_prefix_state(blob, &err), 3 * bs) << err;
    const RequestResult d = run(*decode, prompt, 12), s = run(*single, prompt, 12);
    EXPECT_EQ(d.completions.at(0).token_ids, s.completions.at(0).token_ids);
    EXPECT_EQ(decode->stats().prefix_cache.exact_hits, 1);
    EXPECT_EQ(decode->stats().prefix_cache.hit_tokens, 3 * bs);
  }
}
