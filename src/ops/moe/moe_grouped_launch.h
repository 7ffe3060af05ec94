// Launchers of the grouped (prefill) MoE GEMMs (moe_grouped.cu; no CUDA types, no Status: validated by
// moe_cuda.cpp). FP4_G32 experts with E8M0 scales, bf16 activations in chunk layout (moe_grouped_common.h).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda {

struct MoeGroupedArgs {
  const int32_t* tiles = nullptr;       // [1 + 2 * max_tiles]: count, then (expert, first row in the expert) pairs
  const int32_t* offsets = nullptr;     // [experts + 1] (the permutation)
  const int32_t* perm_token = nullptr;  // gate/up: A row of permuted row p = token perm_token[p]; down: null (row p)
  const uint16_t* a = nullptr;          // bf16 chunk layout: gate/up x [T, K]; down h [rows, K]
  const void* const* w1 = nullptr;      // gate/up: W1 [N, K]; down: W2 [N, K] (per-expert device pointers)
  const void* const* s1 = nullptr;
  const void* const* w3 = nullptr;      // gate/up: W3 [N, K]; unused by the down kernel
  const void* const* s3 = nullptr;
  int64_t K = 0, N = 0;                 // K % 128 == 0; N % 64 (gate/up) or % 128 (down) == 0
  float limit = 0.0f;                   // SwiGLU clamp (gate/up), 0 = none
  uint16_t* hout = nullptr;             // gate/up: SwiGLU output, bf16 chunk layout [rows, N]
  float* yout = nullptr;                // down: fp32 [rows, N]
  uint16_t* yout16 = nullptr;           // down, instead of yout where not null: bf16 [rows, N] (round to nearest even)
};

// The FP8 grouped GEMMs (moe_grouped_fp8.cu; numeric contract in moe_fp8_common.h): two-term e4m3 activations (hi +
// lo) with one fp32 scale per row and 128 k (gate/up) or 64 k (down), FP4_G32 experts expanded to e4m3 in shared
// memory, wgmma. The A rows are the permuted rows (gate/up: x quantized in permuted order), loaded by TMA.
struct MoeGroupedFp8Args {
  const int32_t* tiles = nullptr;       // as MoeGroupedArgs
  const int32_t* offsets = nullptr;
  const uint8_t* a = nullptr;           // e4m3 first term [rows_a, K], row p = permuted row p (gate/up x, down h)
  const uint8_t* a_lo = nullptr;        // e4m3 second term, same shape and scales, a_lo - a > 0 bytes after a
  const float* a_scale = nullptr;       // [rows_a, K / 128] (gate/up) or [rows_a, K / 64] (down)
  int64_t rows_a = 0;                   // rows of a / a_lo (>= the permuted rows; the TMA reads none past it)
  const void* const* w1 = nullptr;      // gate/up: W1 [N, K]; down: W2 [N, K] (per-expert device pointers)
  const void* const* s1 = nullptr;
  const void* const* w3 = nullptr;      // gate/up: W3 [N, K]; unused by the down kernel
  const void* const* s3 = nullptr;
  int64_t K = 0, N = 0;                 // K % 128 == 0; N % 64 (gate/up) or % 128 (down) == 0
  float limit = 0.0f;                   // SwiGLU clamp (gate/up), 0 = none
  uint8_t* hq = nullptr;                // gate/up: SwiGLU output e4m3 [rows, N], first term ...
  uint8_t* hq_lo = nullptr;             // ... second term ...
  float* hs = nullptr;                  // ... and their scales [rows, N / 64]
  float* yout = nullptr;                // down: fp32 [rows, N]
};

