// DeepSeek-V4's KV storage formats, as FlashMLA's sparse FP8 decode reads them (its "MODEL1" layout, checked against
// FlashMLA tests/quant.py, MODEL1_FP8Sparse), and the FP8 indexer keys of DeepGEMM's paged MQA logits.
//
// Main KV (window ring rows and compressed entries, head_dim 512): 448 NoPE channels as FP8 e4m3 with one UE8M0
// power-of-two scale per 64 channels (7 scales), then the 64 RoPE channels as bf16: 584 bytes a row. Rows live in
// blocks of kKvBlockRows = 64, and a block is NOT an array of 584-byte rows: it holds first the 64 rows' 576 data
// bytes (448 e4m3 codes, then 64 bf16 little-endian), then the 64 rows' 8 scale bytes (7 UE8M0 exponents + 1 zero
// pad), the block padded to a multiple of 576 bytes (64 * 584 = 37,376 -> 37,440 bytes). Row r of a cache is row
// r % 64 of block r / 64 (FlashMLA's "index in kvcache" = block * 64 + offset).
//
// Indexer keys (index_head_dim 128): 128 e4m3 codes and one fp32 power-of-two scale a row (132 bytes), blocks of 64
// rows: the 64 rows' codes, then their 64 fp32 scales (8,448 bytes a block).
//
// Numerics. Encoding takes the fp32 row before the official simulation: the scale of a 64-channel tile is
// 2^ceil(log2(max(amax, 1e-4) / 448)) and a code is e4m3(clamp(x / s, +-448)), the rule of ops/quant_sim's
// fp8_block_sim_ref, so decoded NoPE channels equal fp8_block_sim_ref's output bit for bit (an already simulated row
// decodes back to itself). The RoPE channels are rounded to bf16 (round to nearest even): the official
// state is bf16 there, the fp32 simulation keeps them fp32. A tile holding a NaN or an infinity gets the NaN scale
// 0xFF (its channels decode to NaN). Indexer keys: a row after the official Hadamard + FP4 e2m1 1x32 simulation
// has values c * 2^k_b (c in the e2m1 set, one k_b per 32 channels); the row scale 2^ceil(log2(amax / 448)) puts
// the largest at <= 384 and every value of a block with k_b >= max k_b - 14 on the e4m3 grid, so such a row is
// stored exactly (smaller blocks round to e4m3's subnormals). Any other row is rounded to e4m3 under that scale.
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "core/small_float.h"

