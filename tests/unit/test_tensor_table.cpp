// The tensor table (model/tensor_table.h): it lists exactly the tensors of a real checkpoint, every (layer, role,
// expert) once and per layer exactly the roles its attention / MoE types need, the official storage formats per
// role, and the CPU loader fills every table entry with its full shape.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "io/config.h"
#include "io/safetensors.h"
#include "model/tensor_table.h"
#include "model/weights.h"
#include "test_util.h"

using namespace dsinfer;
using model::TensorKind;
using model::TensorRole;

namespace {

const std::string kFixture = test::own_fixture("tiny-v4-a");

io::ModelConfig fixture_config() {
  auto cfg = io::load_model_config(kFixture);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  return cfg.is_ok() ? *cfg : io::ModelConfig{};
}

}  // namespace

TEST(TensorTable, ListsExactlyTheCheckpointTensors) {
  const io::ModelConfig cfg = fixture_config();
  ASSERT_GT(cfg.num_hidden_layers, 0);
  auto ck = io::Checkpoint::open(kFixture);
  ASSERT_TRUE(ck.is_ok()) << ck.status().message();
  std::set<std::string> in_checkpoint, in_table;
  for (const auto& [name, t] : ck->tensors()) {
    const std::string c = model::canonical_tensor_name(name);
    // Scales belong to their weight's table entry.
    if (!c.empty() && !(c.size() > 6 && c.compare(c.size() - 6, 6, ".scale") == 0)) in_checkpoint.insert(c);
  }
  for (const auto& s : model::weight_specs(cfg)) EXPECT_TRUE(in_table.insert(s.name).second) << "duplicate " << s.name;
  EXPECT_EQ(in_table, in_checkpoint);
}

TEST(TensorTable, EachLayerHasTheRolesOfItsTypes) {
  const io::ModelConfig cfg = fixture_config();
  ASSERT_GT(cfg.num_hidden_layers, 0);
  std::set<std::tuple<int32_t, TensorRole, int32_t>> seen;
  std::map<int32_t, std::map<TensorRole, int>> count;
  for (const auto& s : model::weight_specs(cfg)) {
    EXPECT_TRUE(seen.insert({s.layer, s.role, s.expert}).second) << s.name;
    EXPECT_EQ(s.expert >= 0, s.role == TensorRole::ExpertW1 || s.role == TensorRole::ExpertW3 || s.role == TensorRole::ExpertW2)
        << s.name;
    EXPECT_GT(s.rows * s.cols, 0) << s.name;
    ++count[s.layer][s.role];
  }
  EXPECT_EQ(count[-1][TensorRole::Embed], 1);
  EXPECT_EQ(count[-1][TensorRole::Head], cfg.tie_word_embeddings ? 0 : 1);
  for (int32_t l = 0; l < int32_t(cfg.num_hidden_layers); ++l) {
    auto& c = count[l];
    const io::AttnType at = cfg.layer_types[size_t(l)];
    const bool hash = cfg.mlp_layer_types[size_t(l)] == io::MlpType::HashMoE;
    EXPECT_EQ(c[TensorRole::WqA], 1) << l;
    EXPECT_EQ(c[TensorRole::CompWkv], at != io::AttnType::Sliding ? 1 : 0) << l;
    EXPECT_EQ(c[TensorRole::IdxCompApe], at == io::AttnType::CSA ? 1 : 0) << l;
    EXPECT_EQ(c[TensorRole::IdxWeightsProj], at == io::AttnType::CSA ? 1 : 0) << l;
    EXPECT_EQ(c[TensorRole::Tid2Eid], hash ? 1 : 0) << l;
    EXPECT_EQ(c[TensorRole::GateBias], hash ? 0 : 1) << l;
    EXPECT_EQ(c[TensorRole::ExpertW2], cfg.n_routed_experts) << l;
    EXPECT_EQ(c[TensorRole::SharedW1], cfg.n_shared_experts > 0 ? 1 : 0) << l;
  }
}

TEST(TensorTable, OfficialStorageByRole) {
  auto spec = [](TensorRole r, TensorKind k = TensorKind::Matrix) {
    model::TensorSpec s;
    s.role = r;
    s.kind = k;
    return s;
  };
  EXPECT_EQ(model::official_storage(spec(TensorRole::ExpertW1)), DType::I8);
  EXPECT_EQ(model::official_storage(spec(TensorRole::SharedW2)), DType::F8_E4M3);
  EXPECT_EQ(model::official_storage(spec(TensorRole::WoA)), DType::F8_E4M3);
  EXPECT_EQ(model::official_storage(spec(TensorRole::IdxWqB)), DType::F8_E4M3);
  EXPECT_EQ(model::official_storage(spec(TensorRole::HcAttnFn)), DType::F32);
  EXPECT_EQ(model::official_storage(spec(TensorRole::CompApe)), DType::F32);
  EXPECT_EQ(model::official_storage(spec(TensorRole::GateBias, TensorKind::Vector)), DType::F32);
  EXPECT_EQ(model::official_storage(spec(TensorRole::Tid2Eid, TensorKind::IndexTable)), DType::I64);
  EXPECT_EQ(model::official_storage(spec(TensorRole::CompWkv)), DType::BF16);
  EXPECT_EQ(model::official_storage(spec(TensorRole::Embed)), DType::BF16);
  EXPECT_EQ(model::official_storage(spec(TensorRole::QNorm, TensorKind::Vector)), DType::BF16);
  EXPECT_TRUE(model::read_as_floats(TensorRole::HcHeadFn));
  EXPECT_TRUE(model::read_as_floats(TensorRole::IdxCompApe));
  EXPECT_FALSE(model::read_as_floats(TensorRole::Gate));
}

TEST(TensorTable, CpuLoaderFillsEveryEntry) {
  const io::ModelConfig cfg = fixture_config();
  auto ck = io::Checkpoint::open(kFixture);
  ASSERT_TRUE(ck.is_ok()) << ck.status().message();
  auto w = model::load_weights(cfg, *ck);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  auto resolved = model::resolve_weights(cfg, *ck);
  ASSERT_TRUE(resolved.is_ok()) << resolved.status().message();
  EXPECT_EQ(resolved->size(), model::weight_specs(cfg).size());
  for (const auto& r : *resolved) EXPECT_NE(r.data, nullptr) << r.spec.name;
  ASSERT_EQ(w->layers.size(), size_t(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const model::LayerWeights& L = w->layers[size_t(l)];
    const io::AttnType at = cfg.layer_types[size_t(l)];
    EXPECT_EQ(L.wo_b.data.size(), size_t(L.wo_b.rows * L.wo_b.cols)) << l;
    EXPECT_EQ(L.compressor.has_value(), at != io::AttnType::Sliding) << l;
    EXPECT_EQ(L.idx_compressor.has_value(), at == io::AttnType::CSA) << l;
    if (L.idx_compressor) {
      EXPECT_EQ(L.idx_compressor->norm.size(), size_t(cfg.index_head_dim)) << l;
    }
    ASSERT_EQ(L.experts.size(), size_t(cfg.n_routed_experts)) << l;
    EXPECT_EQ(L.experts.back().w2.data.size(), size_t(cfg.hidden_size * cfg.moe_intermediate_size)) << l;
    EXPECT_EQ(L.tid2eid.empty(), cfg.mlp_layer_types[size_t(l)] != io::MlpType::HashMoE) << l;
    EXPECT_EQ(L.shared.has_value(), cfg.n_shared_experts > 0) << l;
  }
}
