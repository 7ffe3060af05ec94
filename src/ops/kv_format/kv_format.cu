// CUDA encoders of the KV storage formats (see kv_format_cuda.h). Main KV: a block of kKvRowWarps warps per row, warp
// t < 7 encodes 64-channel tile t (lane l channels 64t + 2l, +1: its two codes one 16-bit store, the tile one 64-byte
// run; lane 0 the tile's scale byte), warp 7 the RoPE channels 448 + 2l, +1 and the pad byte. One warp walked all
// seven tiles until session 34: a decode step's one row took ~11 us (ncu, H100) in that warp's ~2,500-instruction
// chain. Indexer: one warp per row, 4 a block, lane l owns channels 4l .. 4l+3.
#include "cuda/ops_device.cuh"
#include "cuda/pdl.cuh"
#include "ops/kv_format/kv_format.h"
#include "ops/kv_format/kv_format_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kWarps = 4;

// Warp-wide amax of the lanes' values, +inf when any lane holds a value that is not finite.
__device__ __forceinline__ float warp_amax(float a, bool finite) {
  const float m = dev::warp_max(a);
  return __all_sync(dev::kFull, finite) ? m : INFINITY;
}

constexpr int kKvRowWarps = kKvTiles + 1;  // the tiles, then the RoPE channels

// Warp `part` of the block encoding the main-KV row xr into cache row `row` (in range): tile `part` (< kKvTiles) and
// its scale byte, or the RoPE channels and the scale slot's pad byte.
__device__ __forceinline__ void encode_kv_part(const float* xr, uint8_t* cache, int64_t row, const KvPages& g,
                                               int part, int lane) {
  uint8_t* data = cache + kv_data_offset(g, row);
  uint8_t* scales = cache + kv_scale_offset(g, row);
  if (part < kKvTiles) {
    const float v0 = xr[part * kKvTile + 2 * lane], v1 = xr[part * kKvTile + 2 * lane + 1];
    const bool fin = isfinite(v0) && isfinite(v1);
    const uint8_t sb = kv_tile_scale_byte(warp_amax(fmaxf(fabsf(v0), fabsf(v1)), fin));
    const int k = int(sb) - 127;
    const uint32_t c0 = sb == 0xFF ? 0x7Fu : kv_encode_e4m3(v0, k), c1 = sb == 0xFF ? 0x7Fu : kv_encode_e4m3(v1, k);
    *reinterpret_cast<uint16_t*>(data + part * kKvTile + 2 * lane) = uint16_t(c0 | (c1 << 8));
    if (lane == 0) scales[part] = sb;
    return;
  }
  const uint32_t r0 = small_float::f32_to_bf16_bits(xr[kKvNope + 2 * lane]);
  const uint32_t r1 = small_float::f32_to_bf16_bits(xr[kKvNope + 2 * lane + 1]);
  *reinterpret_cast<uint32_t*>(data + kKvNope + 4 * lane) = r0 | (r1 << 16);
  if (lane < kKvScaleBytes - kKvTiles) scales[kKvTiles + lane] = 0;
}

// Block i encodes row i of x into cache row dst[i] (or i).
__global__ void __launch_bounds__(kKvRowWarps * 32) kv_encode_kernel(const float* x, int n, int64_t ld,
                                                                      const int32_t* dst, uint8_t* cache,
                                                                      int64_t cache_rows, KvPages g) {
  dsinfer::cuda::pdl_wait_then_release();
  const int i = int(blockIdx.x);
  if (i >= n) return;
  const int64_t row = dst ? dst[i] : i;
  if (row < 0 || row >= cache_rows) return;
  encode_kv_part(x + int64_t(i) * ld, cache, row, g, int(threadIdx.x >> 5), int(threadIdx.x & 31));
}

// Token t's row into its slot's ring, when t is the last token of its chunk at that ring row: the rule of the fp32
// ring_write and of fp8_ring_rows (a later token at pos + k * ring_rows overwrites it), then kv_encode's bytes.
// Block t: token t. The row comes from the step's tables (positions, sequences, slots: step inputs, cuda/pdl.cuh),
// looked up before the PDL wait: their chain of dependent loads overlaps the previous kernel.
__global__ void __launch_bounds__(kKvRowWarps * 32) kv_encode_ring_kernel(const float* x, int64_t ld, KvRingStep st,
                                                                           int64_t ring_rows, uint8_t* cache,
                                                                           int64_t cache_rows, KvPages g) {
  const int64_t t = blockIdx.x;
  int64_t row = -1;
  if (t < st.T) {
    const int64_t pos = st.pos[t];
    const int32_t s = st.seq_of_token[t];
    const int64_t end = st.start_pos[s] + (st.cu_seqlens[s + 1] - st.cu_seqlens[s]);
    if (pos >= end - ring_rows) row = int64_t(st.slot[s]) * ring_rows + pos % ring_rows;
  }
  dsinfer::cuda::pdl_wait_then_release();
  if (row < 0 || row >= cache_rows) return;
  encode_kv_part(x + t * ld, cache, row, g, int(threadIdx.x >> 5), int(threadIdx.x & 31));
}