// The RS kernels' wgmma N per item (moe_grouped_rs.cu): true = the row tile's rows rounded up to 16 (16..128; session
// 19, helper s19-moep3); false = 96 for tiles of <= 96 rows, else 128 (session 18, kept for the bench). Same bits
// either way (a column of the wgmma does not depend on the others).
inline constexpr bool kMoeGroupedRsFineN = true;
// The grouped kernels' row-tile list (launch_moe_tile_list): true = by size class (rows rounded up to 16), largest
// first (session 19), false = expert order. Each item's result does not depend on the order.
inline constexpr bool kMoeTileListBySize = true;
// The RS kernels' stage boundary: true = each consumer warpgroup waits for the next stage's slot, loads its weight
// bytes and decodes its first k-step under the stage's last wgmma, before the drain (session 23); false = after the
// drain (session 19). Same wgmmas in the same order (same bits).
inline constexpr bool kMoeGroupedRsEarlyNext = true;
// The RS kernels' wgmma shape choice under fine_n: true = one main loop per N, picked once per item; false = one main
// loop, the shape picked per 128-k stage (session 19). Same wgmmas (same bits).
inline constexpr bool kMoeGroupedRsItemSwitch = true;
// The RS kernels' consumer code per stage and item (session 24, helper s24-moep; the same wgmmas on the same A
// registers and descriptors, so the same bits; moe_plan.h moe_rs_variant picks it). kWordStageItem applies with
// fine_n, early_next and item_switch all on (the plan's launch); any other combination runs kSession23's code.
// kSession23: each bf16 pair of FP4 weights by its own shifts and masks (fp4_pair_bits), each step's wgmma descriptor
// from its address, the scale factors by fp4_scale_bf16. kWordStageItem: each step's two pairs of a row from one
// bit-select (fp4_half_pairs, moe_grouped_rs_decode.cuh rs_decode_step_word), the step descriptors as the stage's
// first plus a constant, the scale factors by fp4_scale_bf16x2, the stage counter unsigned (slot and parity by mask
// and shift), the item entry from the producer through shared memory (not item_of's global loads) and the epilogue's
// outputs as two row pointers stepped by 8 rows (not a 64-bit index each). Session 24's two intermediate steps (the
// word decode alone, then with the stage descriptors: 1 / 2) went after the H200 A/B (session 26, T = 4,096 gate/up +
// down, us: 2,414-2,533 / 2,224-2,247 / 2,168-2,184 / 2,090-2,140 for session 23's / 1 / 2 / kWordStageItem).
enum class MoeGroupedRsVariant : uint8_t { kSession23 = 0, kWordStageItem = 3 };

// The bf16 wgmma grouped GEMMs with the FP4 weights as the register A operand (moe_grouped_rs.cu; numerics of
// MoeGroupedArgs: bf16 activations in chunk layout, exact weights, fp32 sums). The activation rows are the permuted
// rows (gate/up: x gathered in permuted order by launch_moe_grouped_xp), loaded by TMA.
struct MoeGroupedRsArgs {
  const int32_t* tiles = nullptr;       // as MoeGroupedArgs
  const int32_t* offsets = nullptr;
  const uint16_t* a = nullptr;          // bf16 chunk layout [rows_a, K], row p = permuted row p (gate/up x, down h)
  int64_t rows_a = 0;                   // rows of a (>= the permuted rows; the TMA reads none past it)
  const void* const* w1 = nullptr;      // gate/up: W1 [N, K]; down: W2 [N, K] (per-expert device pointers)
  const void* const* s1 = nullptr;
  const void* const* w3 = nullptr;      // gate/up: W3 [N, K]; unused by the down kernel
  const void* const* s3 = nullptr;
  int64_t K = 0, N = 0;                 // K % 128 == 0; N % 64 (gate/up) or % 128 (down) == 0
  float limit = 0.0f;                   // SwiGLU clamp (gate/up), 0 = none
  uint16_t* hout = nullptr;             // gate/up: SwiGLU output, bf16 chunk layout [rows, N]
  float* yout = nullptr;                // down: fp32 [rows, N]
  uint16_t* yout16 = nullptr;           // down, instead of yout where not null: bf16 [rows, N] (round to nearest even)
  int cwg = 2;                          // consumer warpgroups per CTA (64 weight rows each): 2 or 4 (benches)
  bool fine_n = kMoeGroupedRsFineN;     // the wgmma N per item (benches time both)
  bool early_next = kMoeGroupedRsEarlyNext;  // the next stage's operands before the drain (fine_n only; benches)
  bool item_switch = kMoeGroupedRsItemSwitch;  // the wgmma shape picked per item (fine_n only; benches)
  MoeGroupedRsVariant variant = MoeGroupedRsVariant::kWordStageItem;  // moe_cuda: moe_rs_variant()
};

