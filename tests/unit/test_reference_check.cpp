// The diagnostics API (include/dsinfer/diagnostics.h): check_reference uses the numerics that produced the
// reference by default (issue 18 item 8: the shipped model failed its own check with the documented defaults),
// an explicit numerics wins, and run_bench / check_reference report bad input as errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "check/reference_numerics.h"
#include "dsinfer/diagnostics.h"
#include "io/safetensors.h"
#include "perf/bench.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

// A one-tensor safetensors file with the given __metadata__ (none when empty).
void write_reference(const std::string& path, const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = {{"prompt.0.input_ids", {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {0, 8}}}}};
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  const int64_t id = 5;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(text.data(), std::streamsize(text.size()));
  f.write(reinterpret_cast<const char*>(&id), 8);
  test::require(bool(f), "cannot write " + path);
}

Result<check::ReferenceNumerics> numerics_of(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  if (!f) return f.status();
  return check::reference_numerics(*f);
}

std::string shipped_model() { return test::source_dir() + "/models/dsv4-small"; }

}  // namespace

// The regression of issue 18 item 8: `dsinfer check-reference --model models/dsv4-small` with no flags.
TEST(CheckReference, ShippedModelPassesWithDefaults) {
  CheckReferenceOptions o;
  o.model_dir = shipped_model();
  CheckReferenceReport rep;
  std::string error;
  ASSERT_TRUE(check_reference(o, &rep, &error)) << error;
  EXPECT_EQ(rep.numerics, "hf");
  EXPECT_EQ(rep.numerics_source, "reference metadata");
  EXPECT_EQ(rep.reference_path, shipped_model() + "/reference.safetensors");
  ASSERT_EQ(rep.prompts.size(), 5u);
  for (const PromptCheckResult& p : rep.prompts) {
    EXPECT_TRUE(p.ok) << "len " << p.len << " rel_err " << p.rel_err;
    EXPECT_EQ(p.greedy_matched, p.greedy_total);
    EXPECT_GT(p.greedy_total, 0);
    EXPECT_LE(p.rel_err, rep.tolerance);
  }
  EXPECT_TRUE(rep.ok);
}

// An explicit numerics wins over the reference's; the official profile does not reproduce transformers'
// logits on this model (which is why the old default failed).
TEST(CheckReference, ExplicitNumericsWins) {
  CheckReferenceOptions o;
  o.model_dir = shipped_model();
  o.numerics = "official";
  CheckReferenceReport rep;
  std::string error;
  ASSERT_TRUE(check_reference(o, &rep, &error)) << error;
  EXPECT_EQ(rep.numerics, "official");
  EXPECT_EQ(rep.numerics_source, "given");
  EXPECT_NE(rep.runner_name.find("official"), std::string::npos) << rep.runner_name;
  EXPECT_FALSE(rep.ok);
}

TEST(CheckReference, BadInputIsAnError) {
  CheckReferenceReport rep;
  std::string error;
  CheckReferenceOptions o;
  o.model_dir = test::own_fixture("tiny-v4-a");
  o.numerics = "bf17";
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("'bf17'"), std::string::npos) << error;
  o.numerics.clear();
  o.reference_path = test::source_dir() + "/no/such/reference.safetensors";
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("no/such/reference.safetensors"), std::string::npos) << error;
  o.reference_path.clear();
  o.backend = "tpu";
  EXPECT_FALSE(check_reference(o, &rep, &error));
  EXPECT_NE(error.find("'tpu'"), std::string::npos) << error;
}

// Every reference we ship says which numerics produced it; the shared fixtures say it in reference.json.
TEST(ReferenceNumerics, ShippedAndSharedReferences) {
  for (const std::string& dir :
       {shipped_model(), test::own_fixture("tiny-v4-c"), test::own_fixture("tiny-v4-official")}) {
    auto n = numerics_of(dir + "/reference.safetensors");
    ASSERT_TRUE(n.is_ok()) << n.status().message();
    EXPECT_EQ(n->numerics.name, "hf") << dir;
    EXPECT_EQ(n->source, "reference metadata") << dir;
  }
  for (const char* name : {"tiny-v4-a", "tiny-v4-b"}) {
    auto n = numerics_of(test::own_fixture(name) + "/reference.safetensors");
    ASSERT_TRUE(n.is_ok()) << n.status().message();
    EXPECT_EQ(n->numerics.name, "hf") << name;
    EXPECT_EQ(n->source, "reference.json") << name;
  }
  auto n = numerics_of(test::own_fixture("tiny-v4-a-bf16") + "/reference.safetensors");  // says nothing
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->numerics.name, "hf");
  EXPECT_EQ(n->source, "assumed (transformers)");
}

