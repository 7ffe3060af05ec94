// Roofline cost model of one DeepSeek-V4.1 step (see cost_model.h), op for op the names CudaForwardV41 times
// (backends/cuda/runner/forward_v41_cuda.cpp, attention_v41_cuda.cpp). Weights: FP8 dense with 32x32 blocks, FP4
// experts, BF16 embed / head / gate / wo_a / indexer wk and weights_proj, fp32 ratio>1 compressor; fp32
// activations and state rows as in the runner.
#include <algorithm>
#include <cmath>

#include "perf/cost_model.h"

namespace dsinfer::perf {

namespace {
bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

std::vector<OpCost> step_costs_v41(const io::ModelConfig& cfg, const StepShape& s, const WeightBytes& wb, int64_t layers) {
  const double T = double(s.seqs * s.tokens_per_seq), S = double(s.seqs), A = 4.0;
  const double D = double(cfg.hidden_size), n = double(cfg.hc_mult), H = double(cfg.num_attention_heads);
  const double hd = double(cfg.head_dim), qr = double(cfg.q_lora_rank), G = double(cfg.o_groups), r = double(cfg.o_lora_rank);
  const double E = double(cfg.n_routed_experts), k = double(cfg.num_experts_per_tok), I = double(cfg.moe_intermediate_size);
  const double Hi = double(cfg.index_n_heads), di = double(cfg.index_head_dim), W = double(cfg.sliding_window);
  const double C = double(s.context + s.tokens_per_seq), V = double(cfg.vocab_size);
  const double R = double(s.logits_rows < 0 ? s.seqs : s.logits_rows);
  const double fp8 = 1.0 + 1.0 / 1024, bf16 = 2.0, st = wb.state;
  const auto& v = cfg.v41;
  std::vector<OpCost> out;
  auto gemm = [&](const char* name, int64_t l, double N, double K, double wbytes, bool f8) {
    out.push_back({name, l, N * K * wbytes + T * K * A + T * N * A, 2 * T * N * K, f8});
  };
  auto rw = [&](const char* name, int64_t l, double elems) { out.push_back({name, l, 2 * elems * A, 0, false}); };
  out.push_back({"embed", -1, T * D * bf16 + T * n * D * A, 0, false});
  const double ecols = double((v.engram_max_ngram_size - 1) * v.engram_n_heads), ehd = double(v.engram_head_dim);
  if (!v.engram_layer_ids.empty()) out.push_back({"engram_hash", -1, T * double(v.engram_layer_ids.size()) * ecols * 8, 0, false});
  for (int64_t l = 0; l < std::min<int64_t>(layers, cfg.num_hidden_layers); ++l) {
    const double m = double(cfg.ratio(l)), mix = (2 + n) * n;
    if (cfg.engram_index(l) >= 0) {
      out.push_back({"engram_lookup", l, T * ecols * ehd * (fp8 + A), 0, false});
      gemm("engram_wkv", l, (n + 1) * D, ecols * ehd, fp8, true);
      out.push_back({"engram_gate", l, T * (3 * n + 1) * D * A, 6 * T * n * D, false});
    }
    auto hc_pre = [&](const char* name) { out.push_back({name, l, T * n * D * A + mix * n * D * 4 + T * D * A, 2 * T * mix * n * D, false}); };
    auto hc_post = [&](const char* name) { out.push_back({name, l, 2 * T * n * D * A + T * D * A, 2 * T * n * n * D, false}); };
    hc_pre("hc_pre_attn");
    gemm("wq_a", l, qr, D, fp8, true);
    rw("q_norm", l, T * qr);
    gemm("wq_b", l, H * hd, qr, fp8, true);
    gemm("wkv", l, hd, D, fp8, true);
    rw("q_rope", l, T * H * hd);
    rw("kv_norm_rope", l, T * hd);
    rw("kv_qat", l, T * hd);
    if (cfg.kv_source_of(l) == l) {
      gemm("compressor_proj", l, (m > 1 ? 2 : 1) * hd, D, m > 1 ? 4.0 : bf16, false);
      out.push_back({"compressor", l, T * hd * A * (m > 1 ? 6 : 2), 0, false});
      gemm("indexer_keys", l, di, hd, bf16, false);
      out.push_back({"compressor_emit", l, T * (hd + di) * A + (T / m) * (hd + di) * st, 0, false});
    }
    double keys = W;
    if (m > 0) {
      if (contains(v.index_source_layer_ids, l)) {
        const double entries = C / m;
        gemm("indexer_q", l, Hi * di, qr, fp8, true);
        gemm("indexer_proj", l, Hi, D, bf16, false);
        rw("indexer_q_rope", l, T * Hi * di);
        rw("indexer_q_qat", l, T * Hi * di);
        out.push_back({"indexer_scores", l, S * entries * di * st + T * entries * A, 2 * T * Hi * di * entries, false});
        out.push_back({"indexer_topk", l, 2 * T * entries * A, 0, false});
      }
      keys += std::min(double(cfg.index_topk), C / m);
    }
    const double rows_read = S * std::min(keys * s.tokens_per_seq, keys + double(s.tokens_per_seq));
    out.push_back({"sparse_attention", l, rows_read * hd * st + 2 * T * H * hd * A, 4 * T * H * hd * keys, false});
    out.push_back({"ring_write", l, 2 * T * hd * A, 0, false});
    out.push_back({"wo_a", l, G * r * (H * hd / G) * bf16 + T * H * hd * A + T * G * r * A, 2 * T * G * r * (H * hd / G), false});
    gemm("wo_b", l, D, G * r, fp8, true);
    hc_post("hc_post_attn");
    hc_pre("hc_pre_ffn");
    gemm("router", l, E, D, bf16, false);
    const double hit = E * (1 - std::pow(1 - 1 / E, T * k));
    out.push_back({"moe", l, hit * 3 * I * D * wb.expert + 3 * I * D * fp8 + T * D * A * 2 + T * k * 2 * I * A,
                   2 * T * (k + 1) * 3 * I * D, true});
    hc_post("hc_post_ffn");
  }
  out.push_back({"final_collapse", -1, R * n * D * A + R * D * A, 0, false});
  out.push_back({"lm_head", -1, V * D * bf16 + R * D * A + R * V * A, 2 * R * V * D, false});
  return out;
}

}  // namespace dsinfer::perf
