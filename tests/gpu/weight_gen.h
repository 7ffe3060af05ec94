// Random weights in storage format for the GEMM / MoE parity tests, with their fp32 dequantization through the
// io::dequant_* references (the specification of each format). Deterministic per seed.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <source_location>
#include <vector>

#include "core/dtypes.h"
#include "io/quant.h"
#include "ops/gemm/gemm_cuda.h"
#include "test_util.h"

namespace dsinfer::test {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  float sym() { return 2.0f * uniform() - 1.0f; }                          // [-1, 1)
  float normal() {
    const float u1 = std::max(uniform(), 1e-7f), u2 = uniform();
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
  }
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * r.sym();
  return v;
}

struct HostWeight {
  ops::cuda::WeightFormat fmt;
  int64_t rows = 0, cols = 0;
  bool e8m0 = true;
  int64_t bn = 128, bk = 128;
  std::vector<uint8_t> data, scale;
  std::vector<float> deq;  // [rows, cols] fp32 dequantization (empty unless requested)
};

inline HostWeight make_host_weight(ops::cuda::WeightFormat fmt, int64_t rows, int64_t cols, uint64_t seed,
                                   bool e8m0 = true, int64_t bn = 128, int64_t bk = 128, bool want_deq = true) {
  using ops::cuda::WeightFormat;
  HostWeight w{fmt, rows, cols, e8m0, bn, bk, {}, {}, {}};
  Rng r(seed);
  w.data.resize(ops::cuda::weight_data_bytes(fmt, rows, cols));
  w.scale.resize(ops::cuda::weight_scale_bytes(fmt, rows, cols, e8m0, bn, bk));
  const size_t n = size_t(rows) * size_t(cols);
  if (fmt == WeightFormat::F32) {
    for (size_t i = 0; i < n; ++i) {
      const float f = r.normal() * 0.05f;
      std::memcpy(w.data.data() + 4 * i, &f, 4);
    }
  } else if (fmt == WeightFormat::BF16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t b = f32_to_bf16(r.normal() * 0.05f);
      std::memcpy(w.data.data() + 2 * i, &b, 2);
    }
  } else if (fmt == WeightFormat::FP8_BLOCK) {
    for (size_t i = 0; i < n; ++i) w.data[i] = f32_to_e4m3(r.normal() * 64.0f);  // spans subnormals .. ~300
  } else {
    for (size_t i = 0; i < w.data.size(); i += 8) {  // every e2m1 code is a valid value
      const uint64_t v = r.next();
      std::memcpy(w.data.data() + i, &v, std::min<size_t>(8, w.data.size() - i));
    }
  }
  const size_t ns = w.scale.size() / (e8m0 ? 1 : 4);
  for (size_t i = 0; i < ns; ++i) {
    if (e8m0) {
      w.scale[i] = uint8_t(127 - 10 + int(r.next() % 6));  // 2^-10 .. 2^-5
    } else {
      const float f = 0.001f + 0.01f * r.uniform();
      std::memcpy(w.scale.data() + 4 * i, &f, 4);
    }
  }
  if (want_deq) {
    w.deq.resize(n);
    const DType sd = e8m0 ? DType::F8_E8M0 : DType::F32;
    if (fmt == WeightFormat::F32) io::convert_to_f32(DType::F32, w.data.data(), int64_t(n), w.deq.data());
    else if (fmt == WeightFormat::BF16) io::convert_to_f32(DType::BF16, w.data.data(), int64_t(n), w.deq.data());
    else if (fmt == WeightFormat::FP8_BLOCK)
      io::dequant_fp8_block(w.data.data(), rows, cols, w.scale.data(), sd, bn, bk, w.deq.data());
    else io::dequant_fp4_e2m1(w.data.data(), rows, cols, w.scale.data(), sd, 32, w.deq.data());
  }
  return w;
}

inline ops::cuda::OwnedDeviceWeight upload(const HostWeight& h,
                                           std::source_location at = std::source_location::current()) {
  // A failed upload fails (and ends) the test with the reason; the caller never sees an empty weight.
  return unwrap(ops::cuda::upload_weight(h.fmt, h.rows, h.cols, h.data.data(),
                                         h.scale.empty() ? nullptr : h.scale.data(), h.e8m0, h.bn, h.bk),
                at);
}

}  // namespace dsinfer::test
