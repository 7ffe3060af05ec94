// Parameters and kernel launcher behind rope_cuda.h. No CUDA types and no Status here: the .cu side must stay
// free of fmt (nvcc compiles it very slowly); rope_cuda.cpp validates and checks the launch.
#pragma once
#include <cstdint>

namespace dsinfer::ops::cuda {

enum class HeadNorm { None, Unweighted, Weighted };

struct HeadNormRopeParams {
  int64_t rows = 0;                 // tokens
  int64_t heads = 1;                // vectors per row
  int64_t dim = 0;                  // vector length (multiple of 4)
  HeadNorm norm = HeadNorm::None;
  const float* norm_w = nullptr;    // [dim] for HeadNorm::Weighted
  float eps = 1e-6f;
  int64_t rope_dim = 0;             // trailing channels rotated (even, <= dim); 0 = no RoPE
  const float* inv_freq = nullptr;  // [rope_dim / 2] fp32 (ops::rope_inv_freq)
  float attention_factor = 1.0f;
  bool inverse = false;             // rotate by -pos (attention output)
  // Fused epilogues, applied in the order of the separate ops they replace (each bit-identical to that op):
  // round_rope_bf16: the rotated channels rounded to bf16 (round_bf16_cuda over [dim - rope_dim, dim) of every
  // vector; DeepSeek-V4.1 official numerics).
  bool round_rope_bf16 = false;
  // fp8_dims > 0: FP8 e4m3 block simulation of channels [0, fp8_dims) in blocks of fp8_block after the norm and
  // the RoPE (fp8_block_sim(x, rows * heads, dim, fp8_dims, fp8_block): the stored KV's NoPE channels, V4).
  // fp8_dims a multiple of 4 (<= dim), fp8_block a power of two in [4, 128].
  int64_t fp8_dims = 0;
  int64_t fp8_block = 64;
  // fp4_block > 0: normalized Hadamard transform of the whole vector (double butterflies), then FP4 e2m1 block
  // simulation in blocks of fp4_block, after the norm and the RoPE (hadamard_fp4_sim(x, rows * heads, dim,
  // fp4_block): the indexer query, V4). dim a power of two <= 128 (one lane per 4 channels), fp4_block a power of
  // two in [4, 128]; not with fp8_dims.
  int64_t fp4_block = 0;
  // out_bf16 set: the finished vector (after every epilogue above) is rounded once to bf16 (RNE, as
  // small_float::f32_to_bf16_bits; a NaN stays a NaN) and written to out_bf16 ([rows, heads, dim] bf16, 16-byte
  // aligned) instead of back into x, which is then only read (session 24: the query of the split-block sparse
  // prefill kernel, sparse_attention_prefill_cuda.h). The arithmetic is the fp32 path's: out_bf16 holds exactly
  // bf16(the fp32 result). Must not overlap any input or output of the call.
  uint16_t* out_bf16 = nullptr;
  // in_bf16 (needs out_bf16): the vectors are read from out_bf16 (bf16, widened exactly to fp32) instead of x, and the
  // result is written back there (in place: a lane reads each of its chunks before it writes it); x is neither read
  // nor written (may be null). Session 27: the query that wq_b's matmul wrote as bf16 (GemmLtEngine::gemm_bf16_out).
  bool in_bf16 = false;
  // The RoPE angles once a block of 8 heads (shared memory) instead of once a vector, where heads % 8 == 0 (session
  // 27; the same values, so the same bits): -1 as DSINFER_ROPE_TABLE says (read once: unset or `1` on, `0` off; on
  // by default since session 29's H200 run: q_norm_rope 1.16-1.20 -> 1.15 ms at prefill 4,096), 0 never, 1 always
  // where the shape allows.
  int angle_table = -1;
  // pos_ready: the positions are step inputs that no kernel of the step writes (cuda/pdl.cuh), so the head_norm_rope
  // kernels compute the RoPE angles (a double-precision sincos a pair) into shared memory before their PDL wait,
  // beside the previous kernel's tail; the same values, so the same bits. Off: after the wait (the drafter's
  // positions are written by its own kernels).
  bool pos_ready = false;
};

namespace detail {
void launch_head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream);
// a over xa, then b over xb, in one grid (the first blocks take a's vectors).
void launch_head_norm_rope_pair(const HeadNormRopeParams& a, float* xa, const HeadNormRopeParams& b, float* xb,
                                const int64_t* pos, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