namespace dsinfer::ops {

inline constexpr int64_t kKvDim = 512, kKvNope = 448, kKvRope = 64, kKvTile = 64, kKvTiles = 7;
inline constexpr int64_t kKvDataBytes = kKvNope + 2 * kKvRope;  // 576: codes, then bf16 RoPE channels
inline constexpr int64_t kKvScaleBytes = 8;                     // 7 UE8M0 exponents + 1 pad byte
inline constexpr int64_t kKvRowBytes = kKvDataBytes + kKvScaleBytes;  // 584
inline constexpr int64_t kKvBlockRows = 64;
inline constexpr int64_t kKvBlockBytes = (kKvBlockRows * kKvRowBytes + kKvDataBytes - 1) / kKvDataBytes * kKvDataBytes;
inline constexpr int64_t kIdxDim = 128;
inline constexpr int64_t kIdxRowBytes = kIdxDim + 4;  // 132
inline constexpr int64_t kIdxBlockBytes = kKvBlockRows * kIdxRowBytes;
inline constexpr float kKvAmaxFloor = 1e-4f;  // the official act_quant's FP8 amax floor
static_assert(kKvBlockBytes == 37440 && kIdxBlockBytes == 8448, "FlashMLA MODEL1 / DeepGEMM block sizes");

// Where rows live: a cache is pages of page_rows rows, page_stride bytes apart from byte `offset`; a page holds its
// rows' data, then their scales (main KV: 576 data + 8 scale bytes a row; indexer keys: 128 codes + a 4-byte fp32
// scale). FlashMLA's MODEL1 cache is the pages of 64 rows, 37,440 bytes apart (kModel1Pages, the default); the runners'
// state places a layer's window ring as one page per slot and its compressed entries / indexer keys as one page per
// token block (cache/state_layout.h), so the row of a slot's ring position or a block's entry is an index like
// FlashMLA's. page_stride must be a multiple of 16 and offset a multiple of 16 for the 16-byte loads.
struct KvPages {
  int64_t page_rows = kKvBlockRows;
  int64_t page_stride = kKvBlockBytes;
  int64_t offset = 0;
};
inline constexpr KvPages kModel1Pages{kKvBlockRows, kKvBlockBytes, 0};
inline constexpr KvPages kIdxPages{kKvBlockRows, kIdxBlockBytes, 0};
// Bytes a page of n rows takes (without padding).
DSI_HD constexpr int64_t kv_page_bytes(int64_t n) { return n * kKvRowBytes; }
DSI_HD constexpr int64_t idx_page_bytes(int64_t n) { return n * kIdxRowBytes; }

// Byte offsets of row r's data (576 bytes) and scales (8 bytes) in a main KV cache; of an indexer key's codes and
// its fp32 scale in an indexer cache.
DSI_HD int64_t kv_data_offset(const KvPages& g, int64_t r) {
  return g.offset + r / g.page_rows * g.page_stride + r % g.page_rows * kKvDataBytes;
}
DSI_HD int64_t kv_scale_offset(const KvPages& g, int64_t r) {
  return g.offset + r / g.page_rows * g.page_stride + g.page_rows * kKvDataBytes + r % g.page_rows * kKvScaleBytes;
}
DSI_HD int64_t idx_code_offset(const KvPages& g, int64_t r) {
  return g.offset + r / g.page_rows * g.page_stride + r % g.page_rows * kIdxDim;
}
DSI_HD int64_t idx_scale_offset(const KvPages& g, int64_t r) {
  return g.offset + r / g.page_rows * g.page_stride + g.page_rows * kIdxDim + r % g.page_rows * 4;
}
// The same in FlashMLA's MODEL1 blocks (kModel1Pages / kIdxPages, spelled out: usable in device code).
DSI_HD int64_t kv_data_offset(int64_t r) { return kv_data_offset(KvPages{kKvBlockRows, kKvBlockBytes, 0}, r); }
DSI_HD int64_t kv_scale_offset(int64_t r) { return kv_scale_offset(KvPages{kKvBlockRows, kKvBlockBytes, 0}, r); }
DSI_HD int64_t idx_code_offset(int64_t r) { return idx_code_offset(KvPages{kKvBlockRows, kIdxBlockBytes, 0}, r); }
DSI_HD int64_t idx_scale_offset(int64_t r) { return idx_scale_offset(KvPages{kKvBlockRows, kIdxBlockBytes, 0}, r); }

// Channels 4c .. 4c+3 of indexer key `row` of a cache at base placed as g, decoded (base + offsets 4-byte aligned).
DSI_HD void idx_decode4(const uint8_t* base, const KvPages& g, int64_t row, int64_t c, float (&out)[4]) {
  const uint32_t codes = *reinterpret_cast<const uint32_t*>(base + idx_code_offset(g, row) + 4 * c);
  const float s = small_float::from_bits(*reinterpret_cast<const uint32_t*>(base + idx_scale_offset(g, row)));
  for (int i = 0; i < 4; ++i)
    out[i] = small_float::from_bits(small_float::e4m3_f32_bits((codes >> (8 * i)) & 0xFFu)) * s;
}

// Exponent k of the power-of-two scale 2^ceil(log2(amax / qmax)), exactly (frexp of the double ratio, as
// cuda/ops_device.cuh's pow2_scale); amax finite and > 0.
DSI_HD int kv_pow2_exponent(float amax, float qmax) {
  const double r = double(amax) / double(qmax);
  int e = 0;
  const double f = frexp(r, &e);  // r = f * 2^e, f in [0.5, 1)
  return f == 0.5 ? e - 1 : e;
}

// e4m3fn code of a finite value already on the e4m3 grid (|v| <= 448), e.g. round_e4m3's result.
DSI_HD uint8_t kv_e4m3_code(float v) {
  const uint32_t sign = small_float::to_bits(v) >> 31;
  const float a = fabsf(v);
  uint32_t bits = 0;
  if (a != 0.0f) {
    int e = 0;
    frexpf(a, &e);
    const int ue = e - 1;
    if (ue < -6) {
      bits = uint32_t(a * 512.0f);  // subnormal: m * 2^-9
    } else {
      const uint32_t man = uint32_t(ldexpf(a, 3 - ue)) - 8u;
      bits = (uint32_t(ue + 7) << 3) | man;
    }
  }
  return uint8_t((sign << 7) | bits);
}

// Code of x under the power-of-two scale 2^k (x / 2^k clamped to +-448, rounded to nearest even). On the device,
// where 2^-k is a normal float (|k| <= 126: every main-KV tile, whose amax floor keeps k in [-22, 120]), x * 2^-k:
// the same real number as x / 2^k, so the same rounding, without the division's checked slow path.
DSI_HD uint8_t kv_encode_e4m3(float x, int k) {
  const float s = ldexpf(1.0f, k);
#if defined(__CUDA_ARCH__)
  float y = k >= -126 && k <= 126 ? x * ldexpf(1.0f, -k) : __fdiv_rn(x, s);
#else
  float y = x / s;
#endif
  y = fminf(fmaxf(y, -448.0f), 448.0f);
  return kv_e4m3_code(small_float::round_e4m3(y));
}

// UE8M0 byte of a tile's scale from its amax (0xFF: the tile is not finite).
DSI_HD uint8_t kv_tile_scale_byte(float amax) {
  if (!(amax <= 3.4028235e38f)) return 0xFF;  // NaN or inf
  const int k = kv_pow2_exponent(fmaxf(amax, kKvAmaxFloor), 448.0f);
  return uint8_t(k + 127);
}

}  // namespace dsinfer::ops

namespace dsinfer::ops {

// Bytes of a main KV cache / an indexer key cache holding `rows` rows (whole blocks).
inline int64_t kv_cache_bytes(int64_t rows) { return (rows + kKvBlockRows - 1) / kKvBlockRows * kKvBlockBytes; }
inline int64_t idx_cache_bytes(int64_t rows) { return (rows + kKvBlockRows - 1) / kKvBlockRows * kIdxBlockBytes; }

// CPU reference codec (kv_format_ref.cpp). x / out: kKvDim (kIdxDim) floats; cache: the whole cache; row: its row.
// Rows in pages `g` (kModel1Pages / kIdxPages when not given).
void kv_encode_row_ref(const float* x, uint8_t* cache, int64_t row, const KvPages& g = kModel1Pages);
void kv_decode_row_ref(const uint8_t* cache, int64_t row, float* out, const KvPages& g = kModel1Pages);
void idx_encode_row_ref(const float* x, uint8_t* cache, int64_t row, const KvPages& g = kIdxPages);
void idx_decode_row_ref(const uint8_t* cache, int64_t row, float* out, const KvPages& g = kIdxPages);

}  // namespace dsinfer::ops
