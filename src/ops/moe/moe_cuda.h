// Mixture-of-experts on the GPU (architecture notes §8): router top-k over precomputed logits, and the expert layer
// (tokens permuted into per-expert groups, grouped GEMMs with weights dequantized in-kernel, clamped SwiGLU,
// weighted combine in k order plus the shared expert). Plain C++ header (no CUDA types); fp32 activations.
// Same semantics as the CPU references in ops/moe/moe.h (route_ref, expert_accumulate_ref); layouts and
// determinism rules in docs/kernels.md "GEMM and MoE". Layout: moe_plan.h chooses the kernels, moe_cuda.cpp
// validates and sequences the launches, moe_launch.h holds the parameters and launchers, the kernels are route.cu,
// moe.cu, moe_fast.cu, moe_grouped.cu and moe_grouped_fp8.cu.
#pragma once
#include <cstdint>
#include <functional>

#include "core/status.h"
#include "cuda/device_buffer.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/moe/moe_launch.h"  // RouterCudaParams, DeviceExpertWeights, MoeExpertsDevice, MoeSharedDevice
#include "ops/moe/moe_plan.h"    // MoePath, the kernel choice
#include "ops/routed_sum.h"

namespace dsinfer::ops::cuda {

// logits fp32 [T, E] (x . gate^T, e.g. from gemm_cuda with an F32 gate); bias [E] or null; hash_table int32
// [hash_vocab, topk] or null (then tokens int32 [T] select rows). Out: idx int32 [T, topk], weight fp32 [T, topk].
// Selection ties break toward the lower expert id (as route_ref). One block per token.
Status route_cuda(const float* logits, int64_t T, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                  const RouterCudaParams& p, int32_t* idx, float* weight, void* stream);

// The kernel choice (MoePath, moe_fast_supported, the thresholds): moe_plan.h.

// A dense projection y[M, N] = x[M, K] . W^T (row strides K and N, y overwritten) on moe_cuda's stream, with the
// caller's kernel choice: the runner's projection GEMM, so the shared expert takes the kernels every other FP8
// projection of the step takes. Where plan_moe sets MoePlan::shared_projection, moe_cuda's shared expert runs its
// three GEMMs through it (the SwiGLU and the combine stay moe_cuda's). x16: x rounded to bf16 where the caller
// gave moe_cuda one (its x16) for gate and up, else null; for down the SwiGLU's output rounded to bf16 (written by
// the SwiGLU kernel beside its fp32 output); the projection may read it instead of rounding x itself.
using MoeSharedGemm = std::function<Status(const float* x, const uint16_t* x16, int64_t M, int64_t K,
                                           const DeviceWeight& w, float* y, int64_t N)>;

class MoeWorkspace;
// out[T, D] = sum_k weight[t,k] * expert_{idx[t,k]}(x[t]) + (shared ? shared(x[t]) : 0), summed in k order, then the
// shared expert added. expert(x) = w2 . (silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit)); limit 0 = no clamp;
// shared_limit likewise for the shared expert. x and out are contiguous [T, D] and must not overlap. An expert id
// outside [0, experts) contributes nothing. Deterministic: no float atomics; a token's result depends only on its
// own row and on which path runs (Exact: chosen from T, fp32 streaming when T*topk <= 8*experts, else tensor
// core; Fast: independent of the other tokens, see docs/kernels.md). x16 (optional): x rounded to bf16 (round to
// nearest even) [T, D], handed to the shared expert's projection (MoeSharedGemm) for gate and up, and read by the
// RS grouped path's gather of the routed rows instead of x (the same values).
// defer (optional): where the call's combine is the routed sum of ops/routed_sum.h (every path but CUTLASS's), it is
// left to the caller: *defer describes out (yp / pos_of / shared in ws, valid until ws's next call; weight is the
// caller's) and out is not written (hc_post_routed sums it where it reads it); elsewhere defer->yp = null and out
// holds the result.
// x may be null where x16 is given and moe_x16_suffices holds (an error otherwise, before any launch).
Status moe_cuda(const float* x, int64_t T, const int32_t* idx, const float* weight, int64_t topk,
                const MoeExpertsDevice& experts, const MoeSharedDevice* shared, float limit, float shared_limit,
                float* out, MoeWorkspace& ws, void* stream, MoePath path = MoePath::Exact,
                const uint16_t* x16 = nullptr, RoutedSum* defer = nullptr);
// Whether moe_cuda reads x16 alone for this call (x may then be null): the routed experts on the RS grouped path
// (its gather reads x16) and the shared expert, if any, through the caller's projection (MoePlan::
// shared_projection), which is then handed a null x for gate and up and must take x16 itself.
bool moe_x16_suffices(const MoeWorkspace& ws, const MoeExpertsDevice& ex, bool has_shared, int64_t T, int64_t topk,
                      MoePath path);

// The two halves of moe_cuda for a caller that computes the routed experts elsewhere (the expert dispatch of DP
// attention + EP, backends/cuda/parallel/expert_exchange_cuda.cpp), with moe_cuda's own code so the bits match:
// out[T, D] = the shared expert of x (moe_cuda's shared-expert GEMMs and precision for `path` and T), and
// out[t] = f[t] (ops/routed_sum.h: sum_k weight[t,k] * yp[pos_of[t,k]] in k order, pos_of -1 skipped, + shared[t]
// when not null; moe_cuda's combine kernel). ws must be reserved for T tokens and the shared expert's width.
Status moe_shared_cuda(const float* x, int64_t T, const MoeSharedDevice& shared, float shared_limit, float* out,
                       MoeWorkspace& ws, void* stream, MoePath path);
Status moe_combine_cuda(const RoutedSum& f, int64_t T, int64_t dim, float* out, void* stream);

// Second stream and fork/join events on which the fast path runs the shared expert concurrently with the routed
// experts (same kernels and buffers as in line, so the same bits; the join precedes the combine). Created by
// MoeWorkspace::reserve on the current device (stream/event creation never happens inside a captured forward);
// moe_cuda runs the shared expert in line when called on another device.
// DeepSeek-V4.1 official numerics (model/deepseek_v41_ffn.cpp, the official branch), with the official GEMMs
// (ops/gemm/gemm_official_cuda.h: x quantized per 1x32, bf16 out): every expert computes g, u = W1 x, W3 x,
// h = bf16(weight * silu(min(g, L)) * clamp(u, -L, L)), y = W2 h; out = bf16(the routed y summed in increasing expert
// id in fp32 + the shared expert's y (weight 1)). The shared expert takes the same limit. An expert id of -1
// (another rank's) is skipped.
Status moe_official_cuda(const float* x, int64_t T, const int32_t* idx, const float* weight, int64_t topk,
                         const MoeExpertsDevice& experts, const MoeSharedDevice* shared, float limit, float* out,
                         MoeWorkspace& ws, void* stream);

// The side stream is created at the device's greatest priority (bench/NOTES.md "Session 15 — MoE decode").
class MoeSideStream {
 public:
  MoeSideStream() = default;
  MoeSideStream(const MoeSideStream&) = delete;
  MoeSideStream& operator=(const MoeSideStream&) = delete;
  MoeSideStream(MoeSideStream&& o) noexcept { swap(o); }
  MoeSideStream& operator=(MoeSideStream&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~MoeSideStream() { release(); }
  Status create();                  // no-op when already created
  bool usable() const;              // created on the current device
  Status fork(void* main_stream);   // the side stream waits for the main stream's work so far
  Status join(void* main_stream);   // the main stream waits for the side stream's work so far
  void* stream() const { return stream_; }

 private:
  void release();
  void swap(MoeSideStream& o) noexcept;
  void *stream_ = nullptr, *fork_ = nullptr, *join_ = nullptr;
  int device_ = -1;
};

// Device scratch of moe_cuda, grown by reserve() (never inside moe_cuda, so a captured forward allocates nothing).
class MoeWorkspace {
 public:
  // Capacity for up to T tokens with topk experts each, hidden dim, expert (and shared) width inter, experts.
  Status reserve(int64_t T, int64_t topk, int64_t dim, int64_t inter, int64_t experts);
  // The caller's projection GEMM for the shared expert (MoeSharedGemm); empty: gemm_cuda at moe_shared_precision.
  void set_shared_gemm(MoeSharedGemm g) { shared_gemm_ = std::move(g); }
  // moe_cuda's plan (ops/moe/moe_plan.h plan_moe) for a call of T tokens with topk experts each on this workspace.
  MoePlan plan(const MoeExpertsDevice& ex, bool has_shared, int64_t T, int64_t topk, MoePath path) const;

