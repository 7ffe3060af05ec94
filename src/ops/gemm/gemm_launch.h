// Parameters and kernel launchers behind gemm_cuda.h (no CUDA types, no Status; validated by gemm_cuda.cpp and, for
// the MoE's grouped expert GEMMs, ops/moe/moe_cuda.cpp). One launch covers `groups` independent problems:
//   rows of group g: [row_off[g], row_off[g+1]) when row_off != nullptr (MoE: tokens grouped by expert),
//                    else [0, M);
//   x row of launch row p: x + g*x_gstride + (x_rows ? x_rows[p] : p) * ldx   (x_rows gathers tokens for the MoE);
//   y row of launch row p: y + g*y_gstride + p * ldy;
//   weight of group g: wdata_arr[g] / wscale_arr[g] (rows [0, N)) when wdata_arr != nullptr (per-expert tensors),
//                      else rows [g*N, (g+1)*N) of wdata / wscale (grouped projection).
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda {

enum class WeightFormat { F32, BF16, FP8_BLOCK, FP4_G32 };

// Logical W [rows = N (out), cols = K (in)], row-major like nn.Linear, in device memory.
struct DeviceWeight {
  WeightFormat fmt = WeightFormat::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;   // F32 / BF16: [N,K]; FP8_BLOCK: e4m3 [N,K]; FP4_G32: packed e2m1 [N, K/2]
                                //   (element 2c in the low nibble of byte c)
  const void* scale = nullptr;  // FP8_BLOCK: [ceil(N/block_n), ceil(K/block_k)]; FP4_G32: [N, K/32]; else unused
  bool scale_e8m0 = true;       // E8M0 bytes (2^(b-127)); else fp32 scales
  int64_t block_n = 128, block_k = 128;  // FP8_BLOCK only
};

// Which kernel runs, with which parameters (StreamParams, GemvParams below): gemm_plan.h.

namespace detail {

struct GemmArgs {
  const float* x = nullptr;
  int64_t ldx = 0, x_gstride = 0;
  const int32_t* x_rows = nullptr;
  float* y = nullptr;
  int64_t ldy = 0, y_gstride = 0;
  int64_t M = 0;
  const int32_t* row_off = nullptr;
  int64_t groups = 1, N = 0, K = 0;
  const uint8_t* wdata = nullptr;
  const uint8_t* wscale = nullptr;
  const void* const* wdata_arr = nullptr;
  const void* const* wscale_arr = nullptr;
  int64_t scale_cols = 0;  // FP8: ceil(K / block_k); FP4: K / 32
  int64_t block_n = 128, block_k = 128;
  bool scale_e8m0 = true;
  bool accumulate = false;
  bool w_vec = false;  // 16-byte weight vectors are legal (K and alignment allow; FP8 block_k % 16 == 0)
  bool x_vec = false;  // 16-byte x loads are legal (x, ldx, x_gstride 16-byte multiples)
  int m_tiles_z = 1;   // tiled kernel: grid z (m-tiles walked by each block with stride gridDim.z)
};

// Launch shape of the streaming kernel (gemm_plan.h plan_gemm_stream): grid x = K splits (one thread-block
// cluster), y = 64-row blocks, z = groups * token_chunks.
struct StreamParams {
  int splits = 1;        // K splits = cluster size, 1..8
  int kb_per_split = 1;  // block_k-wide scale blocks per split
  int tokens = 8;        // x rows per block: 8, 16, 32 or 64
  int token_chunks = 1;  // ceil(M / tokens)
  int xs_ld = 0;         // bf16 elements per x row in shared memory
  // Blocks along the 64-row blocks (grid y): block y walks row blocks y, y + row_grid, ... with its x tile loaded
  // once (persistent over N; 0 = one block per row block). Changes only which block computes a row, never its sums.
  int row_grid = 0;
  int depth = 4;  // 64-wide K chunks in flight per lane (register prefetch): 4 or 8
};

// Launch shape of the GEMV kernel (gemm_plan.h plan_gemm_gemv): blocks of wk * wr warps; each warp owns
// kGemvRowsPerWarp weight rows and one K step of every staged x chunk (kc = wk steps); grid x = row blocks,
// y = groups.
inline constexpr int kGemvRowsPerWarp = 4, kGemvMaxWarps = 8, kGemvXsBudget = 46 * 1024;
// 16-byte weight vectors per lane per row per step: 2 (8 loads in flight per thread) while x rows are few; 1 at
// mt >= 8, where the FMAs and shared-memory reads bound the kernel and the x chunk must stay small.
inline constexpr int gemv_vpl(int mt) { return mt <= 4 ? 2 : 1; }
// The whole-tile form (GemvParams::even) up to this many x rows. H100, bench/NOTES.md session 35 (`gemm_bench --gemv`,
// eager us, whole-tile / general form of one plan): wq_b M = 1 / 2 / 8 / 16 21.3 / 23.0 / 54.0 / 106.8 against 25.1 /
// 38.9 / 67.2 / 96.2; wo_b 23.5 / 24.7 / 55.1 / 164.1 against 25.5 / 36.2 / 67.3 / 156.8: at 16 rows, where the FMAs
// and the shared-memory reads bound the kernel, the general form's schedule is faster.
inline constexpr int kGemvEvenMaxMt = 8;
struct GemvParams {
  int mt = 1;          // x rows of the kernel instance: the power of two >= M (1..16)
  int wk = 1, wr = 1;  // warps splitting K / rows inside a block (wk * wr <= kGemvMaxWarps)
  int kc = 0;          // K elements per staged x chunk
  int xs_ld = 0;       // floats per staged x row (each weight vector's slice padded by 4 floats: no bank conflicts)
  int smem = 0;        // dynamic shared memory bytes (x chunk + cross-warp partials), <= 48 KB
  // Whole tiles (plan_gemm_gemv): mt <= kGemvEvenMaxMt, every warp's rows < N, K a multiple of kc, and for
  // FP8_BLOCK e8m0 scales with power-of-two blocks of a multiple of kGemvRowsPerWarp rows (a warp's rows share one
  // scale row). The kernel then drops the bounds checks, shifts instead of dividing, and loads one scale a vector for
  // the warp's rows; the same bits as without.
  bool even = false;
  int kc_shift = 0;                // log2(kc) (kc is a power of two)
  int bn_shift = 0, bk_shift = 0;  // FP8_BLOCK: log2(block_n), log2(block_k) (used when even: powers of two)
};

// Elements per 16-byte weight vector.
inline constexpr int64_t vec_elems(WeightFormat f) {
  return f == WeightFormat::F32 ? 4 : f == WeightFormat::BF16 ? 8 : f == WeightFormat::FP8_BLOCK ? 16 : 32;
}

// set_weight_args / set_x_vec (the weight fields and the 16-byte load legality of GemmArgs): gemm_plan.h.

// Launchers (gemm_skinny.cu: needs a.w_vec; gemm_tiled.cu: any shape, a.m_tiles_z <= 65535). The caller checks the
// launch (DSI_CUDA_LAUNCHED) under the kernel names "gemm_skinny_kernel" / "gemm_tiled_kernel".
void launch_gemm_skinny(WeightFormat f, const GemmArgs& a, void* stream);
// Returns the cudaError_t of the launch (as int; also check DSI_CUDA_LAUNCHED("gemm_stream_kernel")).
int launch_gemm_stream(const GemmArgs& a, const StreamParams& p, void* stream);
void launch_gemm_tiled(WeightFormat f, const GemmArgs& a, void* stream);
// Returns the cudaError_t of the launch (as int; also check DSI_CUDA_LAUNCHED("gemm_gemv_kernel")).
int launch_gemm_gemv(WeightFormat f, const GemmArgs& a, const GemvParams& p, void* stream);

}  // namespace detail

}  // namespace dsinfer::ops::cuda