TEST(ReferenceNumerics, MetadataThenReferenceJsonThenAssumed) {
  test::ScratchDir d("refnum");
  const std::string ref = d.str() + "/reference.safetensors", js = d.str() + "/reference.json";
  write_reference(ref, {{"numerics", "official"}});
  std::ofstream(js) << R"({"numerics": "hf"})";  // the file's own metadata comes first
  auto n = numerics_of(ref);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->numerics.name, "official");
  EXPECT_TRUE(n->numerics.kv_fp8_sim);
  EXPECT_EQ(n->source, "reference metadata");

  write_reference(ref, {{"format", "pt"}});
  std::ofstream(js) << R"({"numerics": "official"})";
  n = numerics_of(ref);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->numerics.name, "official");
  EXPECT_EQ(n->source, "reference.json");

  std::ofstream(js) << R"({"name": "x", "prompts": [{"len": 3, "hf_cached_decode_agrees": true}]})";
  n = numerics_of(ref);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->numerics.name, "hf");
  EXPECT_FALSE(n->numerics.kv_fp8_sim);
  EXPECT_EQ(n->source, "reference.json");

  std::filesystem::remove(js);
  n = numerics_of(ref);
  ASSERT_TRUE(n.is_ok()) << n.status().message();
  EXPECT_EQ(n->numerics.name, "hf");
  EXPECT_EQ(n->source, "assumed (transformers)");
}

TEST(ReferenceNumerics, BadValuesNameFileAndValue) {
  test::ScratchDir d("refnumbad");
  const std::string ref = d.str() + "/reference.safetensors", js = d.str() + "/reference.json";
  write_reference(ref, {{"numerics", "fp8"}});
  auto n = numerics_of(ref);
  ASSERT_FALSE(n.is_ok());
  EXPECT_NE(n.status().message().find(ref), std::string::npos) << n.status().message();
  EXPECT_NE(n.status().message().find("'fp8'"), std::string::npos) << n.status().message();

  write_reference(ref, {});
  std::ofstream(js) << R"({"numerics": 3})";
  n = numerics_of(ref);
  ASSERT_FALSE(n.is_ok());
  EXPECT_NE(n.status().message().find("reference.json"), std::string::npos) << n.status().message();
  EXPECT_NE(n.status().message().find("number"), std::string::npos) << n.status().message();

  std::ofstream(js) << "{not json";
  n = numerics_of(ref);
  ASSERT_FALSE(n.is_ok());
  EXPECT_NE(n.status().message().find("reference.json"), std::string::npos) << n.status().message();
}

// The bench plan: `seqs` sequences of `new_tokens` after `context`, each with its own slot and consecutive blocks.
TEST(Bench, PlanLayout) {
  std::vector<std::vector<cache::BlockId>> tables;
  const auto p = perf::make_bench_plan(3, 2, 10, 4, 100, tables);
  ASSERT_EQ(p.num_seqs(), 3);
  EXPECT_EQ(p.num_tokens(), 6);
  EXPECT_EQ(p.num_logits(), 3);
  EXPECT_EQ(p.cu_seqlens, (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(p.logits_token_index, (std::vector<int32_t>{1, 3, 5}));
  for (int s = 0; s < 3; ++s) {
    const auto& sp = p.seqs[size_t(s)];
    EXPECT_EQ(sp.slot, s);
    EXPECT_EQ(sp.start_pos, 10);
    EXPECT_EQ(sp.num_new_tokens, 2);
    EXPECT_TRUE(sp.is_prefill);
    EXPECT_EQ(sp.logits_row, s);
    ASSERT_EQ(sp.block_table.size(), 4u);
    for (int b = 0; b < 4; ++b) EXPECT_EQ(sp.block_table[size_t(b)], s * 4 + b);
    EXPECT_EQ(p.positions[size_t(2 * s)], 10);
    EXPECT_EQ(p.positions[size_t(2 * s + 1)], 11);
  }
  for (int32_t t : p.token_ids) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 100);
  }
}

// The CPU backend has no per-op timing or random state: run_bench says so instead of timing nothing.
TEST(Bench, CpuBackendReportsUnsupported) {
  BenchOptions o;
  o.model_dir = test::own_fixture("tiny-v4-a");
  o.backend = "cpu";
  o.load_format = "auto";
  o.batches = {1};
  o.context = 16;
  o.prefill = 8;
  BenchReport rep;
  std::string error;
  EXPECT_FALSE(run_bench(o, &rep, &error));
  EXPECT_TRUE(error.find("timing") != std::string::npos || error.find("randomize") != std::string::npos) << error;
  EXPECT_TRUE(rep.cases.empty());

  o.iters = 0;
  EXPECT_FALSE(run_bench(o, &rep, &error));
  EXPECT_NE(error.find("iterations"), std::string::npos) << error;
  o.iters = 1;
  o.load_format = "lazy";
  EXPECT_FALSE(run_bench(o, &rep, &error));
  EXPECT_NE(error.find("'lazy'"), std::string::npos) << error;
}
