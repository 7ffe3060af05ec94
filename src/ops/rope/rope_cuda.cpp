// Argument checks and launch of the CUDA head norm + RoPE (see rope_cuda.h).
#include "ops/rope/rope_cuda.h"

#include <cstdint>

#include "cuda/cuda_common.h"
#include "ops/rope/rope_launch.h"

namespace dsinfer::ops::cuda {

namespace {
// Shape, weights and fused-epilogue checks of one call (x and pos are checked by the callers).
Status check(const HeadNormRopeParams& p, const char* op) {
  if (p.rows < 0 || p.heads <= 0 || p.dim <= 0 || p.dim % 4 != 0)
    return Status::errorf("{}: bad shape rows={} heads={} dim={} (dim must be a positive multiple of 4)", op, p.rows,
                          p.heads, p.dim);
  if (p.rope_dim < 0 || p.rope_dim % 2 != 0 || p.rope_dim > p.dim)
    return Status::errorf("{}: rope_dim {} must be even and <= dim {}", op, p.rope_dim, p.dim);
  if (p.rope_dim > 0 && !p.inv_freq) return Status::errorf("{}: rope_dim > 0 needs inv_freq", op);
  if (p.norm == HeadNorm::Weighted && !p.norm_w) return Status::errorf("{}: weighted norm without weights", op);
  if (p.fp8_dims < 0 || p.fp8_dims > p.dim || p.fp8_dims % 4 != 0)
    return Status::errorf("{}: fp8_dims {} must be a multiple of 4 in [0, dim {}]", op, p.fp8_dims, p.dim);
  const int64_t b = p.fp8_block;
  if (p.fp8_dims > 0 && (b < 4 || b > 128 || (b & (b - 1)) != 0))
    return Status::errorf("{}: fp8_block {} must be a power of two in [4, 128]", op, b);
  const int64_t f = p.fp4_block;
  if (f != 0 && (f < 4 || f > 128 || (f & (f - 1)) != 0 || p.dim > 128 || (p.dim & (p.dim - 1)) != 0 || p.fp8_dims > 0))
    return Status::errorf("{}: the Hadamard + FP4 epilogue needs dim {} a power of two <= 128, fp4_block {} a power of "
                          "two in [4, 128], and no FP8 epilogue", op, p.dim, f);
  if (p.in_bf16 && !p.out_bf16) return Status::errorf("{}: in_bf16 reads out_bf16, which is null", op);
  if ((p.rows * p.heads + 7) / 8 > 0x3fffffff)
    return Status::errorf("{}: {} vectors exceed the grid limit", op, p.rows * p.heads);
  return Status::ok();
}
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// Whether the byte ranges [a, a + an) and [b, b + bn) overlap.
bool overlap(const void* a, int64_t an, const void* b, int64_t bn) {
  const auto* a0 = static_cast<const char*>(a);
  const auto* b0 = static_cast<const char*>(b);
  return a0 < b0 + bn && b0 < a0 + an;
}
// The bytes of x a call reads or writes (none when it works on out_bf16 in place).
int64_t fp32_bytes(const HeadNormRopeParams& p) { return p.in_bf16 ? 0 : p.rows * p.heads * p.dim * 4; }
int64_t out_bytes(const HeadNormRopeParams& p) { return p.out_bf16 ? p.rows * p.heads * p.dim * 2 : 0; }
// The bf16 output's alignment and its overlap with the call's input x.
Status check_out(const HeadNormRopeParams& p, const float* x, const char* op) {
  if (!p.out_bf16) return Status::ok();
  if (!aligned16(p.out_bf16)) return Status::errorf("{}: out_bf16 must be 16-byte aligned", op);
  if (overlap(p.out_bf16, out_bytes(p), x, fp32_bytes(p)))
    return Status::errorf("{}: out_bf16 overlaps its input x", op);
  return Status::ok();
}
}  // namespace

Status head_norm_rope(const HeadNormRopeParams& p, float* x, const int64_t* pos, void* stream) {
  DSI_RETURN_IF_ERROR(check(p, "head_norm_rope"));
  if (p.rows == 0) return Status::ok();
  if ((!x && !p.in_bf16) || !pos) return Status::error("head_norm_rope: null x or pos");
  if (!p.in_bf16 && !aligned16(x)) return Status::error("head_norm_rope: x must be 16-byte aligned");
  DSI_RETURN_IF_ERROR(check_out(p, x, "head_norm_rope"));
  detail::launch_head_norm_rope(p, x, pos, stream);
  DSI_CUDA_LAUNCHED("head_norm_rope_kernel");
  return Status::ok();
}

Status head_norm_rope_pair(const HeadNormRopeParams& a, float* xa, const HeadNormRopeParams& b, float* xb,
                           const int64_t* pos, void* stream) {
  DSI_RETURN_IF_ERROR(check(a, "head_norm_rope_pair (first)"));
  DSI_RETURN_IF_ERROR(check(b, "head_norm_rope_pair (second)"));
  if (a.rows == 0 && b.rows == 0) return Status::ok();
  if ((!xa && !a.in_bf16) || (!xb && !b.in_bf16) || !pos) return Status::error("head_norm_rope_pair: null x or pos");
  if ((!a.in_bf16 && !aligned16(xa)) || (!b.in_bf16 && !aligned16(xb)))
    return Status::error("head_norm_rope_pair: x must be 16-byte aligned");
  if (overlap(xa, fp32_bytes(a), xb, fp32_bytes(b))) return Status::error("head_norm_rope_pair: the two tensors overlap");
  DSI_RETURN_IF_ERROR(check_out(a, xa, "head_norm_rope_pair (first)"));
  DSI_RETURN_IF_ERROR(check_out(b, xb, "head_norm_rope_pair (second)"));
  // A bf16 output is written while the other vector set is read or written: no overlap with it either.
  if (overlap(a.out_bf16, out_bytes(a), xb, fp32_bytes(b)) || overlap(b.out_bf16, out_bytes(b), xa, fp32_bytes(a)) ||
      overlap(a.out_bf16, out_bytes(a), b.out_bf16, out_bytes(b)))
    return Status::error("head_norm_rope_pair: a bf16 output overlaps the other tensor");
  detail::launch_head_norm_rope_pair(a, xa, b, xb, pos, stream);
  DSI_CUDA_LAUNCHED("head_norm_rope_pair_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
