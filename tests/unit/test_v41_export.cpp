// DeepSeek-V4.1 checkpoints in the release's storage formats (model/export_v41.h) and their validated, undecoded
// views (model::resolve_weights_v41, what the CUDA upload streams): a fixture converted into FP8 / FP4 / FP8-row
// shards reads back through the CPU loader as exactly the quantized source values; every tensor resolves to the
// format storage_format_v41 names, and the bytes on disk are the bytes `dsinfer plan` counts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "dsinfer/diagnostics.h"
#include "io/config.h"
#include "io/quant.h"
#include "model/deepseek_v41.h"
#include "model/export_v41.h"
#include "model/weights_v41.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

DType expected_dtype(model::StorageV41 f) {
  switch (f) {
    case model::StorageV41::Fp8Block32:
    case model::StorageV41::Fp8Row32: return DType::F8_E4M3;
    case model::StorageV41::Fp4Row32: return DType::I8;
    case model::StorageV41::F32: return DType::F32;
    case model::StorageV41::BF16: break;
  }
  return DType::BF16;
}

}  // namespace

TEST(V41Export, FixtureConvertsToOfficialFormatsAndResolvesAsStored) {
  const test::ScratchDir out("v41_export");
  // Small shards so the index and several files are exercised.
  ASSERT_TRUE(model::convert_checkpoint_v41(test::own_fixture("tiny-v41-a"), out.str(), int64_t(256) << 10, 3).is_ok());
  ASSERT_TRUE(std::filesystem::exists(out.path / "model.safetensors.index.json"));
  ASSERT_TRUE(std::filesystem::exists(out.path / "tokenizer.json"));
  int shards = 0;
  for (const auto& e : std::filesystem::directory_iterator(out.path)) shards += e.path().extension() == ".safetensors";
  EXPECT_GT(shards, 2);
  const io::ModelConfig cfg = test::unwrap(io::load_model_config(out.str()));
  EXPECT_EQ(cfg.fp8_block_n, 32);
  EXPECT_EQ(cfg.fp8_block_k, 32);
  EXPECT_TRUE(cfg.fp8_weights);
  const io::Checkpoint ckpt = test::unwrap(model::open_checkpoint_v41(out.str()));
  const std::vector<model::StoredTensorV41> stored = test::unwrap(model::resolve_weights_v41(cfg, ckpt));
  const std::vector<model::TensorSpec> specs = model::weight_specs_v41(cfg);
  ASSERT_EQ(stored.size(), specs.size());
  double plan = 0, disk = 0;
  std::map<model::StorageV41, int> seen;
  for (const auto& t : stored) {
    const model::StorageV41 f = model::storage_format_v41(t.spec);
    ++seen[f];
    EXPECT_EQ(t.data->dtype, expected_dtype(f)) << t.spec.name;
    const bool scaled = f == model::StorageV41::Fp8Block32 || f == model::StorageV41::Fp8Row32 ||
                        f == model::StorageV41::Fp4Row32;
    ASSERT_EQ(t.scale != nullptr, scaled) << t.spec.name;
    if (scaled) {
      EXPECT_EQ(t.scale->dtype, DType::F8_E8M0) << t.spec.name;
    }
    if (f == model::StorageV41::Fp8Row32 || f == model::StorageV41::Fp8Block32) {
      EXPECT_EQ(t.block_n, f == model::StorageV41::Fp8Row32 ? 1 : 32) << t.spec.name;
    }
    plan += model::official_storage_bytes_v41(t.spec);
    disk += double(t.data->nbytes) + (t.scale ? double(t.scale->nbytes) : 0.0);
  }
  for (auto f : {model::StorageV41::Fp8Block32, model::StorageV41::Fp8Row32, model::StorageV41::Fp4Row32,
                 model::StorageV41::F32, model::StorageV41::BF16})
    EXPECT_GT(seen[f], 0) << "format " << int(f) << " not exercised by the fixture";
  EXPECT_EQ(disk, plan);  // the plan's bytes are the checkpoint's bytes, exactly
}