  // Permutation of the last moe_cuda call (device pointers; layout in docs/kernels.md):
  const int32_t* offsets() const { return offsets_.data(); }        // [experts + 1]: expert e owns permuted rows
                                                                    //   [offsets[e], offsets[e+1])
  const int32_t* perm_token() const { return perm_token_.data(); }  // [T*topk]: token of permuted row p
                                                                    //   (rows < offsets[experts])
  const int32_t* pos_of() const { return pos_of_.data(); }          // [T*topk]: permuted row of assignment
                                                                    //   t*topk+k, -1 for an invalid expert id

 private:
  friend Status moe_cuda(const float*, int64_t, const int32_t*, const float*, int64_t, const MoeExpertsDevice&,
                         const MoeSharedDevice*, float, float, float*, MoeWorkspace&, void*, MoePath,
                         const uint16_t*, RoutedSum*);
  friend Status moe_shared_cuda(const float*, int64_t, const MoeSharedDevice&, float, float*, MoeWorkspace&, void*,
                                MoePath);
  friend Status moe_official_cuda(const float*, int64_t, const int32_t*, const float*, int64_t,
                                  const MoeExpertsDevice&, const MoeSharedDevice*, float, float*, MoeWorkspace&, void*);
  // x: the call's fp32 x, or its bf16 copy where moe_cuda runs without the fp32 one
  Status check_call(const void* x, int64_t T, const int32_t* idx, const float* weight, int64_t topk,
                    const MoeExpertsDevice& ex, const MoeSharedDevice* shared, float* out) const;
  int64_t T_ = 0, topk_ = 0, dim_ = 0, inter_ = 0, experts_ = 0;
  dsinfer::cuda::DeviceBuffer<int32_t> offsets_, perm_token_, pos_of_, active_;
  dsinfer::cuda::DeviceBuffer<int32_t> tiles_;  // grouped path: CTA row-tile list (moe_grouped_launch.h)
  // Fast path: h1_ holds the bf16 SwiGLU output [n + T, inter] (the shared expert's rows last), h3_ x's bf16 token
  // rows [T, dim]; the grouped paths keep their x rows in h3_ too (sized for all).
  dsinfer::cuda::DeviceBuffer<float> h1_, h3_, yp_, sh1_, sh3_, shy_;
  dsinfer::cuda::DeviceBuffer<float> wrow_;  // moe_official_cuda: the routing weight of each permuted row
  dsinfer::cuda::DeviceBuffer<uint16_t> sh16_;  // the shared SwiGLU's bf16 rounding for MoeSharedGemm's down call
  // CUTLASS path (moe_grouped_cutlass_launch.h): fp32 weight scales of E8M0 experts [3][experts][blocks], then the
  // grouped GEMM's argument arrays and workspace
  dsinfer::cuda::DeviceBuffer<uint8_t> cutlass_;
  size_t cutlass_scale_bytes_ = 0;
  MoeSideStream side_;
  MoeSharedGemm shared_gemm_;
};

}  // namespace dsinfer::ops::cuda
