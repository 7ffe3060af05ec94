// CudaForwardV4: the DeepSeek-V4 family's part of the CUDA runner (cuda_forward.h), op for op the CPU reference
// (model/deepseek_v4.cpp), weights in their storage formats (F32 / BF16 / FP8 block / FP4), fp32 activations.
//   forward_v4_cuda.cpp    loading (checkpoint or dummy weights, RoPE tables), scratch, GEMM / MoE choice, the
//                          per-step forward (embed, layers, head)
//   attention_v4_cuda.cpp  its attention block
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "backends/cuda/runner/cuda_forward.h"
#include "backends/cuda/weights/device_weights.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/gemm/gemm_lt_cuda.h"
#include "ops/mhc/mhc_launch.h"  // HcNormParams
#include "ops/moe/moe_cuda.h"
#include "ops/sparse_attention/sparse_attention_plan.h"  // SparsePrefillRoute, SparsePrefillKernel
#include "ops/state_view.h"

namespace dsinfer::backends {

class CudaForwardV4 final : public CudaForward {
 public:
  explicit CudaForwardV4(RunnerCore& core) : CudaForward(core) {
    // The MoE's shared expert at prefill through this forward's projection choice (ops/moe/moe_plan.h plan_moe).
    moe_ws_.set_shared_gemm([this](const float* x, const uint16_t* x16, int64_t M, int64_t K,
                                   const ops::cuda::DeviceWeight& w, float* y, int64_t N) {
      return gemm_x16(x, x16, M, K, w, y, N);
    });
  }

  const char* family() const override { return "v4"; }
  Status load(const runner::RunnerOptions& opts, ExpertSlots slots) override;
  int64_t weight_bytes() const override { return weights_.bytes(); }
  bool fp32_storage() const override { return weights_.fp32_storage(); }
  // `official` numerics outside exact mode, with RunnerOptions::fp8_state: DeepSeek's storage format
  // (attention_v4_cuda.cpp).
  int32_t state_elem_bytes() const override;
  Status reset_invalid_state() override;
  Status prepare(int64_t T, int64_t R, int64_t max_pos) override;
  Status run(const ops::StepDevice& st, const int32_t* rows, int64_t R) override;
  float* logits() const override { return s_.logits.data(); }
  Result<int32_t> reload_expert_slots(int64_t l, const std::vector<int32_t>& slots) override {
    return weights_.reload_slots(cfg_, l, slots, stream_);
  }
  const ops::cuda::DeviceWeight* embed_weight() const override { return &weights_.embed(); }
  const ops::cuda::DeviceWeight* head_weight() const override { return &weights_.head(); }

