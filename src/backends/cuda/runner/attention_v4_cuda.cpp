// CudaForwardV4's attention block of one layer (model/deepseek_v4.cpp attention()): q / kv projections with norms
// and RoPE, the compressor and (CSA) the indexer, sparse attention over window + compressed entries, the ring
// write and the grouped output projection. Sliding layers skip the compressor, HCA layers the indexer.
// FP8 state (layout_.fp8(), `official` numerics, docs/decisions.md issue 31): the same ops, but every key row lives in
// DeepSeek's storage format (ops/kv_format): the compressors hand their entries to kv_encode / idx_encode, the indexer
// decodes its keys, this step's kv rows are encoded into a scratch cache, and attention is sparse_attention_fp8 over
// three key lists (ring rows, this step's rows, compressed entries) in every step (prefill too), so every key a token
// reads went through the format's rounding (the NoPE channels equal the simulation's; the RoPE channels are bf16).
#include <algorithm>
#include <cmath>

#include "backends/cuda/runner/forward_v4.h"
#include "backends/cuda/runner/tensor_parallel_parts.h"
#include "model/state_pool.h"
#include "ops/compressor/compressor_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/kv_format/kv_format_cuda.h"
#include "ops/moe/moe_exchange_cuda.h"  // widen_rows_cuda: the split path's o back to fp32 where wo_a's engine refuses
#include "ops/quant_sim/quant_sim_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_fp8_cuda.h"
#include "ops/sparse_attention/sparse_attention_plan.h"
#include "ops/sparse_attention/sparse_attention_prefill_cuda.h"

