// Roofline cost model of the minimum work (see cost_model.h; formulas and a worked example in docs/kernels.md,
// "Roofline floors"). Only weights (read once), state rows (storage format), the bf16 residual stream at layer
// boundaries and the logits are bytes; everything our kernels keep between ops is an intermediate and free here.
#include "perf/cost_model.h"

#include <algorithm>
#include <cmath>

namespace dsinfer::perf {

double OpCost::floor_s(const Ceilings& c) const {
  if (link) return bytes / c.link_bytes_per_s;
  return std::max(bytes / c.hbm_bytes_per_s, flops / (fp8_math ? c.fp8_flops : c.bf16_flops));
}

double expected_experts_hit(double E, double k, double T) { return E * (1 - std::pow(1 - k / E, T)); }

Result<WeightBytes> state_profile(const io::ModelConfig& cfg, const std::string& profile) {
  WeightBytes wb;
  const double hd = double(cfg.head_dim), di = double(cfg.index_head_dim);
  if (profile == "fp8") {
    const double rope = double(cfg.qk_rope_head_dim), nope = hd - rope;
    // e4m3 NoPE dims, bf16 RoPE dims, one UE8M0 scale per 64 NoPE dims padded to 8 bytes (fp8_ds_mla).
    wb.kv_row = nope + 2 * rope + 8 * std::ceil(nope / 64 / 8);
    wb.index_row = di + 4;
    return wb;
  }
  const double e = profile == "bf16" ? 2 : profile == "fp32" ? 4 : 0;
  if (e == 0) return Status::errorf("state profile must be fp8, bf16 or fp32, found '{}'", profile);
  wb.kv_row = hd * e;
  wb.index_row = di * e;
  wb.state = e;
  return wb;
}

std::vector<OpCost> step_costs(const io::ModelConfig& cfg, const StepShape& s, const WeightBytes& wb, int64_t layers) {
  if (cfg.is_v41()) return step_costs_v41(cfg, s, wb, layers);
  const double t = double(s.tokens_per_seq), S = double(s.seqs), T = S * t, A = 2.0;  // bf16 residual stream
  const double D = double(cfg.hidden_size), n = double(cfg.hc_mult), H = double(cfg.num_attention_heads);
  const double hd = double(cfg.head_dim), qr = double(cfg.q_lora_rank), G = double(cfg.o_groups), r = double(cfg.o_lora_rank);
  const double E = double(cfg.n_routed_experts), k = double(cfg.num_experts_per_tok), I = double(cfg.moe_intermediate_size);
  const double Hi = double(cfg.index_n_heads), di = double(cfg.index_head_dim), W = double(cfg.sliding_window);
  const double ctx = double(s.context), C = ctx + t, V = double(cfg.vocab_size), topk = double(cfg.index_topk);
  const double R = double(s.logits_rows < 0 ? s.seqs : s.logits_rows), shared = double(cfg.n_shared_experts);
  const double N = double(std::max<int64_t>(s.expert_parallel, 1)), mix = (2 + n) * n;
  // Sum over a sequence's new tokens (positions ctx .. C-1) of the keys each attends / scores (causal).
  auto sum_over_tokens = [&](auto keys_at) {
    double sum = 0;
    for (int64_t p = s.context; p < s.context + s.tokens_per_seq; ++p) sum += keys_at(double(p));
    return sum;
  };
  std::vector<OpCost> out;
  // A weight GEMM: its weights read once, 2 x tokens x out x in FLOPs; activations are intermediates.
  auto gemm = [&](const char* name, int64_t l, double out_dim, double in_dim, double wbytes, bool fp8) {
    out.push_back({name, l, out_dim * in_dim * wbytes, 2 * T * out_dim * in_dim, fp8});
  };
  // Embedding rows gathered, and the residual stream (n copies, bf16) written for layer 0.
  out.push_back({"embed", -1, T * D * wb.other + T * n * D * A, 0, false});
  for (int64_t l = 0; l < std::min<int64_t>(layers, cfg.num_hidden_layers); ++l) {
    const io::AttnType at = cfg.layer_types[size_t(l)];
    const double m = double(cfg.compress_ratios[size_t(l)]);
    // The layer reads its residual stream once (hc_pre_attn) and writes it once (hc_post_ffn); mHC mixing
    // weights are fp32.
    out.push_back({"hc_pre_attn", l, T * n * D * A + mix * n * D * 4, 2 * T * mix * n * D, false});
    gemm("wq_a", l, qr, D, wb.dense, true);
    gemm("wq_b", l, H * hd, qr, wb.dense, true);
    gemm("wkv", l, hd, D, wb.dense, true);
    out.push_back({"q_norm_rope", l, 0, 0, false});
    out.push_back({"kv_norm_rope", l, 0, 0, false});
    // The window ring keeps the last W positions: each sequence writes at most W new rows.
    out.push_back({"ring_write", l, S * std::min(t, W) * wb.kv_row, 0, false});
    double compressed_rows = 0;  // rows of compressed state that sparse attention reads per sequence
    double compressed_flops = 0;  // sum over the new tokens of the compressed entries each attends
    if (at != io::AttnType::Sliding) {
      const double c = at == io::AttnType::CSA ? 2 : 1;  // CSA's overlapping windows: twice the projections
      gemm("compressor_proj", l, 2 * c * hd, D, wb.other, false);
      const double new_entries = std::floor(C / m) - std::floor(ctx / m);
      out.push_back({"compressor", l, S * new_entries * wb.kv_row, 0, false});
      if (at == io::AttnType::CSA) {
        gemm("indexer_q", l, Hi * di, qr, wb.dense, true);
        gemm("indexer_proj", l, Hi + 4 * di, D, wb.other, false);
        // Every sequence reads its old keys and writes its new ones once (floor(C / m) rows in all); each token
        // scores every key visible at its position, all Hi heads.
        const double visible = sum_over_tokens([&](double p) { return std::floor((p + 1) / m); });
        out.push_back({"indexer_topk", l, S * std::floor(C / m) * wb.index_row, 2 * S * Hi * di * visible, false});
        compressed_rows = std::min(std::floor(C / m), topk * t);
        compressed_flops = sum_over_tokens([&](double p) { return std::min(topk, std::floor((p + 1) / m)); });
      } else {
        compressed_rows = std::floor(C / m);
        compressed_flops = sum_over_tokens([&](double p) { return std::floor((p + 1) / m); });
      }
    }
    // QK and PV over head_dim for every head and every key a token attends (window + compressed); each sequence
    // reads the rows its tokens attend once.
    const double window_keys = sum_over_tokens([&](double p) { return std::min(W, p + 1); });
    const double rows_read = std::min(C, W + t - 1) + compressed_rows;
    out.push_back({"sparse_attention", l, S * rows_read * wb.kv_row, 4 * S * H * hd * (window_keys + compressed_flops),
                   false});
    // wo_a: G grouped projections of r outputs, each on its own H/G heads.
    out.push_back({"wo_a", l, G * r * (H * hd / G) * wb.dense, 2 * T * G * r * (H * hd / G), true});
    gemm("wo_b", l, D, G * r, wb.dense, true);
    out.push_back({"hc_post_attn", l, 0, 2 * T * n * n * D, false});
    out.push_back({"hc_pre_ffn", l, mix * n * D * 4, 2 * T * mix * n * D, false});
    gemm("router", l, E, D, wb.other, false);
    // Routed experts: each expert that at least one token picks is read whole, once; with expert parallelism over
    // N GPUs each holds E/N of them (the same fraction is hit) and computes ~1/N of the assignments. The shared
    // expert runs on every GPU.
    const double hit = expected_experts_hit(E, k, T) / N;
    out.push_back({"moe", l, hit * 3 * I * D * wb.expert + shared * 3 * I * D * wb.dense,
                   2 * T * (k / N + shared) * 3 * I * D, true});
    // Ring all-reduce of the bf16 MoE output: 2 (N - 1) / N of its bytes leave each GPU.
    if (N > 1) out.push_back({"moe_allreduce", l, 2 * (N - 1) / N * T * D * A, 0, false, true});
    out.push_back({"hc_post_ffn", l, T * n * D * A, 2 * T * n * n * D, false});
  }
  // The head reads the residual stream of its R rows and writes fp32 logits (the step's output).
  out.push_back({"hc_head", -1, R * n * D * A, 2 * R * n * D, false});
  out.push_back({"lm_head", -1, V * D * wb.other + R * V * 4, 2 * R * V * D, false});
  return out;
}

}  // namespace dsinfer::perf
