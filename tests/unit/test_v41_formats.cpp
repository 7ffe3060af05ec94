// DeepSeek-V4.1's release storage formats end to end: tiny-v41-a converted (losslessly, as its reference.json
// says every value allows) to official names and formats -- FP8 e4m3 with E8M0 32x32 tiles, FP4 e2m1 experts with
// one E8M0 scale per row and 32 inputs, FP8 Engram rows with one scale per 32 channels, BF16, F32 -- loads through
// quantization_config and gives logits identical to the fp32 checkpoint's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtypes.h"
#include "io/safetensors.h"
#include "model/deepseek_v41.h"
#include "model/host_state.h"
#include "test_util.h"

using namespace dsinfer;

namespace {

int pow2_exponent_for(float amax, float qmax) { return amax > 0 ? int(std::ceil(std::log2(double(amax) / double(qmax)))) : 0; }

// [rows, cols] fp32 -> e4m3 codes with one E8M0 scale per (br x bc) tile.
std::pair<io::TensorToWrite, io::TensorToWrite> to_fp8(const std::string& name, const float* w, int64_t rows, int64_t cols,
                                                       int64_t br, int64_t bc) {
  const int64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
  io::TensorToWrite q{name, DType::F8_E4M3, {rows, cols}, std::vector<uint8_t>(size_t(rows * cols))};
  io::TensorToWrite s{name.substr(0, name.size() - 7) + ".scale", DType::F8_E8M0, {sr, sc}, std::vector<uint8_t>(size_t(sr * sc))};
  for (int64_t ti = 0; ti < sr; ++ti)
    for (int64_t tj = 0; tj < sc; ++tj) {
      float amax = 0;
      for (int64_t i = ti * br; i < std::min(rows, (ti + 1) * br); ++i)
        for (int64_t j = tj * bc; j < std::min(cols, (tj + 1) * bc); ++j) amax = std::fmax(amax, std::fabs(w[i * cols + j]));
      const int k = pow2_exponent_for(amax, 448.0f);
      s.bytes[size_t(ti * sc + tj)] = uint8_t(k + 127);
      for (int64_t i = ti * br; i < std::min(rows, (ti + 1) * br); ++i)
        for (int64_t j = tj * bc; j < std::min(cols, (tj + 1) * bc); ++j) {
          const uint8_t c = f32_to_e4m3(std::ldexp(w[i * cols + j], -k));
          EXPECT_EQ(std::ldexp(e4m3_to_f32(c), k), w[i * cols + j]) << name << " is not lossless in FP8";
          q.bytes[size_t(i * cols + j)] = c;
        }
    }
  return {q, s};
}

// [rows, cols] fp32 -> packed e2m1 (element 2c in the low nibble) with one E8M0 scale per row and 32 inputs.
std::pair<io::TensorToWrite, io::TensorToWrite> to_fp4(const std::string& name, const float* w, int64_t rows, int64_t cols) {
  io::TensorToWrite q{name, DType::I8, {rows, cols / 2}, std::vector<uint8_t>(size_t(rows * cols / 2), 0)};
  io::TensorToWrite s{name.substr(0, name.size() - 7) + ".scale", DType::F8_E8M0, {rows, cols / 32},
                      std::vector<uint8_t>(size_t(rows * cols / 32))};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t g = 0; g < cols / 32; ++g) {
      float amax = 0;
      for (int64_t j = g * 32; j < g * 32 + 32; ++j) amax = std::fmax(amax, std::fabs(w[i * cols + j]));
      const int k = pow2_exponent_for(amax, 6.0f);
      s.bytes[size_t(i * (cols / 32) + g)] = uint8_t(k + 127);
      for (int64_t j = g * 32; j < g * 32 + 32; ++j) {
        const uint8_t c = f32_to_e2m1(std::ldexp(w[i * cols + j], -k));
        EXPECT_EQ(std::ldexp(e2m1_to_f32(c), k), w[i * cols + j]) << name << " is not lossless in FP4";
        q.bytes[size_t(i * cols / 2 + j / 2)] |= uint8_t(j % 2 ? c << 4 : c);
      }
    }
  return {q, s};
}