namespace dsinfer::backends {

using namespace ops::cuda;
using io::AttnType;

namespace {
// The query's norm + RoPE (qp.heads may be 0: a TP rank without heads), the window kv's norm + RoPE and its FP8
// simulation of the first fp8_nope channels (0: none; blocks of 64) in one launch: was three (q_norm_rope,
// kv_norm_rope, kv_fp8_sim), the same bits (ops/rope/rope.cu). A NoPE width the fused simulation cannot take (not
// a multiple of 4) keeps the separate fp8_block_sim. q16 set: the query's result as bf16 there, q only read (with
// qp.in_bf16 the query is read from q16 too, in place, and q is not touched).
Status q_kv_norm_rope(HeadNormRopeParams qp, float* q, uint16_t* q16, HeadNormRopeParams kp, float* kv,
                      int64_t fp8_nope, const int64_t* pos, void* stream) {
  const bool fuse = fp8_nope % 4 == 0;
  if (fuse) kp.fp8_dims = fp8_nope;
  qp.out_bf16 = q16;
  qp.pos_ready = kp.pos_ready = true;  // the step's positions (cuda/pdl.cuh): the angles before the PDL wait
  if (qp.heads > 0) DSI_RETURN_IF_ERROR(head_norm_rope_pair(qp, q, kp, kv, pos, stream));
  else DSI_RETURN_IF_ERROR(head_norm_rope(kp, kv, pos, stream));
  return fuse ? Status::ok() : fp8_block_sim(kv, kp.rows, kp.dim, fp8_nope, 64, stream);
}

// The indexer query's RoPE and (fp4) its Hadamard + FP4 simulation (blocks of 32) in one launch where the vector
// fits a warp's step (index_head_dim a power of two <= 128, as V4's 128; the same bits as hadamard_fp4_sim), else
// the separate simulation after it (was always two launches: indexer_q_rope, indexer_fp4_sim).
Status index_q_rope(HeadNormRopeParams rp, float* iq, bool fp4, const int64_t* pos, void* stream) {
  const bool fuse = fp4 && rp.dim <= 128 && (rp.dim & (rp.dim - 1)) == 0;
  if (fuse) rp.fp4_block = 32;
  rp.pos_ready = true;  // the step's positions (cuda/pdl.cuh)
  DSI_RETURN_IF_ERROR(head_norm_rope(rp, iq, pos, stream));
  return fp4 && !fuse ? hadamard_fp4_sim(iq, rp.rows * rp.heads, rp.dim, 32, stream) : Status::ok();
}
}  // namespace

Status CudaForwardV4::attention(int64_t l, const ops::StepDevice& st, const float* y, const uint16_t* y16) {
  const DeviceLayer& L = weights_.layer(l);
  const AttnType type = cfg_.layer_types[size_t(l)];
  const int64_t T = st.T, D = cfg_.hidden_size, H = cfg_.num_attention_heads, hd = cfg_.head_dim, qr = cfg_.q_lora_rank;
  const int64_t rd = cfg_.qk_rope_head_dim, nope = hd - rd, m = cfg_.ratio(l);
  const float eps = float(cfg_.rms_norm_eps), af = float(cfg_.rope_for_layer(l).attention_factor);
  const float* inv = (type == AttnType::Sliding ? inv_main_ : inv_comp_).data();
  const model::StatePool pool{&layout_, slots_.as<float>(), blocks_.as<float>()};
  const ops::LayerStateView view = model::layer_view(pool, l);
  float *cq = s_.cq.data(), *q = s_.q.data(), *kv = s_.kv.data();
  // Main (d = head_dim) and indexer (d = index_head_dim) compressors share everything but these.
  auto compressor_params = [&](bool overlap, int64_t d, bool indexer, const float* ape, const float* norm) {
    CompressorCudaParams p;
    p.m = m;
    p.overlap = overlap;
    p.d = d;
    p.indexer = indexer;
    p.ape = ape;
    p.norm_w = norm;
    p.eps = eps;
    p.rope_dim = rd;
    p.inv_freq = inv;
    p.attention_factor = af;
    p.entries = s_.centries.data();  // the split emit at prefill sizes (compressor_split_emit)
    return p;
  };
  // TP attention (tensor_parallel_cuda.cpp): this shard's query heads [h0, h1) of its output groups; Hl = H
  // outside TP. The rest of the block up to the attention (the shared latent, compressors, indexer, the state) is
  // every rank's.
  const HeadGroups hg = head_groups();
  const int64_t h0 = hg.h0, Hl = hg.h1 - hg.h0;
  const bool tp = Hl != H || hg.g1 - hg.g0 != cfg_.o_groups;
  // wq_a and wkv of the same y: one launch where allowed (fast mode: streaming, M <= 128; the same bits either way,
  // forward_v4_cuda.cpp gemm_segments), else two; the op "wq_a" holds both.
  const GemmSegment qkv[2] = {{L.wq_a, cq, qr}, {L.wkv, kv, hd}};
  DSI_OP("wq_a", l, gemm_segments(y, T, D, qkv, 2, y16));
  DSI_OP("q_norm", l, rmsnorm(cq, T, qr, L.q_norm, eps, cq, stream_));
  const bool split = split_prefill(l, T, view, !tp && Hl > 0);  // the split-block prefill kernel's path (bf16 q, o)
  bool q16_in = false;  // wq_b wrote the split path's bf16 q itself (the norm + RoPE then works on it in place)
  if (Hl > 0) DSI_OP("wq_b", l, query_projection(l, T, hg, tp, split, q16_in));
  // Where wq_b wrote the split path's raw bf16 query, the split kernel normalises it itself (plan_split_q_norm; the
  // same bits) and q_norm_rope takes the kv row alone.
  const bool q_norm_in_attention = split && q16_in && plan_split_q_norm();
  HeadNormRopeParams qp{T, q_norm_in_attention ? 0 : Hl, hd, HeadNorm::Unweighted, nullptr, eps, rd, inv, af, false};
  qp.in_bf16 = q16_in;
  const HeadNormRopeParams kp{T, 1, hd, HeadNorm::Weighted, L.kv_norm, eps, rd, inv, af, false};
  DSI_OP("q_norm_rope", l, q_kv_norm_rope(qp, q, split ? split_q16() : nullptr, kp, kv, num_.kv_fp8_sim ? nope : 0,
                                          st.pos, stream_));

  if (type != AttnType::Sliding) {
    const int64_t c = type == AttnType::CSA ? 2 : 1;
    // The compressor's and (CSA) the indexer's projections of y (the head weights times 1/sqrt(heads)): one launch
    // where allowed, the same bits (forward_v4_cuda.cpp gemm_segments); on CSA layers this op includes indexer_proj.
    const int64_t Hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
    const GemmSegment ys[5] = {{L.comp_wkv, s_.ckv.data(), c * hd}, {L.comp_wgate, s_.cg.data(), c * hd},
                               {L.idx_wproj, s_.iw.data(), Hi, float(1.0 / std::sqrt(double(Hi)))},
                               {L.idx_wkv, s_.ikv.data(), 2 * di}, {L.idx_wgate, s_.ig.data(), 2 * di}};
    DSI_OP("compressor_proj", l, gemm_segments(y, T, D, ys, type == AttnType::CSA ? 5 : 2, y16));
    CompressorCudaParams cp = compressor_params(type == AttnType::CSA, hd, false, L.comp_ape, L.comp_norm);
    cp.sim = num_.kv_fp8_sim ? CompressorSim::Fp8Nope : CompressorSim::None;
    cp.fp8_dims = nope;
    if (view.fp8) {
      cp.out = f8_.out.data();
      cp.out_rows = f8_.rows.data();
    }
    DSI_OP("compressor", l, compressor_step(st, view, cp, s_.ckv.data(), s_.cg.data(), stream_));
    if (view.fp8) DSI_OP("compressor", l, encode_entries(l, view, T, false));
  }
  const int32_t* selected = nullptr;
  if (type == AttnType::CSA) {
    const int64_t Hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
    float *iq = s_.iq.data(), *iw = s_.iw.data();
    DSI_OP("indexer_q", l, gemm(cq, T, qr, L.idx_wq_b, iq, Hi * di, false));
    const HeadNormRopeParams rp{T, Hi, di, HeadNorm::None, nullptr, eps, rd, inv, af, false};
    DSI_OP("indexer_q_rope", l, index_q_rope(rp, iq, num_.indexer_fp4_sim, st.pos, stream_));
    CompressorCudaParams ip = compressor_params(true, di, true, L.idx_ape, L.idx_norm);
    ip.sim = num_.indexer_fp4_sim ? CompressorSim::HadamardFp4 : CompressorSim::None;
    if (view.fp8) {
      ip.out = f8_.out.data();
      ip.out_rows = f8_.rows.data();
    }
    DSI_OP("indexer_compressor", l, compressor_step(st, view, ip, s_.ikv.data(), s_.ig.data(), stream_));
    if (view.fp8) DSI_OP("indexer_compressor", l, encode_entries(l, view, T, true));
    IndexerCudaParams xp{Hi, di, m, cfg_.index_topk};
    xp.fast = kernel_mode() == ops::KernelMode::kFast;  // prefill scores on wgmma (their own last bits)
    DSI_OP("indexer_topk", l, indexer_topk(st, view, xp, iq, iw, std::max<int64_t>(shape_.visible, 1), s_.scores.data(),
                                           s_.sel.data(), stream_));
    selected = s_.sel.data();
  }
  float* o = s_.o.data();
  if (view.fp8) {
    if (Hl > 0) DSI_OP("sparse_attention", l, attend_fp8(l, st, view, selected, h0, Hl, split, q_norm_in_attention));
    DSI_OP("ring_write", l, ring_write_fp8(l, st, view));
  } else {
    SparseAttentionCudaParams ap;
    ap.heads = Hl;
    ap.head_dim = hd;
    ap.scale = float(1.0 / std::sqrt(double(hd)));
    ap.sinks = L.sink + h0;
    ap.window = cfg_.sliding_window;
    ap.m = type == AttnType::Sliding ? 0 : m;
    ap.topk_idx = selected;
    ap.topk = cfg_.index_topk;
    ap.rope_dim = rd;  // the inverse RoPE of the output is fused into the kernel's final write
    ap.inv_freq = inv;
    ap.attention_factor = af;
    ap.num_splits = attention_splits(type, m, T, shape_.max_pos);  // workspace sized by ensure_scratch
    // Batch-invariant: every token's keys in fixed chunks, always combined (both kernels). Fast mode: the bf16
    // tensor-core kernel (q, k, p rounded to bf16; its own split count); exact mode keeps the fp32 kernel
    // (sparse_attention_plan.h).
    ap.split_keys = sparse_attention_split_keys(kernel_mode());
    ap.tensor_cores = sparse_attention_tensor_cores(kernel_mode(), hd);
    if (Hl > 0) DSI_OP("sparse_attention", l, sparse_attention(st, view, ap, q, kv, o, s_.attn_ws.data(), stream_));
    DSI_OP("ring_write", l, ring_write(st, view, kv, stream_));
  }
  return output_projection(l, T, hg, split ? split_o16() : nullptr);
}

// wq_b of this rank's query heads into s_.q (fp32). TP: this rank's rows of wq_b, called so that they run the whole
// weight's kernel (tensor_parallel_parts.h). On the split path with session 27's query (SparsePrefillKernel::kSplit),
// the matmul writes the bf16 q into split_q16() itself where the engine runs it on a bf16 matmul (q16_in = true).
Status CudaForwardV4::query_projection(int64_t l, int64_t T, const HeadGroups& hg, bool tp, bool split, bool& q16_in) {
  const DeviceLayer& L = weights_.layer(l);
  const int64_t hd = cfg_.head_dim, qr = cfg_.q_lora_rank, Hl = hg.h1 - hg.h0;
  const float* cq = s_.cq.data();
  float* q = s_.q.data();
  q16_in = false;
  if (tp) {
    DSI_ASSIGN_OR_RETURN(const tp::PartGemm p, tp::rows_part(L.wq_b, hg.h0 * hd, hg.h1 * hd,
                                                             kernel_mode() == ops::KernelMode::kBatchInvariant,
                                                             device_.multiprocessors));
    if (p.groups == 1) return gemm(cq, T, qr, p.w, q, Hl * hd, false);
    return gemm_grouped(cq, T, qr, p.x_stride, p.w, p.groups, q, Hl * hd, p.y_stride);
  }
  if (split && sparse_prefill_kernel_ == SparsePrefillKernel::kSplit)
    DSI_RETURN_IF_ERROR(gemm_bf16_out(cq, T, qr, L.wq_b, split_q16(), Hl * hd, q16_in));
  return q16_in ? Status::ok() : gemm(cq, T, qr, L.wq_b, q, Hl * hd, false);
}

// Whether layer l of a T-token step takes the split-block prefill kernel's path (sparse_attention_plan.h
// plan_sparse_prefill_split_step has the rules): the kernel asked for (DSINFER_SPARSE_PREFILL_KERNEL, read by
// load()), the fast mode, the layer's FP8 split plan at one split, the FP8 state, the step on the prefill op, all
// heads here (all_heads: no TP attention), wo_a's plan for the step on the batched bf16 call. Taken, attention()
// has the query as bf16 in split_q16() (wq_b's raw output, which the split kernel normalises itself, or
// q_kv_norm_rope's), attend_fp8 run the split kernel from it into split_o16(), and output_projection hand that to
// wo_a's batched call as its bf16 x (gemm_grouped_bf16).
bool CudaForwardV4::split_prefill(int64_t l, int64_t T, const ops::LayerStateView& view, bool all_heads) const {
  SparsePrefillSplitStep s;
  s.kernel = sparse_prefill_kernel_;
  s.mode = kernel_mode();
  s.fp8_state = view.fp8;
  s.num_splits = view.fp8 ? fp8_splits(l, T, shape_.max_pos) : 0;
  s.prefill_op = plan_sparse_attention_fp8_prefill(T, sparse_prefill_);
  s.all_heads = all_heads;
  s.wo_a_bf16 = plan_gemm_grouped_call(weights_.layer(l).wo_a, cfg_.o_groups, T, kernel_mode(), gemm_settings_).lt;
  return plan_sparse_prefill_split_step(s);
}

// wo_a (grouped) and wo_b into s_.f. TP: this shard's groups' columns of wo_a's output, zero elsewhere, summed over
// the ranks (an exact gather: tensor_parallel_cuda.cpp), then wo_b whole, as one rank runs it. o16: the split path's
// bf16 o (all groups here: split_prefill refuses TP), read by wo_a's batched call as its bf16 x.
Status CudaForwardV4::output_projection(int64_t l, int64_t T, const HeadGroups& hg, const uint16_t* o16) {
  const DeviceLayer& L = weights_.layer(l);
  const int64_t H = cfg_.num_attention_heads, hd = cfg_.head_dim, D = cfg_.hidden_size;
  const int64_t G = cfg_.o_groups, r = cfg_.o_lora_rank, gin = H * hd / G, ng = hg.g1 - hg.g0;
  if (o16) {
    if (ng != G) return Status::error("wo_a: the split path's bf16 o needs every output group on this rank");
    // Session 27's split path: wo_a's output as bf16 (wo_b's x, which wo_b's widened route rounds to bf16 itself),
    // read by wo_b as it is; where the engine refuses either half, the fp32 route (a bf16 mid widened back into s_.o,
    // free once the attention has read q).
    uint16_t* mid16 = reinterpret_cast<uint16_t*>(s_.mid.data());
    bool bf16_mid = false;
    auto wo_a = [&]() -> Status {
      bf16_mid = sparse_prefill_kernel_ == SparsePrefillKernel::kSplit &&
                 lt_->gemm_grouped_bf16_out(o16, T, H * hd, gin, L.wo_a, G, mid16, G * r, r, stream_).is_ok();
      return bf16_mid ? Status::ok() : gemm_grouped_bf16(o16, T, H * hd, gin, L.wo_a, G, s_.mid.data(), G * r, r);
    };
    auto wo_b = [&]() -> Status {
      if (lt_bf16_call(L.wo_b, T) && lt_->gemm_bf16_in(mid16, T, G * r, L.wo_b, s_.f.data(), D, false, stream_).is_ok())
        return Status::ok();
      DSI_RETURN_IF_ERROR(widen_rows_cuda(mid16, T, G * r, WireType::kBf16, s_.o.data(), stream_));
      return gemm(s_.o.data(), T, G * r, L.wo_b, s_.f.data(), D, false);
    };
    DSI_OP("wo_a", l, wo_a());
    if (bf16_mid) {
      DSI_OP("wo_b", l, wo_b());
      return Status::ok();
    }
  } else if (ng == G) {
    DSI_OP("wo_a", l, gemm_grouped(s_.o.data(), T, H * hd, gin, L.wo_a, G, s_.mid.data(), G * r, r));
  } else {
    DSI_RETURN_IF_ERROR(clear_head_groups(s_.mid.data(), T, G * r));
    if (ng > 0) {
      // This rank's groups of wo_a, called so that they run the whole weight's kernel (tensor_parallel_parts.h).
      DSI_ASSIGN_OR_RETURN(const tp::PartGemm p, tp::groups_part(L.wo_a, G, hg.g0, hg.g1, gin));
      DSI_OP("wo_a", l, gemm_grouped(s_.o.data(), T, (hg.h1 - hg.h0) * hd, p.x_stride, p.w, p.groups,
                                     s_.mid.data() + hg.g0 * r, G * r, p.y_stride));
    }
    DSI_RETURN_IF_ERROR(gather_head_groups(s_.mid.data(), T, G * r, l));
  }
  DSI_OP("wo_b", l, gemm(s_.mid.data(), T, G * r, L.wo_b, s_.f.data(), D, false));
  return Status::ok();
}

// wo_a on the split path: the cuBLASLt engine's batched call on the bf16 o as it is (split_prefill checked that wo_a's
// plan is that call). Should the engine refuse it (no algorithm, no cuBLASLt 12.9; nothing launched, y untouched),
// o is widened exactly into s_.o and gemm_grouped's fp32 route runs on it (its kernels round it back to the same bf16
// values or read them exactly).
Status CudaForwardV4::gemm_grouped_bf16(const uint16_t* x, int64_t M, int64_t ldx, int64_t xg, const DeviceWeight& w,
                                        int64_t groups, float* y, int64_t ldy, int64_t yg) {
  if (lt_->gemm_grouped_bf16(x, M, ldx, xg, w, groups, y, ldy, yg, stream_).is_ok()) return Status::ok();
  DSI_RETURN_IF_ERROR(widen_rows_cuda(x, M, ldx, WireType::kBf16, s_.o.data(), stream_));
  return gemm_grouped(s_.o.data(), M, ldx, xg, w, groups, y, ldy, yg);
}

// ---------------------------------------------------------------------------------------------- FP8 state
int32_t CudaForwardV4::state_elem_bytes() const {
  const bool fits = cfg_.head_dim == ops::kKvDim && cfg_.qk_rope_head_dim == ops::kKvRope &&
                    cfg_.index_head_dim == ops::kIdxDim;
  const bool official = num_.kv_fp8_sim && num_.indexer_fp4_sim;
  return fits && official && !exact_ && core_.fp8_state_ ? cache::kFp8StateElem : 4;
}

// randomize_state filled the pools with random floats: FP8 rows made valid (no NaN codes, bounded scales).
Status CudaForwardV4::reset_invalid_state() {
  if (!layout_.fp8()) return Status::ok();
  const int64_t slots = int64_t(slots_.bytes()) / layout_.slot_bytes;
  const int64_t blocks = int64_t(blocks_.bytes()) / layout_.block_bytes;
  for (int64_t l = 0; l < int64_t(layout_.layers.size()); ++l) {
    const cache::LayerState& ls = layout_.layers[size_t(l)];
    DSI_RETURN_IF_ERROR(kv_sanitize(slots_.data(), slots * layout_.ring_rows, layout_.ring_pages(l), false, stream_));
    if (ls.entries_offset >= 0)
      DSI_RETURN_IF_ERROR(kv_sanitize(blocks_.data(), blocks * ls.entries_per_block, layout_.entry_pages(l), false,
                                      stream_));
    if (ls.index_keys_offset >= 0)
      DSI_RETURN_IF_ERROR(kv_sanitize(blocks_.data(), blocks * ls.entries_per_block, layout_.index_key_pages(l), true,
                                      stream_));
  }
  return Status::ok();
}

// Entries a token's compressed-key list holds: CSA its top-k, HCA every entry visible at max_pos, sliding none.
int64_t CudaForwardV4::fp8_comp_stride(int64_t l, int64_t max_pos) const {
  const AttnType type = cfg_.layer_types[size_t(l)];
  if (type == AttnType::CSA) return cfg_.index_topk;
  if (type == AttnType::HCA) return std::max<int64_t>((max_pos + 1) / std::max<int64_t>(cfg_.ratio(l), 1), 1);
  return 0;
}

// Split count (sparse_attention_plan.h): the plan's outside batch-invariant mode; one split there (each token's
// keys in one block, in list order: independent of the batch). The plan's kernel for the same step: fp8_kernel.
int64_t CudaForwardV4::fp8_splits(int64_t l, int64_t T, int64_t max_pos) const {
  if (batch_invariant_) return 1;
  return plan_sparse_attention_fp8_decode(kernel_mode(), T, cfg_.num_attention_heads,
                                          cfg_.sliding_window + fp8_comp_stride(l, max_pos), device_.multiprocessors,
                                          sparse_decode64_enabled())
      .num_splits;
}

Status CudaForwardV4::prepare_fp8(int64_t T, int64_t max_pos) {
  if (!layout_.fp8()) return Status::ok();
  const size_t t = size_t(T), W = size_t(cfg_.sliding_window);
  int64_t comp = 1, ws = 0;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    comp = std::max(comp, fp8_comp_stride(l, max_pos));
    ws = std::max(ws, sparse_attention_fp8_workspace_floats(T, cfg_.num_attention_heads, fp8_splits(l, T, max_pos)));
  }
  // The prefill op's staging (sparse_attention_prefill_cuda.h), after the split partials, where the plan takes it.
  int64_t staging = 0;
  if (plan_sparse_attention_fp8_prefill(T, sparse_prefill_)) {
    const int64_t slots = int64_t(slots_.bytes()) / layout_.slot_bytes;
    const int64_t blocks = int64_t(blocks_.bytes()) / layout_.block_bytes;
    for (int64_t l = 0; l < int64_t(layout_.layers.size()); ++l) {
      const int64_t cs = fp8_comp_stride(l, max_pos);
      const int64_t entries = cs > 0 ? blocks * layout_.layers[size_t(l)].entries_per_block : 0;
      const int64_t rows[3] = {slots * layout_.ring_rows, T, entries};
      const int64_t strides[3] = {int64_t(W), int64_t(W), cs};
      staging = std::max(staging, sparse_attention_prefill_staging_bytes(T, rows, strides));
    }
  }
  DSI_RETURN_IF_ERROR(grow(f8_.step_rows, size_t(ops::kv_cache_bytes(T)), "FP8 step rows"));
  DSI_RETURN_IF_ERROR(grow(f8_.out, t * size_t(cfg_.head_dim), "FP8 entries"));
  DSI_RETURN_IF_ERROR(grow(f8_.ws, size_t(ws) + 64 + size_t(staging / 4), "FP8 attention workspace"));
  DSI_RETURN_IF_ERROR(grow(f8_.rows, t, "FP8 rows"));
  DSI_RETURN_IF_ERROR(grow(f8_.ring, t * W, "FP8 ring keys"));
  DSI_RETURN_IF_ERROR(grow(f8_.step, t * W, "FP8 step keys"));
  DSI_RETURN_IF_ERROR(grow(f8_.comp, t * size_t(comp), "FP8 compressed keys"));
  DSI_RETURN_IF_ERROR(grow(f8_.ring_len, t, "FP8 key counts"));
  DSI_RETURN_IF_ERROR(grow(f8_.step_len, t, "FP8 key counts"));
  DSI_RETURN_IF_ERROR(grow(f8_.comp_len, t, "FP8 key counts"));
  return grow(f8_.pos32, t, "FP8 positions");
}