__global__ void idx_encode_kernel(const float* x, int n, int64_t ld, const int32_t* dst, uint8_t* cache,
                                  int64_t cache_rows, KvPages g) {
  dsinfer::cuda::pdl_wait_then_release();
  const int lane = threadIdx.x & 31;
  const int i = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (i >= n) return;
  const int64_t row = dst ? dst[i] : i;
  if (row < 0 || row >= cache_rows) return;
  const float* xr = x + int64_t(i) * ld + 4 * lane;
  float v[4];
  bool fin = true;
  float a = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[j] = xr[j];
    fin = fin && isfinite(v[j]);
    a = fmaxf(a, fabsf(v[j]));
  }
  const float amax = warp_amax(a, fin);
  uint32_t codes = 0x7F7F7F7Fu;
  float scale = small_float::from_bits(0x7FC00000u);  // the quiet NaN, the same bits on host and device
  if (amax <= 3.4028235e38f) {
    const int k = amax > 0.0f ? kv_pow2_exponent(amax, 448.0f) : 0;
    scale = ldexpf(1.0f, k);
    codes = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) codes |= uint32_t(kv_encode_e4m3(v[j], k)) << (8 * j);
  }
  *reinterpret_cast<uint32_t*>(cache + idx_code_offset(g, row) + 4 * lane) = codes;
  if (lane == 0) *reinterpret_cast<float*>(cache + idx_scale_offset(g, row)) = scale;
}
// Row `row` of random bytes made a valid row (see kv_sanitize): NaN codes -> 0x7E, RoPE bf16 exponents into
// [2^-3, 2^-2), every tile scale 2^-8 (indexer: the fp32 row scale 2^-8).
__global__ void kv_sanitize_kernel(uint8_t* cache, int64_t rows, KvPages g, bool indexer) {
  const int64_t row = int64_t(blockIdx.x) * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  if (indexer) {
    uint8_t* c = cache + idx_code_offset(g, row);
    for (int i = lane; i < kIdxDim; i += 32)
      if ((c[i] & 0x7F) == 0x7F) c[i] = 0x7E;
    if (lane == 0) *reinterpret_cast<float*>(cache + idx_scale_offset(g, row)) = 1.0f / 256.0f;
    return;
  }
  uint8_t* d = cache + kv_data_offset(g, row);
  for (int i = lane; i < kKvNope; i += 32)
    if ((d[i] & 0x7F) == 0x7F) d[i] = 0x7E;
  for (int i = lane; i < kKvRope; i += 32) {
    uint8_t* hi = d + kKvNope + 2 * i + 1;  // sign + 7 exponent bits of the bf16 value
    *hi = uint8_t((*hi & 0x80) | 0x3E);
  }
  if (lane == 0) {
    uint8_t* sc = cache + kv_scale_offset(g, row);
    for (int t = 0; t < kKvTiles; ++t) sc[t] = uint8_t(127 - 8);
    sc[kKvTiles] = 0;
  }
}
}  // namespace

void launch_kv_sanitize(uint8_t* cache, int64_t rows, const KvPages& g, bool indexer, void* stream) {
  kv_sanitize_kernel<<<unsigned((rows + kWarps - 1) / kWarps), kWarps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      cache, rows, g, indexer);
}

void launch_kv_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache,
                      int64_t cache_rows, const KvPages& g, void* stream) {
  dsinfer::cuda::pdl_launch(kv_encode_kernel, dim3(unsigned(n)), dim3(kKvRowWarps * 32), 0,
                            static_cast<cudaStream_t>(stream), x, int(n), ld, dst_rows, cache, cache_rows, g);
}

void launch_kv_encode_ring(const float* x, int64_t ld, const KvRingStep& st, int64_t ring_rows, uint8_t* cache,
                           int64_t cache_rows, const KvPages& g, void* stream) {
  dsinfer::cuda::pdl_launch(kv_encode_ring_kernel, dim3(unsigned(st.T)), dim3(kKvRowWarps * 32), 0,
                            static_cast<cudaStream_t>(stream), x, ld, st, ring_rows, cache, cache_rows, g);
}

void launch_idx_encode(const float* x, int64_t n, int64_t ld, const int32_t* dst_rows, uint8_t* cache,
                       int64_t cache_rows, const KvPages& g, void* stream) {
  const unsigned blocks = unsigned((n + kWarps - 1) / kWarps);
  dsinfer::cuda::pdl_launch(idx_encode_kernel, dim3(blocks), dim3(kWarps * 32), 0, static_cast<cudaStream_t>(stream), x,
                            int(n), ld, dst_rows, cache, cache_rows, g);
}

}  // namespace dsinfer::ops::cuda::detail
