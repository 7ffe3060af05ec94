// Device-side weight addressing and dequantization shared by the skinny and tiled GEMM kernels (CUDA only).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/small_float.h"
#include "ops/gemm/gemm_common.h"
#include "ops/gemm/gemm_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace gd = ::dsinfer::ops::gemm_detail;
namespace sf = ::dsinfer::small_float;

// Rows of group g covered by this launch.
__device__ __forceinline__ void group_rows(const GemmArgs& a, int64_t g, int64_t& begin, int64_t& count) {
  if (a.row_off) {
    begin = a.row_off[g];
    count = int64_t(a.row_off[g + 1]) - begin;
  } else {
    begin = 0;
    count = a.M;
  }
}
__device__ __forceinline__ const float* x_row(const GemmArgs& a, int64_t g, int64_t p) {
  return a.x + g * a.x_gstride + (a.x_rows ? int64_t(a.x_rows[p]) : p) * a.ldx;
}
__device__ __forceinline__ float* y_row(const GemmArgs& a, int64_t g, int64_t p) {
  return a.y + g * a.y_gstride + p * a.ldy;
}

// Weight base pointers and the row offset of group g (weight row of output column n is row0 + n).
struct WPtr {
  const uint8_t* data;
  const uint8_t* scale;
  int64_t row0;
};
__device__ __forceinline__ WPtr group_weight(const GemmArgs& a, int64_t g) {
  if (a.wdata_arr)
    return {static_cast<const uint8_t*>(a.wdata_arr[g]),
            a.wscale_arr ? static_cast<const uint8_t*>(a.wscale_arr[g]) : nullptr, 0};
  return {a.wdata, a.wscale, g * a.N};
}

__device__ __forceinline__ float bits_f(uint32_t b) { return __uint_as_float(b); }

// Scale of weight element (row n, column k) (FP8 / FP4 only).
template <WeightFormat F>
__device__ __forceinline__ int64_t scale_index(const GemmArgs& a, int64_t n, int64_t k) {
  if constexpr (F == WeightFormat::FP8_BLOCK) return (n / a.block_n) * a.scale_cols + k / a.block_k;
  else return n * a.scale_cols + k / 32;
}
__device__ __forceinline__ uint32_t load_scale_raw(const GemmArgs& a, const uint8_t* scale, int64_t idx) {
  return a.scale_e8m0 ? uint32_t(__ldg(scale + idx)) : __float_as_uint(__ldg(reinterpret_cast<const float*>(scale) + idx));
}
__device__ __forceinline__ float scale_value(const GemmArgs& a, uint32_t raw) {
  return a.scale_e8m0 ? bits_f(sf::e8m0_f32_bits(raw)) : bits_f(raw);
}

// One weight element, any alignment (the general path; also covers K tails).
template <WeightFormat F>
__device__ __forceinline__ float load_w_scalar(const GemmArgs& a, const WPtr& w, int64_t n, int64_t k) {
  if constexpr (F == WeightFormat::F32) {
    return __ldg(reinterpret_cast<const float*>(w.data) + n * a.K + k);
  } else if constexpr (F == WeightFormat::BF16) {
    return bits_f(sf::bf16_f32_bits(__ldg(reinterpret_cast<const uint16_t*>(w.data) + n * a.K + k)));
  } else if constexpr (F == WeightFormat::FP8_BLOCK) {
    const float v = bits_f(sf::e4m3_f32_bits(__ldg(w.data + n * a.K + k)));
    return v * scale_value(a, load_scale_raw(a, w.scale, scale_index<F>(a, n, k)));
  } else {
    const uint32_t byte = __ldg(w.data + n * (a.K / 2) + k / 2);
    const float v = bits_f(sf::e2m1_f32_bits((k & 1) ? (byte >> 4) : (byte & 0xFu)));
    return v * scale_value(a, load_scale_raw(a, w.scale, scale_index<F>(a, n, k)));
  }
}

// Two e4m3 values (low byte first) to floats via the hardware f16x2 conversion (exact).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFFu), __NV_E4M3);
  return __half22float2(__half2(h));
}

}  // namespace dsinfer::ops::cuda::detail