TEST(V41Export, CpuLoaderReadsBackTheQuantizedSourceValues) {
  const test::ScratchDir out("v41_export_values");
  const std::string src = test::own_fixture("tiny-v41-a");
  ASSERT_TRUE(model::convert_checkpoint_v41(src, out.str()).is_ok());
  const auto a = test::unwrap(model::DeepseekV41Cpu::load(src, model::Numerics::hf_noqat()));
  const auto b = test::unwrap(model::DeepseekV41Cpu::load(out.str(), model::Numerics::hf_noqat()));
  const model::WeightsV41 &x = a->weights(), &y = b->weights();
  EXPECT_FALSE(y.fp32_storage);
  // FP8 32x32 (wq_b), FP4 per 32 (an expert's w2), FP8 rows (an Engram table), BF16 (embed): each the source
  // quantized by the official rule and decoded again, bit for bit.
  auto fp8 = [](const model::Mat& m, int64_t br) {
    std::vector<uint8_t> q(m.data.size()), s(size_t(((m.rows + br - 1) / br) * ((m.cols + 31) / 32)));
    io::quant_fp8_block(m.data.data(), m.rows, m.cols, br, 32, q.data(), s.data());
    std::vector<float> back(m.data.size());
    io::dequant_fp8_block(q.data(), m.rows, m.cols, s.data(), DType::F8_E8M0, br, 32, back.data());
    return back;
  };
  EXPECT_EQ(y.layers[3].wq_b.data, fp8(x.layers[3].wq_b, 32));
  const model::Mat& w2 = x.layers[2].experts[5].w2;
  std::vector<uint8_t> q(w2.data.size() / 2), s(w2.data.size() / 32);
  io::quant_fp4_e2m1(w2.data.data(), w2.rows, w2.cols, 32, q.data(), s.data());
  std::vector<float> back(w2.data.size());
  io::dequant_fp4_e2m1(q.data(), w2.rows, w2.cols, s.data(), DType::F8_E8M0, 32, back.data());
  EXPECT_EQ(y.layers[2].experts[5].w2.data, back);
  ASSERT_TRUE(x.layers[1].engram && y.layers[1].engram);
  // The models hold their Engram tables in EngramRows (model/engram_rows.h): the tables straight from the loader.
  auto table = [](const std::string& dir) {
    const io::ModelConfig cfg = test::unwrap(io::load_model_config(dir));
    const io::Checkpoint ckpt = test::unwrap(model::open_checkpoint_v41(dir));
    return std::move(test::unwrap(model::load_weights_v41(cfg, ckpt)).layers[1].engram->table);
  };
  EXPECT_EQ(table(out.str()).data, fp8(table(src), 1));
  for (size_t i = 0; i < x.embed.data.size(); ++i) ASSERT_EQ(y.embed.data[i], round_bf16(x.embed.data[i])) << i;
  // The fixture's weights were generated on the release's grids (QAT-simulated), so the conversion loses nothing:
  // the CPU runner on the converted checkpoint is the CPU runner on the fixture.
  EXPECT_EQ(y.layers[3].wq_b.data, x.layers[3].wq_b.data);
}

TEST(V41Export, RandomCheckpointAtOtherShapesLoadsAndBadSourcesNameTheTensor) {
  const test::ScratchDir out("v41_export_random");
  std::ifstream in(test::own_fixture("tiny-v41-b") + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  const io::ModelConfig cfg = test::unwrap(io::load_model_config(test::own_fixture("tiny-v41-b")));
  ASSERT_TRUE(model::write_checkpoint_v41(cfg, text.str(), model::random_fill_v41(7), out.str()).is_ok());
  std::filesystem::copy_file(test::own_fixture("tiny-v41-b") + "/tokenizer.json", out.path / "tokenizer.json");
  const auto m = test::unwrap(model::DeepseekV41Cpu::load(out.str(), model::Numerics::hf_noqat()));
  EXPECT_EQ(m->weights().layers.size(), size_t(cfg.num_hidden_layers));
  // Random values are not on the grid: what loads is their official quantization, which moved them.
  model::TensorSpec spec;
  spec.name = "layers.0.attn.wq_a.weight";
  spec.rows = cfg.q_lora_rank;
  spec.cols = cfg.hidden_size;
  std::vector<float> raw;
  ASSERT_TRUE(model::random_fill_v41(7)(spec, raw).is_ok());
  std::vector<uint8_t> q(raw.size()), sc(size_t(((spec.rows + 31) / 32) * ((spec.cols + 31) / 32)));
  io::quant_fp8_block(raw.data(), spec.rows, spec.cols, 32, 32, q.data(), sc.data());
  std::vector<float> back(raw.size());
  io::dequant_fp8_block(q.data(), spec.rows, spec.cols, sc.data(), DType::F8_E8M0, 32, 32, back.data());
  EXPECT_EQ(m->weights().layers[0].wq_a.data, back);
  EXPECT_NE(back, raw);
  // A source that gives the wrong number of values is an error naming the tensor.
  const test::ScratchDir bad("v41_export_bad");
  const Status s = model::write_checkpoint_v41(
      cfg, text.str(),
      [](const model::TensorSpec& spec, std::vector<float>& v) {
        v.assign(size_t(spec.rows * spec.cols) + (spec.name == "layers.0.attn.wq_a.weight" ? 1 : 0), 0.5f);
        return Status::ok();
      },
      bad.str());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("layers.0.attn.wq_a.weight"), std::string::npos) << s.message();
}

