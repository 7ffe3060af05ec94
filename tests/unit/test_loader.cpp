// Checkpoint loading: sharded == single file, and every kind of broken checkpoint gives an error that names
// the tensor (or file) and expected vs found, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/deepseek_v4.h"
#include "model/host_state.h"
#include "test_util.h"

using namespace dsinfer;
namespace fs = std::filesystem;

namespace {

// All tensors of a fixture as writable copies.
std::vector<io::TensorToWrite> fixture_tensors(const std::string& dir) {
  auto ck = test::unwrap(io::Checkpoint::open(dir + "/model.safetensors"));
  std::vector<io::TensorToWrite> out;
  for (const auto& [n, t] : ck.tensors())
    out.push_back({n, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  return out;
}

void copy_config(const std::string& from, const test::ScratchDir& to) {
  fs::copy_file(from + "/config.json", to.path / "config.json");
}

Status load_status(const std::string& dir) {
  auto m = model::DeepseekV4Cpu::load(dir, model::Numerics::hf());
  return m.status();
}

void expect_error(const std::string& dir, const std::vector<std::string>& needles) {
  Status s = load_status(dir);
  ASSERT_FALSE(s.is_ok()) << "expected a load error";
  for (const auto& n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << "missing '" << n << "' in: " << s.message();
}

const std::string kFixture = test::own_fixture("tiny-v4-a");

}  // namespace

TEST(Loader, ShardedCheckpointEqualsSingleFile) {
  test::ScratchDir d("sharded");
  copy_config(kFixture, d);
  auto ts = fixture_tensors(kFixture);
  std::vector<io::TensorToWrite> a, b;
  nlohmann::json wm;
  for (size_t i = 0; i < ts.size(); ++i) {
    const bool first = i % 2 == 0;
    wm[ts[i].name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    (first ? a : b).push_back(ts[i]);
  }
  ASSERT_TRUE(io::write_safetensors((d.path / "model-00001-of-00002.safetensors").string(), a).is_ok());
  ASSERT_TRUE(io::write_safetensors((d.path / "model-00002-of-00002.safetensors").string(), b).is_ok());
  std::ofstream(d.path / "model.safetensors.index.json") << nlohmann::json{{"metadata", {}}, {"weight_map", wm}}.dump();

  auto sharded = model::DeepseekV4Cpu::load(d.str(), model::Numerics::hf());
  auto single = model::DeepseekV4Cpu::load(kFixture, model::Numerics::hf());
  ASSERT_TRUE(sharded.is_ok()) << sharded.status().message();
  ASSERT_TRUE(single.is_ok());
  std::vector<int32_t> toks = {3, 14, 15, 92, 65, 35, 89, 79, 32};
  std::vector<float> la, lb;
  auto state = model::HostState::create((*single)->config(), 2, 16);
  ASSERT_TRUE(state.is_ok());
  model::SoloSequence sa(**state), sb(**state);
  ASSERT_TRUE(sa.step(**sharded, toks, true, la).is_ok());
  ASSERT_TRUE(sb.step(**single, toks, true, lb).is_ok());
  EXPECT_EQ(la, lb);
}

TEST(Loader, IndexNamingAMissingShardTensorIsAnError) {
  test::ScratchDir d("badindex");
  copy_config(kFixture, d);
  ASSERT_TRUE(io::write_safetensors((d.path / "a.safetensors").string(), fixture_tensors(kFixture)).is_ok());
  nlohmann::json wm = {{"head.weight", "a.safetensors"}, {"not.a.tensor", "a.safetensors"}};
  std::ofstream(d.path / "model.safetensors.index.json") << nlohmann::json{{"weight_map", wm}}.dump();
  expect_error(d.str(), {"not.a.tensor", "weight_map"});
}

TEST(Loader, MissingTensor) {
  test::ScratchDir d("missing");
  copy_config(kFixture, d);
  auto ts = fixture_tensors(kFixture);
  std::erase_if(ts, [](const auto& t) { return t.name == "model.layers.2.attn.compressor.wkv.weight"; });
  ASSERT_TRUE(io::write_safetensors((d.path / "model.safetensors").string(), ts).is_ok());
  expect_error(d.str(), {"missing tensor 'layers.2.attn.compressor.wkv.weight'"});
}

TEST(Loader, UnexpectedTensor) {
  test::ScratchDir d("extra");
  copy_config(kFixture, d);
  auto ts = fixture_tensors(kFixture);
  ts.push_back(io::make_f32_tensor("model.layers.0.attn.compressor.wkv.weight", {128, 64}, std::vector<float>(128 * 64)));
  ASSERT_TRUE(io::write_safetensors((d.path / "model.safetensors").string(), ts).is_ok());
  expect_error(d.str(), {"unexpected tensor 'model.layers.0.attn.compressor.wkv.weight'"});
}

TEST(Loader, WrongShapeAndWrongDtype) {
  test::ScratchDir d("shape");
  copy_config(kFixture, d);
  auto ts = fixture_tensors(kFixture);
  for (auto& t : ts) {
    if (t.name == "model.layers.1.attn.wq_b.weight") t.shape = {128, 64};  // same byte count, wrong shape
    if (t.name == "model.layers.0.ffn.gate.tid2eid") {
      t.dtype = DType::F32;  // a table stored as floats
      t.shape = {512, 4};
    }
  }
  ASSERT_TRUE(io::write_safetensors((d.path / "model.safetensors").string(), ts).is_ok());
  expect_error(d.str(), {"layers.1.attn.wq_b.weight", "expected shape [256, 32], found F32 [128, 64]",
                         "layers.0.ffn.gate.tid2eid", "expected I64 or I32 [512, 2]", "2 problems"});
}

TEST(Loader, HashTableEntryOutOfRange) {
  test::ScratchDir d("tid2eid");
  copy_config(kFixture, d);
  auto ts = fixture_tensors(kFixture);
  for (auto& t : ts)
    if (t.name == "model.layers.1.ffn.gate.tid2eid") {
      int64_t v = 8;  // 8 experts: ids 0..7
      std::memcpy(t.bytes.data() + 8 * 5, &v, 8);
    }
  ASSERT_TRUE(io::write_safetensors((d.path / "model.safetensors").string(), ts).is_ok());
  expect_error(d.str(), {"layers.1.ffn.gate.tid2eid", "entry 5 = 8", "[0, 8)"});
}

TEST(Loader, Fp8WeightWithoutScale) {
  test::ScratchDir d("noscale");
  copy_config(kFixture, d);
  auto ts = fixture_tensors(kFixture);
  for (auto& t : ts)
    if (t.name == "model.layers.0.attn.wkv.weight") {
      t.dtype = DType::F8_E4M3;
      t.bytes.resize(64 * 64);
    }
  ASSERT_TRUE(io::write_safetensors((d.path / "model.safetensors").string(), ts).is_ok());
  expect_error(d.str(), {"missing tensor 'layers.0.attn.wkv.scale'"});
}

TEST(Loader, TruncatedFile) {
  test::ScratchDir d("trunc");
  copy_config(kFixture, d);
  fs::copy_file(kFixture + "/model.safetensors", d.path / "model.safetensors");
  fs::resize_file(d.path / "model.safetensors", fs::file_size(d.path / "model.safetensors") - 1000);
  expect_error(d.str(), {"model.safetensors", "truncated file"});
  fs::resize_file(d.path / "model.safetensors", 5);
  expect_error(d.str(), {"truncated file (5 bytes"});
}

TEST(Loader, CorruptHeader) {
  test::ScratchDir d("header");
  copy_config(kFixture, d);
  const std::string bad[] = {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}",
                             "{\"a\": {\"dtype\": \"Q9\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                             "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}",
                             "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
                             "[1, 2]", "{not json"};
  const std::string want[] = {"needs 8 bytes", "unsupported dtype 'Q9'", "begin 4 > end 0", "negative",
                              "not a JSON object", "not valid JSON"};
  for (size_t i = 0; i < 6; ++i) {
    std::ofstream f(d.path / "model.safetensors", std::ios::binary | std::ios::trunc);
    uint64_t n = bad[i].size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << bad[i] << std::string(8, '\0');
    f.close();
    expect_error(d.str(), {want[i]});
  }
}

TEST(Loader, OverlappingTensorData) {
  test::ScratchDir d("overlap");
  copy_config(kFixture, d);
  std::string h = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  std::ofstream f(d.path / "model.safetensors", std::ios::binary);
  uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << h << std::string(12, '\0');
  f.close();
  expect_error(d.str(), {"overlap"});
}

TEST(Loader, NotAModelDirectory) {
  test::ScratchDir d("empty");
  expect_error(d.str(), {"config.json", "cannot open"});
  copy_config(kFixture, d);
  expect_error(d.str(), {"no model.safetensors"});
  expect_error(d.str() + "/nope", {"config.json"});
}