 private:
  // Scratch of the forward, sized for the largest step seen.
  struct Scratch {
    int64_t tokens = 0;
    cuda::DeviceBuffer<float> attn_ws, X, y, f, post, comb, cq, q, kv, ckv, cg, iq, iw, ikv, ig, scores, o, mid, router,
        rw, hid, logits;
    cuda::DeviceBuffer<int32_t> sel, ridx, centries;  // centries: the compressors' split emit (T + 1)
    cuda::DeviceBuffer<uint16_t> y16;  // hc_pre's y rounded to bf16, where x16_site says so
  };
  // FP8 state (layout_.fp8()): this step's kv rows in the storage format (the window keys of its own positions),
  // the compressors' entries before encoding and their rows, ring rows, sparse_attention_fp8's key lists and
  // split workspace (attention_v4_cuda.cpp).
  struct Fp8Scratch {
    cuda::DeviceBuffer<uint8_t> step_rows;
    cuda::DeviceBuffer<float> out, ws;
    cuda::DeviceBuffer<int32_t> rows, ring, ring_len, step, step_len, comp, comp_len, pos32;
  };
  // Shape facts of the current step that size the attention (set by prepare()).
  struct StepShape {
    int64_t max_pos = 0;  // largest position (fixed-shape steps: max_model_len - 1)
    int64_t visible = 0;  // compressed entries visible to the indexer at max_pos
  };
  // The kernel-choice plans' mode (ops/kernel_mode.h): exact, batch-invariant or fast.
  ops::KernelMode kernel_mode() const override {
    if (exact_) return ops::KernelMode::kExact;
    return batch_invariant_ ? ops::KernelMode::kBatchInvariant : ops::KernelMode::kFast;
  }
  MoeLayerView moe_layer(int64_t l) const override {
    const DeviceLayer& L = weights_.layer(l);
    const float limit = float(cfg_.swiglu_limit);
    return {&L.experts, L.has_shared ? &L.shared : nullptr, limit, num_.shared_expert_clamp ? limit : 0.0f};
  }
  int64_t attention_splits(io::AttnType type, int64_t m, int64_t T, int64_t max_pos) const;
  // y16: hc_pre_ffn's output rounded to bf16 (x16_site), or null. f_sum.yp set: the MoE left its output undone as
  // f_sum describes it (moe_cuda's defer: one rank, the whole step in one call) and s_.f is not written; hc_post_ffn
  // then sums it (hc_post_routed).
  // y: hc_pre_ffn's fp32 output, null where y16_only elided it.
  Status ffn(int64_t l, const int32_t* tokens, int64_t T, const float* y, const uint16_t* y16, ops::RoutedSum& f_sum);
  Status gemm(const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, float* y, int64_t ldy,
              bool acc);
  // Whether gemm would run this call on the cuBLASLt engine's bf16 matmul (plan_gemm_call's lt, no skinny kernel; a
  // BF16 weight, or FP8 on the widened route at this M), with the weight prepared: the calls that hand bf16 over
  // (gemm_bf16_out, GemmLtEngine::gemm_bf16_in / gemm_same_x) ask it first, so they run only where they apply.
  bool lt_bf16_call(const ops::cuda::DeviceWeight& w, int64_t M);
  // y16 (bf16, row stride ldy) = x . W^T where lt_bf16_call: done = true. Elsewhere (or should the engine refuse it)
  // nothing is launched, done = false, and the caller takes gemm.
  Status gemm_bf16_out(const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, uint16_t* y16,
                       int64_t ldy, bool& done);
  // gemm without accumulation where x16 (x rounded to bf16, row stride ldx) may replace x: where lt_bf16_call, the
  // engine's matmul reads x16 (GemmLtEngine::gemm_bf16_in: gemm's bits, without gemm's rounding pass over x); else,
  // or x16 null, gemm on x (x null there: an error, nothing launched).
  Status gemm_x16(const float* x, const uint16_t* x16, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w,
                  float* y, int64_t ldy);
  // Whether an mHC site's hc_pre writes its output rounded to bf16 too (HcNormParams::y_bf16 into s_.y16) for the
  // projections that read it, gemm_x16 / gemm_segments: where the site's first projection w runs a bf16 matmul at
  // this T (lt_bf16_call: FP8 weights on the widened route from kGemmLtWideMinM rows), so that the consumers skip
  // their rounding passes over y (4-5 a layer at prefill, ~35 us each at 4,096 tokens of V4-Flash).
  // DSINFER_PREFILL_X16=0 turns it off (the A/B).
  bool x16_site(const ops::cuda::DeviceWeight& w, int64_t T);
  // Whether every reader of layer l's hc_pre output y (the attention's site, or with ffn the FFN's) takes its bf16
  // copy at this T, so that hc_pre need not store y's fp32 values (HcNormParams::y_bf16_only; about 64 MB a site at
  // 4,096 tokens of V4-Flash): the attention's projections (wq_a + wkv, the compressor's and the indexer's) each on
  // a bf16 matmul in gemm_segments' per-segment calls; the router and the shared expert's gate and up likewise, and
  // the routed experts on one rank in one moe_cuda call whose plan reads x16 alone (moe_x16_suffices). The readers
  // then get a null y, so that a route that would read it fails by name instead of reading stale values.
  bool y16_only(int64_t l, int64_t T, bool ffn);
  // Several projections of the same x: one skinny launch where ops/gemm/gemm_plan.h plan_gemm_segments says each
  // would run the skinny kernel alone (the same bits), else gemm (then scale_cuda where out_scale != 1) per segment;
  // x16 (optional): x rounded to bf16, row stride ldx, read by the segments on a bf16 matmul (gemm_x16); x may then
  // be null where every segment takes x16 (y16_only).
  Status gemm_segments(const float* x, int64_t M, int64_t ldx, const ops::cuda::GemmSegment* segs, int count,
                       const uint16_t* x16 = nullptr);
  Status gemm_grouped(const float* x, int64_t M, int64_t ldx, int64_t xg, const ops::cuda::DeviceWeight& w,
                      int64_t groups, float* y, int64_t ldy, int64_t yg);
  Status gemm_grouped_lt(const float* x, int64_t M, int64_t ldx, int64_t xg, const ops::cuda::DeviceWeight& w,
                         int64_t groups, float* y, int64_t ldy, int64_t yg);
  Status moe(const float* x, int64_t T, const int32_t* idx, const float* w, int64_t k, const DeviceLayer& L,
             const uint16_t* x16, ops::RoutedSum* defer);
  // The mHC parameters of layer l's attention site (ffn false) or FFN site at a T-token step: the layer's weights,
  // the deferred coefficients (defer), the bf16 copy of y where x16_site / y16_only ask for it.
  ops::cuda::HcNormParams site_params(int64_t l, bool ffn, int64_t T, bool defer);
  // A site's hc_post on s_.X: f a buffer, or (routed) the MoE's output described. next: the parameters of the site
  // that follows (null after the last layer); where f is a buffer and hc_post_mix_wanted, next's mixing reduction
  // runs in the same pass into s_.y and next->premixed is set, so that its hc_pre_norm runs only the finalize.
  Status post_site(ops::cuda::HcNormParams* next, int64_t T, const float* f, const ops::RoutedSum* routed);
  // A site's deferred coefficients (HcNormParams::defer_comb): hc_comb on hc_side_, forked after its hc_pre.
  Status comb_on_side(const ops::cuda::HcNormParams& hp, int64_t T);
  // After the site's sublayer: the main stream joins hc_side_ (whatever the sublayer returned, so a captured forward
  // never ends unjoined) before hc_post reads post / comb; the sublayer's error first.
  Status join_comb(bool defer, Status sublayer);
  // attention_v4_cuda.cpp; y: hc_pre_attn's fp32 output (null where y16_only elided it), y16: its bf16 rounding
  // (x16_site), or null
  Status attention(int64_t l, const ops::StepDevice& st, const float* y, const uint16_t* y16);
  // wq_b into s_.q, or (q16_in) the split path's bf16 q into split_q16() (attention_v4_cuda.cpp).
  Status query_projection(int64_t l, int64_t T, const HeadGroups& hg, bool tp, bool split, bool& q16_in);
  // wo_a, wo_b (TP: the exact gather between); o16: the split path's bf16 o (null: s_.o)
  Status output_projection(int64_t l, int64_t T, const HeadGroups& hg, const uint16_t* o16 = nullptr);
  // The split-block sparse prefill kernel's path for layer l of a T-token step (attention_v4_cuda.cpp; the rules:
  // ops/sparse_attention/sparse_attention_plan.h plan_sparse_prefill_split_step), and wo_a on its bf16 o.
  bool split_prefill(int64_t l, int64_t T, const ops::LayerStateView& view, bool all_heads) const;
  // Where that path's bf16 tensors live ([T, heads, head_dim] each, half of an fp32 buffer's bytes), in scratch idle
  // while they do: q in s_.o (its fp32 output is not written on that path; the wo_a fallback's fp32 o reuses it once
  // the attention has read q), o in s_.q (the fp32 q is dead once the norm + RoPE has read it).
  uint16_t* split_q16() { return reinterpret_cast<uint16_t*>(s_.o.data()); }
  uint16_t* split_o16() { return reinterpret_cast<uint16_t*>(s_.q.data()); }
  Status gemm_grouped_bf16(const uint16_t* x, int64_t M, int64_t ldx, int64_t xg, const ops::cuda::DeviceWeight& w,
                           int64_t groups, float* y, int64_t ldy, int64_t yg);
  // The FP8 state's parts of attention() (attention_v4_cuda.cpp): scratch, entry encoding, attention, ring write.
  Status prepare_fp8(int64_t T, int64_t max_pos);
  int64_t fp8_comp_stride(int64_t l, int64_t max_pos) const;
  int64_t fp8_splits(int64_t l, int64_t T, int64_t max_pos) const;
  Status encode_entries(int64_t l, const ops::LayerStateView& view, int64_t T, bool indexer);
  Status attend_fp8(int64_t l, const ops::StepDevice& st, const ops::LayerStateView& view, const int32_t* selected,
                    int64_t h0, int64_t heads, bool split, bool q_norm);
  Status ring_write_fp8(int64_t l, const ops::StepDevice& st, const ops::LayerStateView& view);