// resolve_weights_v41 (what the CUDA upload streams) rejects what load_weights_v41 rejects, with the same message:
// here an FP8 tensor whose scale grid does not match config.json's weight_block_size.
TEST(V41Export, ResolveReportsTheLoadersProblemsNamingTheTensor) {
  const test::ScratchDir out("v41_export_resolve");
  ASSERT_TRUE(model::convert_checkpoint_v41(test::own_fixture("tiny-v41-a"), out.str()).is_ok());
  io::ModelConfig cfg = test::unwrap(io::load_model_config(out.str()));
  cfg.fp8_block_n = 64;  // the writer used 32 x 32 blocks
  const io::Checkpoint ckpt = test::unwrap(model::open_checkpoint_v41(out.str()));
  const auto resolved = model::resolve_weights_v41(cfg, ckpt);
  const auto loaded = model::load_weights_v41(cfg, ckpt);
  ASSERT_FALSE(resolved.is_ok());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_EQ(resolved.status().message(), loaded.status().message());
  EXPECT_NE(resolved.status().message().find("layers.0.attn.wq_b.scale"), std::string::npos)
      << resolved.status().message();
}

// `dsinfer convert` (the user's path to the writer): a fixture converted through the CLI loads, in the storage formats,
// and passes the fixture's hf-noqat check-reference gate; random values at overridden shapes land as asked, and what `dsinfer plan` counts
// for that folder is what was written; bad arguments are refused naming the argument.
TEST(V41Export, CliConvertsAFixtureAndWritesRandomCheckpoints) {
  const test::ScratchDir dir("v41_convert_cli");
  const std::string fx = test::own_fixture("tiny-v41-a"), conv = dir.str() + "/conv", rnd = dir.str() + "/rnd";
  const test::CliResult c = test::run_cli(dir, "convert --model " + fx + " --out " + conv + " --shard-mib 1 --threads 2");
  ASSERT_EQ(c.rc, 0) << c.err;
  const io::ModelConfig cfg = test::unwrap(io::load_model_config(conv));
  EXPECT_TRUE(cfg.fp8_weights);
  EXPECT_EQ(cfg.fp8_block_n, 32);
  // The fixture's weights lie on the release's grids, so the converted model still meets its transformers gate.
  const test::CliResult g = test::run_cli(dir, "check-reference --model " + conv + " --numerics hf-noqat --reference " +
                                                   fx + "/reference_noqat.safetensors --tolerance 1e-5");
  ASSERT_EQ(g.rc, 0) << g.out << g.err;

  const test::CliResult r = test::run_cli(
      dir, "convert --config " + fx + "/config.json --set n_routed_experts=16 --set 'engram_num_embeddings=[2048,4096]'"
           " --seed 9 --out " + rnd);
  ASSERT_EQ(r.rc, 0) << r.err;
  const io::ModelConfig rc = test::unwrap(io::load_model_config(rnd));
  EXPECT_EQ(rc.n_routed_experts, 16);
  EXPECT_EQ(rc.v41.engram_num_embeddings, (std::vector<int64_t>{2048, 4096}));
  const io::Checkpoint ckpt = test::unwrap(model::open_checkpoint_v41(rnd));
  double disk = 0;
  for (const model::StoredTensorV41& t : test::unwrap(model::resolve_weights_v41(rc, ckpt))) {
    disk += double(t.data->nbytes);
    if (t.scale) disk += double(t.scale->nbytes);
    if (model::is_engram_table(t.spec)) {
      EXPECT_EQ(t.data->dtype, DType::F8_E4M3) << t.spec.name;
    }
  }
  MemoryPlanOptions po;
  po.model_dir = rnd;
  po.gpus = {1};
  po.context = 64;
  MemoryPlan plan;
  std::string err;
  ASSERT_TRUE(plan_memory(po, &plan, &err)) << err;
  EXPECT_DOUBLE_EQ(plan.dense_bytes + plan.expert_bytes, disk);

  const test::CliResult noeq = test::run_cli(dir, "convert --config " + fx + " --set num_hidden_layers --out " + rnd);
  EXPECT_EQ(noeq.rc, 1);
  EXPECT_NE(noeq.err.find("'num_hidden_layers' is not key=value"), std::string::npos) << noeq.err;
  const test::CliResult badcfg = test::run_cli(dir, "convert --config " + fx + " --set hc_mult=0 --out " + rnd);
  EXPECT_EQ(badcfg.rc, 1);
  EXPECT_NE(badcfg.err.find("hc_mult"), std::string::npos) << badcfg.err;
  const test::CliResult both = test::run_cli(dir, "convert --model " + fx + " --config " + fx + " --out " + rnd);
  EXPECT_EQ(both.rc, 2);
  const test::CliResult none = test::run_cli(dir, "convert --model " + dir.str() + "/nope --out " + rnd);
  EXPECT_EQ(none.rc, 1);
  EXPECT_NE(none.err.find("nope"), std::string::npos) << none.err;
}