std::string official_name(std::string n) {
  if (n.rfind("model.", 0) == 0) n = n.substr(6);
  return n == "lm_head.weight" ? "head.weight" : n;
}

std::vector<float> last_logits(model::DeepseekV41Cpu& m, const std::vector<int32_t>& toks) {
  auto st = model::HostState::create(m.config(), 1, int64_t(toks.size()));
  EXPECT_TRUE(st.is_ok());
  model::SoloSequence seq(**st);
  auto c = seq.next_chunk(toks, true);
  std::vector<float> out;
  EXPECT_TRUE(m.forward((*st)->pool(), {&*c, 1}, out).is_ok());
  return out;
}

}  // namespace

TEST(V41Formats, ReleaseFormatCheckpointLoadsToTheSameModel) {
  const std::string src = test::own_fixture("tiny-v41-a");
  test::ScratchDir dir("v41_formats");
  const nlohmann::json ref = nlohmann::json::parse(std::ifstream(src + "/reference.json"));
  const auto& formats = ref["weights"]["storage_format"];
  auto ckpt = io::SafetensorsFile::open(src + "/model.safetensors");
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().message();
  std::vector<io::TensorToWrite> out;
  std::map<std::string, int> count;
  for (const auto& [name, t] : ckpt->tensors()) {
    const std::string fmt = name.ends_with("engram.embed.scale") ? "skip" : formats.value(name, std::string("fp32"));
    const float* w = reinterpret_cast<const float*>(t.data);
    const int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1;
    const std::string on = official_name(name);
    ++count[fmt];
    if (fmt == "skip") continue;  // engram.embed.scale: rewritten with its table
    if (fmt == "fp8_e4m3_e8m0_32x32" || fmt == "fp8_e4m3_e8m0_row32" || fmt == "fp4_e2m1_e8m0_row32") {
      auto [q, s] = fmt == "fp4_e2m1_e8m0_row32" ? to_fp4(on, w, rows, cols)
                                                 : to_fp8(on, w, rows, cols, fmt == "fp8_e4m3_e8m0_32x32" ? 32 : 1, 32);
      out.push_back(std::move(q));
      out.push_back(std::move(s));
    } else if (fmt == "bf16") {
      io::TensorToWrite b{on, DType::BF16, t.shape, std::vector<uint8_t>(size_t(t.numel()) * 2)};
      for (int64_t i = 0; i < t.numel(); ++i) {
        const uint16_t v = f32_to_bf16(w[i]);
        EXPECT_EQ(bf16_to_f32(v), w[i]) << name;
        std::memcpy(b.bytes.data() + 2 * i, &v, 2);
      }
      out.push_back(std::move(b));
    } else {
      ASSERT_EQ(fmt, "fp32") << name;
      out.push_back(io::make_f32_tensor(on, t.shape, std::vector<float>(w, w + t.numel())));
    }
  }
  EXPECT_GT(count["fp8_e4m3_e8m0_32x32"], 0);
  EXPECT_GT(count["fp4_e2m1_e8m0_row32"], 0);
  EXPECT_EQ(count["fp8_e4m3_e8m0_row32"], 2);
  ASSERT_TRUE(io::write_safetensors(dir.str() + "/model.safetensors", out).is_ok());
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}, {"scale_fmt", "ue8m0"},
                                {"expert_dtype", "fp4"}};
  std::ofstream(dir.str() + "/config.json") << cfg.dump(2);
  std::filesystem::copy_file(src + "/tokenizer.json", dir.str() + "/tokenizer.json");

  auto fp32 = model::DeepseekV41Cpu::load(src, model::Numerics::hf());
  auto rel = model::DeepseekV41Cpu::load(dir.str(), model::Numerics::hf());
  ASSERT_TRUE(fp32.is_ok()) << fp32.status().message();
  ASSERT_TRUE(rel.is_ok()) << rel.status().message();
  EXPECT_TRUE((*rel)->config().fp8_weights);
  EXPECT_FALSE((*rel)->weights().fp32_storage);
  const std::vector<int32_t> toks = {5, 77, 301, 2, 2, 9, 480, 13, 13, 250, 17, 64, 99, 3, 411, 8, 120, 7, 300};
  EXPECT_EQ(last_logits(**rel, toks), last_logits(**fp32, toks));
}
