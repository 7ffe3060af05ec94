// Roofline cost model (see cost_model.h). Activations are fp32 (4 bytes) in the current CUDA runner.
#include "perf/cost_model.h"

#include <algorithm>
#include <cmath>

namespace dsinfer::perf {

double OpCost::floor_s(const Ceilings& c) const {
  if (link) return bytes / c.link_bytes_per_s;
  return std::max(bytes / c.hbm_bytes_per_s, flops / (fp8_math ? c.fp8_flops : c.bf16_flops));
}

std::vector<OpCost> step_costs(const io::ModelConfig& cfg, const StepShape& s, const WeightBytes& wb, int64_t layers) {
  if (cfg.is_v41()) return step_costs_v41(cfg, s, wb, layers);
  const double T = double(s.seqs * s.tokens_per_seq), S = double(s.seqs), A = 4.0;  // fp32 activations
  const double D = double(cfg.hidden_size), n = double(cfg.hc_mult), H = double(cfg.num_attention_heads);
  const double hd = double(cfg.head_dim), qr = double(cfg.q_lora_rank), G = double(cfg.o_groups), r = double(cfg.o_lora_rank);
  const double E = double(cfg.n_routed_experts), k = double(cfg.num_experts_per_tok), I = double(cfg.moe_intermediate_size);
  const double Hi = double(cfg.index_n_heads), di = double(cfg.index_head_dim), W = double(cfg.sliding_window);
  const double C = double(s.context + s.tokens_per_seq), V = double(cfg.vocab_size);
  const double R = double(s.logits_rows < 0 ? s.seqs : s.logits_rows);
  std::vector<OpCost> out;
  auto gemm = [&](const char* name, int64_t l, double N, double K, double wbytes, bool fp8) {
    out.push_back({name, l, N * K * wbytes + T * K * A + T * N * A, 2 * T * N * K, fp8});
  };
  out.push_back({"embed", -1, T * D * wb.other + T * n * D * A, 0, false});
  for (int64_t l = 0; l < std::min<int64_t>(layers, cfg.num_hidden_layers); ++l) {
    const io::AttnType at = cfg.layer_types[size_t(l)];
    const double m = double(cfg.compress_ratios[size_t(l)]);
    const double mix = (2 + n) * n;
    auto hc_pre = [&](const char* name) {
      out.push_back({name, l, T * n * D * A + mix * n * D * 4 + T * D * A, 2 * T * mix * n * D, false});
    };
    auto hc_post = [&](const char* name) { out.push_back({name, l, 2 * T * n * D * A + T * D * A, 2 * T * n * n * D, false}); };
    hc_pre("hc_pre_attn");
    gemm("wq_a", l, qr, D, wb.dense, true);
    gemm("wq_b", l, H * hd, qr, wb.dense, true);
    gemm("wkv", l, hd, D, wb.dense, true);
    out.push_back({"q_norm_rope", l, 2 * T * H * hd * A, 0, false});
    out.push_back({"kv_norm_rope", l, 2 * T * hd * A, 0, false});
    if (at != io::AttnType::Sliding) {
      const double c = at == io::AttnType::CSA ? 2 : 1;
      gemm("compressor_proj", l, 2 * c * hd, D, wb.other, false);
      out.push_back({"compressor", l, T * 2 * c * hd * A * 2 + (T / m) * hd * wb.state, 0, false});
    }
    double keys = W;
    if (at == io::AttnType::CSA) {
      gemm("indexer_q", l, Hi * di, qr, wb.dense, true);
      gemm("indexer_proj", l, Hi + 4 * di, D, wb.other, false);
      const double entries = C / m;
      // Each sequence's keys are read once per step; every token scores all of them.
      out.push_back({"indexer_topk", l, S * entries * di * wb.state + T * Hi * di * A, 2 * T * Hi * di * entries, false});
      keys += std::min(double(cfg.index_topk), entries);
    } else if (at == io::AttnType::HCA) {
      keys += C / m;
    }
    // K = V rows are read once per sequence (shared by its tokens and heads).
    const double rows_read = S * std::min(keys * s.tokens_per_seq, keys + double(s.tokens_per_seq));
    out.push_back({"sparse_attention", l, rows_read * hd * wb.state + 2 * T * H * hd * A, 4 * T * H * hd * keys, false});
    gemm("wo_a", l, r, H * hd / G, wb.dense, true);
    out.back().bytes = G * r * (H * hd / G) * wb.dense + T * H * hd * A + T * G * r * A;
    out.back().flops = 2 * T * G * r * (H * hd / G);
    gemm("wo_b", l, D, G * r, wb.dense, true);
    hc_post("hc_post_attn");
    hc_pre("hc_pre_ffn");
    gemm("router", l, E, D, wb.other, false);
    // Expected distinct experts for T*k picks; with expert parallelism over N GPUs each holds E/N of them (the
    // same fraction is hit) and computes ~1/N of the assignments.
    const double N = double(std::max<int64_t>(s.expert_parallel, 1));
    const double hit = E * (1 - std::pow(1 - 1 / E, T * k)) / N;
    // Routed experts (each expert hit at least once is read whole) plus the shared expert, one op in the runner.
    out.push_back({"moe", l, hit * 3 * I * D * wb.expert + 3 * I * D * wb.dense + T * D * A * 2 + T * k * 2 * I * A / N,
                   2 * T * (k / N + 1) * 3 * I * D, true});
    // Ring all-reduce of the fp32 MoE output: 2 (N - 1) / N of its bytes leave each GPU.
    if (N > 1) out.push_back({"moe_allreduce", l, 2 * (N - 1) / N * T * D * A, 0, false, true});
    hc_post("hc_post_ffn");
  }
  out.push_back({"lm_head", -1, V * D * wb.other + R * D * A + R * V * A, 2 * R * V * D, false});
  return out;
}

}  // namespace dsinfer::perf
