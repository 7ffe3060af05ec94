// CudaForwardV4's attention block of one layer (model/deepseek_v4.cpp attention()): q / kv projections with norms
// and RoPE, the compressor and (CSA) the indexer, sparse attention over window + compressed entries, the ring
// write and the grouped output projection. Sliding layers skip the compressor, HCA layers the indexer.
#include <algorithm>
#include <cmath>

#include "backends/cuda/runner/forward_v4.h"
#include "model/state_pool.h"
#include "ops/compressor/compressor_cuda.h"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/quant_sim/quant_sim_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace dsinfer::backends {

using namespace ops::cuda;
using io::AttnType;

Status CudaForwardV4::attention(int64_t l, const ops::StepDevice& st) {
  const DeviceLayer& L = weights_.layer(l);
  const AttnType type = cfg_.layer_types[size_t(l)];
  const int64_t T = st.T, D = cfg_.hidden_size, H = cfg_.num_attention_heads, hd = cfg_.head_dim, qr = cfg_.q_lora_rank;
  const int64_t rd = cfg_.qk_rope_head_dim, nope = hd - rd, m = cfg_.ratio(l);
  const float eps = float(cfg_.rms_norm_eps), af = float(cfg_.rope_for_layer(l).attention_factor);
  const float* inv = (type == AttnType::Sliding ? inv_main_ : inv_comp_).data();
  const model::StatePool pool{&layout_, slots_.as<float>(), blocks_.as<float>()};
  const ops::LayerStateView view = model::layer_view(pool, l);
  float *y = s_.y.data(), *cq = s_.cq.data(), *q = s_.q.data(), *kv = s_.kv.data();
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
    return p;
  };

  DSI_OP("wq_a", l, gemm(y, T, D, L.wq_a, cq, qr, false));
  DSI_OP("q_norm", l, rmsnorm(cq, T, qr, L.q_norm, eps, cq, stream_));
  DSI_OP("wq_b", l, gemm(cq, T, qr, L.wq_b, q, H * hd, false));
  DSI_OP("wkv", l, gemm(y, T, D, L.wkv, kv, hd, false));
  HeadNormRopeParams rp{T, H, hd, HeadNorm::Unweighted, nullptr, eps, rd, inv, af, false};
  DSI_OP("q_norm_rope", l, head_norm_rope(rp, q, st.pos, stream_));
  rp = {T, 1, hd, HeadNorm::Weighted, L.kv_norm, eps, rd, inv, af, false};
  DSI_OP("kv_norm_rope", l, head_norm_rope(rp, kv, st.pos, stream_));
  if (num_.kv_fp8_sim) DSI_OP("kv_fp8_sim", l, fp8_block_sim(kv, T, hd, nope, 64, stream_));

  if (type != AttnType::Sliding) {
    const int64_t c = type == AttnType::CSA ? 2 : 1;
    DSI_OP("compressor_proj", l, gemm(y, T, D, L.comp_wkv, s_.ckv.data(), c * hd, false));
    DSI_OP("compressor_proj", l, gemm(y, T, D, L.comp_wgate, s_.cg.data(), c * hd, false));
    CompressorCudaParams cp = compressor_params(type == AttnType::CSA, hd, false, L.comp_ape, L.comp_norm);
    cp.sim = num_.kv_fp8_sim ? CompressorSim::Fp8Nope : CompressorSim::None;
    cp.fp8_dims = nope;
    DSI_OP("compressor", l, compressor_step(st, view, cp, s_.ckv.data(), s_.cg.data(), stream_));
  }
  const int32_t* selected = nullptr;
  if (type == AttnType::CSA) {
    const int64_t Hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
    float *iq = s_.iq.data(), *iw = s_.iw.data();
    DSI_OP("indexer_q", l, gemm(cq, T, qr, L.idx_wq_b, iq, Hi * di, false));
    rp = {T, Hi, di, HeadNorm::None, nullptr, eps, rd, inv, af, false};
    DSI_OP("indexer_q_rope", l, head_norm_rope(rp, iq, st.pos, stream_));
    if (num_.indexer_fp4_sim) DSI_OP("indexer_fp4_sim", l, hadamard_fp4_sim(iq, T * Hi, di, 32, stream_));
    DSI_OP("indexer_proj", l, gemm(y, T, D, L.idx_wproj, iw, Hi, false));
    DSI_OP("indexer_proj", l, scale_cuda(iw, T * Hi, float(1.0 / std::sqrt(double(Hi))), stream_));
    DSI_OP("indexer_proj", l, gemm(y, T, D, L.idx_wkv, s_.ikv.data(), 2 * di, false));
    DSI_OP("indexer_proj", l, gemm(y, T, D, L.idx_wgate, s_.ig.data(), 2 * di, false));
    CompressorCudaParams ip = compressor_params(true, di, true, L.idx_ape, L.idx_norm);
    ip.sim = num_.indexer_fp4_sim ? CompressorSim::HadamardFp4 : CompressorSim::None;
    DSI_OP("indexer_compressor", l, compressor_step(st, view, ip, s_.ikv.data(), s_.ig.data(), stream_));
    const IndexerCudaParams xp{Hi, di, m, cfg_.index_topk};
    DSI_OP("indexer_topk", l, indexer_topk(st, view, xp, iq, iw, std::max<int64_t>(shape_.visible, 1), s_.scores.data(),
                                           s_.sel.data(), stream_));
    selected = s_.sel.data();
  }
  SparseAttentionCudaParams ap;
  ap.heads = H;
  ap.head_dim = hd;
  ap.scale = float(1.0 / std::sqrt(double(hd)));
  ap.sinks = L.sink;
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
  float* o = s_.o.data();
  DSI_OP("sparse_attention", l, sparse_attention(st, view, ap, q, kv, o, s_.attn_ws.data(), stream_));
  DSI_OP("ring_write", l, ring_write(st, view, kv, stream_));
  const int64_t G = cfg_.o_groups, r = cfg_.o_lora_rank, gin = H * hd / G;
  DSI_OP("wo_a", l, gemm_grouped(o, T, H * hd, gin, L.wo_a, G, s_.mid.data(), G * r, r));
  DSI_OP("wo_b", l, gemm(s_.mid.data(), T, G * r, L.wo_b, s_.f.data(), D, false));
  return Status::ok();
}


}  // namespace dsinfer::backends