// The compressor's entries of this step (f8_.out, rows f8_.rows: -1 where a token closed no window) into the
// layer's entry (or indexer-key) pages.
Status CudaForwardV4::encode_entries(int64_t l, const ops::LayerStateView& view, int64_t T, bool indexer) {
  const int64_t rows = int64_t(blocks_.bytes()) / layout_.block_bytes * view.entries_per_block;
  if (indexer)
    return idx_encode(f8_.out.data(), T, cfg_.index_head_dim, f8_.rows.data(), blocks_.data(), rows, stream_,
                      layout_.index_key_pages(l));
  return kv_encode(f8_.out.data(), T, cfg_.head_dim, f8_.rows.data(), blocks_.data(), rows, stream_,
                   layout_.entry_pages(l));
}

// This step's kv rows into the step cache, the three key lists, then sparse_attention_fp8 (fused sink and inverse
// RoPE) into s_.o, for the query heads [h0, h0 + heads) that s_.q holds (all of them outside TP attention). A head's
// output depends only on its own row of q and the shared keys, and the split count follows the model's head count,
// so a TP rank's heads get the bits one rank gives them. split (split_prefill): the split-block prefill op instead,
// bf16 q from s_.o's memory, bf16 o into s_.q's (forward_v4.h split_q16 / split_o16 say why); a staging it cannot use
// is an error; q_norm: that q is wq_b's raw output, normalised and rotated by the split kernel (the norm's eps).
Status CudaForwardV4::attend_fp8(int64_t l, const ops::StepDevice& st, const ops::LayerStateView& view,
                                 const int32_t* selected, int64_t h0, int64_t heads, bool split, bool q_norm) {
  const AttnType type = cfg_.layer_types[size_t(l)];
  const int64_t T = st.T, W = cfg_.sliding_window, cs = fp8_comp_stride(l, shape_.max_pos);
  DSI_RETURN_IF_ERROR(kv_encode(s_.kv.data(), T, cfg_.head_dim, nullptr, f8_.step_rows.data(), T, stream_));
  Fp8StateKeys k;
  k.window = W;
  k.m = type == AttnType::Sliding ? 0 : cfg_.ratio(l);
  k.comp_stride = cs;
  k.topk_idx = type == AttnType::CSA ? selected : nullptr;
  k.topk = type == AttnType::CSA ? cfg_.index_topk : 0;
  k.ring = f8_.ring.data();
  k.ring_len = f8_.ring_len.data();
  k.step = f8_.step.data();
  k.step_len = f8_.step_len.data();
  k.comp = cs > 0 ? f8_.comp.data() : nullptr;
  k.comp_len = cs > 0 ? f8_.comp_len.data() : nullptr;
  k.pos32 = f8_.pos32.data();
  DSI_RETURN_IF_ERROR(fp8_state_keys(st, view, k, stream_));
  const int64_t slots = int64_t(slots_.bytes()) / layout_.slot_bytes;
  const int64_t entries = int64_t(blocks_.bytes()) / layout_.block_bytes * view.entries_per_block;
  SparseAttentionFp8Params p;
  p.T = T;
  p.heads = heads;
  p.scale = float(1.0 / std::sqrt(double(cfg_.head_dim)));
  p.sinks = weights_.layer(l).sink + h0;
  p.keys[0] = {slots_.data(), slots * layout_.ring_rows, k.ring, W, k.ring_len, layout_.ring_pages(l)};
  p.keys[1] = {f8_.step_rows.data(), T, k.step, W, k.step_len, ops::kModel1Pages};
  if (cs > 0) p.keys[2] = {blocks_.data(), entries, k.comp, cs, k.comp_len, layout_.entry_pages(l)};
  p.rope_dim = cfg_.qk_rope_head_dim;
  p.pos = k.pos32;
  p.inv_freq = (type == AttnType::Sliding ? inv_main_ : inv_comp_).data();
  p.attention_factor = float(cfg_.rope_for_layer(l).attention_factor);
  p.num_splits = fp8_splits(l, T, shape_.max_pos);  // workspace sized by prepare_fp8 for the same shape
  p.kernel = plan_sparse_attention_fp8_decode(kernel_mode(), T, cfg_.num_attention_heads, W + cs,
                                              device_.multiprocessors, sparse_decode64_enabled())
                 .kernel;  // kAuto (main's) unless the opt-in DSINFER_SPARSE_DECODE64 in fast mode
  // The prefill op's staging after the split partials, as prepare_fp8 sized it for the same route.
  const size_t off = (size_t(sparse_attention_fp8_workspace_floats(T, p.heads, p.num_splits)) + 3) / 4 * 4;
  const int64_t bytes = (int64_t(f8_.ws.size()) - int64_t(off)) * 4;
  if (split) {  // split_prefill took the split kernel (one split): bf16 q in (raw where q_norm), bf16 o out
    p.q_bf16 = true;
    p.q_norm = q_norm;
    p.q_norm_eps = float(cfg_.rms_norm_eps);
    return sparse_attention_prefill_split(p, split_q16(), split_o16(), f8_.ws.data() + off, bytes, stream_);
  }
  if (plan_sparse_attention_fp8_prefill(T, sparse_prefill_) && bytes >= sparse_attention_prefill_staging_bytes(p))
    return sparse_attention_prefill(p, s_.q.data(), s_.o.data(), f8_.ws.data(), f8_.ws.data() + off, bytes, stream_);
  return sparse_attention_fp8(p, s_.q.data(), s_.o.data(), f8_.ws.data(), stream_);
}

// This step's kv rows into the ring (the last writer of each ring row, as ring_write) in one launch (was
// fp8_ring_rows + kv_encode: the same bytes).
Status CudaForwardV4::ring_write_fp8(int64_t l, const ops::StepDevice& st, const ops::LayerStateView& view) {
  const int64_t slots = int64_t(slots_.bytes()) / layout_.slot_bytes;
  const KvRingStep rs{st.T, st.pos, st.seq_of_token, st.cu_seqlens, st.start_pos, st.slot};
  return kv_encode_ring(s_.kv.data(), cfg_.head_dim, rs, view.ring_rows, slots_.data(), slots * layout_.ring_rows,
                        stream_, layout_.ring_pages(l));
}

}  // namespace dsinfer::backends