namespace detail {
// x fp32 [T, K] -> bf16 chunk layout, written to the permuted rows pos_of[t * topk + j] >= 0 of xp [rows, K]
// ("moe_grouped_xp_kernel"); K % 128 == 0. x16 (or null): x already rounded to bf16 [T, K], read instead of x (the
// same values).
void launch_moe_grouped_xp(const float* x, const uint16_t* x16, const int32_t* pos_of, int64_t T, int64_t topk,
                           int64_t K, uint16_t* xp, void* stream);
// The consumer warpgroups the RS kernel runs with for a requested count: 4 when asked and N is a whole number of
// items (gate/up 128 h columns, down 256 rows), else 2.
int moe_grouped_rs_cwg(bool gate_up, int64_t N, int cwg);
// The RS gate/up + SwiGLU kernel (gate_up) or down kernel ("moe_grouped_rs_kernel"), persistent grid of one CTA per
// SM. False (nothing launched) if its TMA tensor map cannot be made (driver without cuTensorMapEncodeTiled, or a
// not 16-byte aligned).
bool launch_moe_grouped_rs(bool gate_up, const MoeGroupedRsArgs& a, int64_t max_tiles, void* stream);
// x fp32 [T, K], each row quantized once to two e4m3 terms + scales [., K / block] and written to the permuted rows
// pos_of[t * topk + j] >= 0 of q, lo [rows, K] and s [rows, K / block] ("moe_quant_kernel"); block 64 or 128,
// K % block == 0. Row r then holds x row perm_token[r] (the rows no assignment maps to are left as they are).
void launch_moe_quant(const float* x, const int32_t* pos_of, int64_t T, int64_t topk, int64_t K, int64_t block,
                      uint8_t* q, uint8_t* lo, float* s, void* stream);
// The FP8 gate/up + SwiGLU kernel (gate_up) or the FP8 down kernel ("moe_grouped_fp8_kernel"), grid as
// launch_moe_grouped. False (nothing launched) if its TMA tensor map cannot be made: the driver lacks
// cuTensorMapEncodeTiled, or a / a_lo break TMA's 16-byte alignment rules.
bool launch_moe_grouped_fp8(bool gate_up, const MoeGroupedFp8Args& a, int64_t max_tiles, void* stream);
// x fp32 [T, K] -> bf16 chunk layout [T, K] ("moe_grouped_x_kernel"); K % 128 == 0.
void launch_moe_grouped_x(const float* x, int64_t T, int64_t K, uint16_t* xb, void* stream);
// The CTA row-tile list from offsets, one warp: by_size = ordered by size class (rows rounded up to 16), largest first,
// expert order within a class ("moe_tile_list_by_size_kernel"), else in expert order ("moe_tile_list_kernel"). The
// same tiles either way.
void launch_moe_tile_list(const int32_t* offsets, int64_t experts, int32_t* tiles, void* stream,
                          bool by_size = kMoeTileListBySize);
// The gate/up + SwiGLU kernel (gate_up) or the down kernel ("moe_grouped_kernel"), grid
// (N / columns per tile, min(max_tiles, 65535)); blocks stride over the tile list.
void launch_moe_grouped(bool gate_up, const MoeGroupedArgs& a, int64_t max_tiles, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
