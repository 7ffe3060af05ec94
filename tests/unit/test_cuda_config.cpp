// The one CUDA runner's host-side config decisions (backends/cuda/runner/cuda_config.h), on the CPU: when a family's
// GPU forward refuses a numerics profile (by name, never swapped), and the cut of a config to its first layers
// (--layers with dummy weights), which for DeepSeek-V4.1 also filters the role and Engram lists.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/runner/cuda_config.h"
#include "io/config.h"
#include "test_util.h"

using namespace dsinfer;

// DeepSeek-V4.1 official numerics run on one GPU (the official MoE's expert-id-order fp32 sum spans all experts); the
// refusal names the profile and the reason. Nothing else is refused.
TEST(CudaConfig, V41OfficialNumericsAreRefusedOnlyOnSeveralGpus) {
  const io::ModelConfig v41 = test::unwrap(io::load_model_config(test::own_fixture("tiny-v41-a")));
  const io::ModelConfig v4 = test::unwrap(io::load_model_config(test::own_fixture("tiny-v4-a")));
  EXPECT_EQ(backends::cuda_numerics_refusal(v41, model::Numerics::official()), "");
  const std::string why = backends::cuda_numerics_refusal(v41, model::Numerics::official(), 2);
  EXPECT_NE(why.find("'official'"), std::string::npos) << why;
  EXPECT_NE(why.find("one GPU"), std::string::npos) << why;
  EXPECT_NE(why.find("hf-noqat"), std::string::npos) << why;
  for (int64_t gpus : {1, 2}) {
    EXPECT_EQ(backends::cuda_numerics_refusal(v41, model::Numerics::hf(), gpus), "");
    EXPECT_EQ(backends::cuda_numerics_refusal(v41, model::Numerics::hf_noqat(), gpus), "");
    EXPECT_EQ(backends::cuda_numerics_refusal(v4, model::Numerics::official(), gpus), "");
    EXPECT_EQ(backends::cuda_numerics_refusal(v4, model::Numerics::hf(), gpus), "");
  }
}

TEST(CudaConfig, KeepFirstLayersFiltersTheV41Roles) {
  // tiny-v41-a: kv sources 2 4 6, index sources 2 4 6 8, candidate source 6, Engram layers 1 (864 rows), 4 (1054).
  io::ModelConfig c = test::unwrap(io::load_model_config(test::own_fixture("tiny-v41-a")));
  ASSERT_EQ(c.v41.engram_layer_ids, (std::vector<int64_t>{1, 4}));
  backends::keep_first_layers(c, 5);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.layer_types.size(), 5u);
  EXPECT_EQ(c.mlp_layer_types.size(), 5u);
  EXPECT_EQ(c.compress_ratios.size(), 5u);
  EXPECT_EQ(c.v41.kv_source_layer_ids, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(c.v41.index_source_layer_ids, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(c.v41.candidate_source_layer_id, -1);
  EXPECT_EQ(c.v41.engram_layer_ids, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(c.v41.engram_num_embeddings, (std::vector<int64_t>{864, 1054}));
  backends::keep_first_layers(c, 3);
  EXPECT_EQ(c.v41.kv_source_layer_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.v41.engram_layer_ids, (std::vector<int64_t>{1}));
  EXPECT_EQ(c.v41.engram_num_embeddings, (std::vector<int64_t>{864}));
}

TEST(CudaConfig, KeepFirstLayersOnV4CutsThePerLayerLists) {
  io::ModelConfig c = test::unwrap(io::load_model_config(test::own_fixture("tiny-v4-a")));
  ASSERT_GE(c.num_hidden_layers, 2);
  const auto first = c.compress_ratios[1];
  backends::keep_first_layers(c, 2);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.layer_types.size(), 2u);
  EXPECT_EQ(c.compress_ratios.size(), 2u);
  EXPECT_EQ(c.compress_ratios[1], first);
}