  DeviceWeights weights_;
  cuda::DeviceBuffer<float> inv_main_, inv_comp_;  // RoPE inverse frequencies (main / compressed layers)
  Scratch s_;
  Fp8Scratch f8_;
  StepShape shape_;
  ops::cuda::MoeWorkspace moe_ws_;
  ops::cuda::MoeSideStream hc_side_;  // decode steps: the mHC sites' post / comb (comb_on_side)
  // The GEMM environment overrides (DSINFER_CUBLASLT*), read once by load() (a bad value fails the runner's
  // creation); cuBLASLt runs the fast path's dense projections where plan_gemm_call says so.
  ops::cuda::GemmSettings gemm_settings_;
  std::optional<ops::cuda::GemmLtEngine> lt_;  // made by load() with gemm_settings_.lt_activations / lt_stack
  // DSINFER_GEMM_FP8_SKINNY (opt-in): the FP8 skinny kernel's workspace, allocated by load() when the setting is on.
  cuda::DeviceBuffer<uint8_t> fp8sk_ws_;
  // DSINFER_SPARSE_PREFILL (ops/sparse_attention/sparse_attention_plan.h), read once by load(): attend_fp8's route.
  ops::cuda::SparsePrefillRoute sparse_prefill_ = ops::cuda::SparsePrefillRoute::kAuto;
  // DSINFER_SPARSE_PREFILL_KERNEL (the same header), read once by load(): split_prefill's kernel input.
  ops::cuda::SparsePrefillKernel sparse_prefill_kernel_ = ops::cuda::SparsePrefillKernel::kSplit;
};

}  // namespace dsinfer::backends
