// Multi-GPU plan (see parallel_plan.h): option checks, expert ranges, per-rank memory.
#include "parallel/parallel_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace dsinfer::parallel {

Result<int32_t> validate_parallel(const ParallelSizes& s, const std::map<std::string, std::string>& env,
                                  int32_t local_gpus, bool process_per_rank) {
  if (s.gpus < 1) return Status::errorf("--gpus must be >= 1, found {}", s.gpus);
  if (s.data_parallel != 1 && s.data_parallel != s.gpus)
    return Status::errorf("--data-parallel-size {} must be 1 (attention and state replicated on every GPU) or --gpus "
                          "{} (DP attention: each GPU its own sequences and their state; docs/multi_gpu.md)",
                          s.data_parallel, s.gpus);
  if (s.tensor_parallel != 1 && s.tensor_parallel != s.gpus)
    return Status::errorf("--tensor-parallel-size {} must be 1 or --gpus {} (TP attention: each GPU 1/N of the "
                          "query heads; docs/multi_gpu.md)", s.tensor_parallel, s.gpus);
  if (s.gpus > 1 && s.data_parallel > 1 && s.tensor_parallel > 1)
    return Status::errorf("--data-parallel-size {} and --tensor-parallel-size {} cannot both be > 1: attention is "
                          "split either by sequence (DP) or by head (TP)", s.data_parallel, s.tensor_parallel);
  const int32_t ep = s.expert_parallel == 0 ? s.gpus : s.expert_parallel;
  if (ep != s.gpus)
    return Status::errorf("--expert-parallel-size {} must equal --gpus {} (expert parallelism over every GPU is the "
                          "only layout implemented yet)", ep, s.gpus);
  DSI_ASSIGN_OR_RETURN(const std::optional<LaunchEnv> launch, parse_launch_env(env, local_gpus));
  if (launch && !process_per_rank)
    return Status::errorf("WORLD_SIZE={} RANK={}: one process per GPU is not run on the cuda backend yet (NCCL "
                          "needs one GPU per process, and no machine with several GPUs has run it); run one process "
                          "driving them with --gpus {} (docs/multi_gpu.md \"Bootstrap\")", launch->world, launch->rank,
                          launch->world);
  if (launch && s.gpus != launch->world)
    return Status::errorf("WORLD_SIZE={} RANK={} but --gpus {}: every process of a launch of one process per rank "
                          "runs with --gpus WORLD_SIZE (and holds its rank's share)", launch->world, launch->rank,
                          s.gpus);
  if (launch && s.data_parallel > 1)
    return Status::errorf("WORLD_SIZE={} RANK={}: DP attention (--data-parallel-size {}) is not implemented with one "
                          "process per rank (each process runs every sequence); use expert or tensor parallelism, or "
                          "one process with --gpus {}", launch->world, launch->rank, s.data_parallel, launch->world);
  if (local_gpus >= 0 && s.gpus > local_gpus)
    return Status::errorf("--gpus {} but only {} CUDA device(s) are visible", s.gpus, local_gpus);
  return ep;
}

Layout layout_of(const ParallelSizes& s) {
  if (s.gpus > 1 && s.data_parallel == s.gpus) return Layout::kDataParallel;
  if (s.gpus > 1 && s.tensor_parallel == s.gpus) return Layout::kTensorParallel;
  return Layout::kExpertParallel;
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kDataParallel: return "DP attention + expert parallel";
    case Layout::kTensorParallel: return "TP attention + expert parallel";
    default: return "expert parallel";
  }
}

const char* layout_flags(Layout l) {
  switch (l) {
    case Layout::kDataParallel: return "--data-parallel-size N";
    case Layout::kTensorParallel: return "--tensor-parallel-size N";
    default: return "default";
  }
}

Result<ExpertRange> expert_range(int64_t experts, int32_t rank, int32_t world) {
  if (world < 1 || rank < 0 || rank >= world)
    return Status::errorf("expert parallelism: rank {} of {} is out of range", rank, world);
  if (experts < 1 || experts % world != 0)
    return Status::errorf("expert parallelism: {} routed experts cannot be split evenly over {} GPUs "
                          "(n_routed_experts % expert-parallel size must be 0)", experts, world);
  const int64_t per = experts / world;
  return ExpertRange{int32_t(rank * per), int32_t((rank + 1) * per)};
}

Result<HeadRange> head_range(int64_t heads, int32_t rank, int32_t world) {
  if (world < 1 || rank < 0 || rank >= world)
    return Status::errorf("tensor parallelism: rank {} of {} is out of range", rank, world);
  if (heads < 1) return Status::errorf("tensor parallelism: the model has {} attention heads", heads);
  return HeadRange{int32_t(rank * heads / world), int32_t((rank + 1) * heads / world)};
}

bool heads_in_whole_groups(int64_t heads, int64_t groups, int32_t world) {
  if (groups < 1 || heads % groups != 0 || world < 1) return false;
  const int64_t per_group = heads / groups;
  for (int32_t r = 0; r < world; ++r)
    if ((int64_t(r) * heads / world) % per_group != 0) return false;  // rank r's first head starts inside a group
  return true;
}

double storage_bytes(const model::TensorSpec& s) {
  const DType dt = model::official_storage(s);
  const double n = double(s.rows * s.cols);
  return s.kind != model::TensorKind::Matrix ? n * 4
         : dt == DType::I8                   ? n * (0.5 + 1.0 / 32)
         : dt == DType::F8_E4M3              ? n * (1 + 1.0 / 16384)
                                             : n * double(dtype_size(dt));
}

RankMemory rank_memory(const std::vector<model::TensorSpec>& specs, int32_t world, int32_t redundant,
                       double (*bytes)(const model::TensorSpec&)) {
  RankMemory m;
  double experts = 0;
  int64_t count = 0;  // routed experts per layer (ids 0 .. count-1)
  for (const model::TensorSpec& s : specs) {
    (s.expert >= 0 ? experts : m.dense_bytes) += bytes(s);
    count = std::max<int64_t>(count, s.expert + 1);
  }
  // Experts of one layer share a shape: a redundant slot costs one average expert.
  const double per_expert = count > 0 ? experts / double(count) : 0.0;
  m.expert_bytes = (experts + per_expert * double(std::max(redundant, 0))) / double(world < 1 ? 1 : world);
  return m;
}

double rank_state_bytes(Layout layout, int32_t world, double budget_bytes) {
  return layout == Layout::kDataParallel && world > 1 ? budget_bytes / double(world) : budget_bytes;
}

double step_activation_bytes(const io::ModelConfig& c, Layout layout, int32_t world, const StepShape& step) {
  const int32_t n = std::max(world, 1);
  const double f = 4;  // fp32
  const double S = double(std::max<int64_t>(step.tokens, 0));
  const double St = layout == Layout::kDataParallel ? std::ceil(S / n) : S;  // tokens of this rank's attention
  const double D = double(c.hidden_size), k = double(c.num_experts_per_tok), hd = double(c.head_dim);
  const double H = double(c.num_attention_heads), Hr = layout == Layout::kTensorParallel ? std::ceil(H / n) : H;
  const double G = double(c.o_groups), r = double(c.o_lora_rank);
  const double streams = St * double(c.hc_mult) * D, site = 2 * St * D;
  // attention: q and o of this rank's heads, the query latent, the K=V latent, the compressor (two rows per token
  // at CSA), the indexer queries, the grouped output (exact TP: all groups, or every head when groups are split)
  double attn = 2 * St * Hr * hd + St * double(c.q_lora_rank) + St * hd + 4 * St * hd +
                St * double(c.index_n_heads) * double(c.index_head_dim) + St * G * r;
  if (layout == Layout::kTensorParallel && step.exact) attn += St * H * hd;
  double moe = 0;
  if (layout == Layout::kDataParallel) {  // own pairs out and back, a balanced share of every rank's pairs served
    const double pair = D + 2, served = S * k / n;
    moe = 2 * St * k * pair + 2 * served * pair + St * k * D;
  } else {
    moe = step.exact ? S * k * D : S * D;
  }
  const double logits = double(std::max<int64_t>(step.logit_rows, 0)) * double(c.vocab_size);
  return f * (streams + site + std::max(attn, moe) + logits);
}

Status check_rank_fits(const RankMemory& m, int32_t world, int32_t gpu, int64_t free_bytes, const std::string& gpu_name) {
  const double need = m.total_bytes(), gib = double(1 << 30);
  if (need <= kWeightFraction * double(free_bytes)) return Status::ok();
  const std::string more =
      m.state_bytes + m.activation_bytes > 0
          ? fmt::format(" and {:.1f} GiB of state + {:.1f} GiB of step activations ({:.1f} GiB in all)",
                        m.state_bytes / gib, m.activation_bytes / gib, need / gib)
          : std::string();
  return Status::errorf("model needs {:.1f} GiB of weights per GPU on {} GPU(s) ({:.1f} GiB replicated + {:.1f} GiB "
                        "of routed experts){} plus {:.0f}% headroom, but only {:.1f} GiB are free on GPU {} ('{}'); "
                        "use more GPUs (--gpus), fewer layers (--layers / num_hidden_layers in config.json){}",
                        m.weight_bytes() / gib, world, m.dense_bytes / gib, m.expert_bytes / gib, more,
                        100 * (1 - kWeightFraction), double(free_bytes) / gib, gpu, gpu_name,
                        m.state_bytes + m.activation_bytes > 0
                            ? ", a smaller state budget (--state-memory-gb) or a smaller step (--max-num-batched-tokens)"
                            : "");
}

namespace {

// Decode state one sequence of `context` tokens reads per step, over every layer (fp32 rows, as the runners keep
// the state): its sliding window, then per layer type the compressed entries attention reads (HCA: all of them;
// CSA: the indexer's top-k) and the indexer keys scored (CSA: all of them).
struct SeqAttention {
  double state_bytes = 0;  // per sequence per step
  double score_flops = 0;  // per sequence per step, all heads: q.k and p.v over the keys read, plus indexer scores
};
SeqAttention seq_attention(const io::ModelConfig& c, int64_t context) {
  SeqAttention a;
  const double hd = double(c.head_dim), di = double(c.index_head_dim), elem = 4;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const io::AttnType t = c.layer_types[size_t(l)];
    const int64_t m = c.ratio(l);
    const double window = double(std::min<int64_t>(context, c.sliding_window > 0 ? c.sliding_window : context));
    const double entries = m > 0 ? double(context / m) : 0.0;
    double keys = window, index_keys = 0;
    if (t == io::AttnType::HCA) keys += entries;
    if (t == io::AttnType::CSA || t == io::AttnType::CSA2) {
      keys += std::min(entries, double(c.index_topk));
      index_keys = entries;
    }
    a.state_bytes += (keys * hd + index_keys * di) * elem;
    a.score_flops += 4.0 * double(c.num_attention_heads) * keys * hd + 2.0 * double(c.index_n_heads) * index_keys * di;
  }
  return a;
}

bool split_by_heads(const std::string& name) {  // the tensors TP divides: per-head rows or columns
  for (const char* k : {".attn.wq_b.", ".attn.wo_a.", ".attn.wo_b.", ".attn.attn_sink"})
    if (name.find(k) != std::string::npos) return true;
  return false;
}

}  // namespace

LayoutChoice choose_layout(const io::ModelConfig& cfg, const std::vector<model::TensorSpec>& specs,
                           double (*bytes)(const model::TensorSpec&), int32_t gpus, int64_t batch, int64_t context,
                           int64_t seqs_per_gpu, int64_t seqs_per_gpu_dp, const Hardware& hw) {
  const int64_t dp_per_gpu = seqs_per_gpu_dp >= 0 ? seqs_per_gpu_dp : seqs_per_gpu;
  const double N = double(gpus), D = double(cfg.hidden_size), L = double(cfg.num_hidden_layers);
  const double k = double(cfg.num_experts_per_tok);
  double w_rep = 0, w_split = 0, p_rep = 0, p_split = 0;  // attention weight bytes / parameters
  for (const model::TensorSpec& s : specs) {
    if (s.name.find(".attn.") == std::string::npos) continue;
    const bool split = split_by_heads(s.name);
    (split ? w_split : w_rep) += bytes(s);
    (split ? p_split : p_rep) += double(s.rows * s.cols);
  }
  const SeqAttention seq = seq_attention(cfg, context);
  LayoutChoice c;
  const std::vector<Layout> layouts =
      gpus > 1 ? std::vector<Layout>{Layout::kExpertParallel, Layout::kDataParallel, Layout::kTensorParallel}
               : std::vector<Layout>{Layout::kExpertParallel};
  for (const Layout l : layouts) {
    LayoutEstimate e;
    e.layout = l;
    const bool dp = l == Layout::kDataParallel, tp = l == Layout::kTensorParallel;
    e.sequences_fit = dp ? dp_per_gpu * gpus : seqs_per_gpu;
    e.seqs_per_rank = dp ? (batch + gpus - 1) / gpus : batch;
    e.fits = (dp ? dp_per_gpu : seqs_per_gpu) > 0 && batch <= e.sequences_fit;
    const double t = double(e.seqs_per_rank);  // tokens of the busiest rank's attention (one per sequence)
    if (gpus > 1) {
      const double ring = 2.0 * (N - 1) / N * 4.0 * double(batch) * D;  // one fp32 all-reduce of [batch, D]
      e.collectives = int64_t((dp || tp ? 2 : 1) * L);
      e.comm_bytes = dp ? L * t * k * (N - 1) / N * 3.03 * D : (tp ? 2 : 1) * L * ring;
    }
    e.attn_weight_bytes = w_rep + (tp ? w_split / N : w_split);
    e.attn_state_bytes = t * seq.state_bytes;
    const double heads_share = tp ? 1.0 / N : 1.0;
    e.attn_flops = 2.0 * t * (p_rep + p_split * heads_share) + t * seq.score_flops * heads_share;
    e.attn_ms = 1e3 * std::max((e.attn_weight_bytes + e.attn_state_bytes) / hw.hbm_bytes_per_s,
                               e.attn_flops / hw.flops_per_s);
    e.comm_ms = 1e3 * (double(e.collectives) * hw.collective_s + e.comm_bytes / hw.link_bytes_per_s);
    c.options.push_back(e);
  }
  for (size_t i = 0; i < c.options.size(); ++i)
    if (c.options[i].fits && (c.best < 0 || c.options[i].step_ms() < c.options[size_t(c.best)].step_ms()))
      c.best = int32_t(i);
  if (c.best < 0) {
    c.reason = seqs_per_gpu <= 0
                   ? fmt::format("the weights do not fit on {} GPU(s)", gpus)
                   : fmt::format("{} sequences of {} tokens fit in no layout (at most {} with DP attention)", batch,
                                 context, c.options.back().layout == Layout::kExpertParallel
                                              ? seqs_per_gpu : dp_per_gpu * gpus);
    return c;
  }
  const LayoutEstimate& b = c.options[size_t(c.best)];
  std::string why;
  if (b.layout == Layout::kTensorParallel)
    why = fmt::format("splitting the heads cuts each GPU's attention weight reads to {:.0f} MB (EP and DP: {:.0f} MB), "
                      "more than its second all-reduce per layer costs", b.attn_weight_bytes / 1e6,
                      c.options[0].attn_weight_bytes / 1e6);
  else if (b.layout == Layout::kDataParallel)
    why = fmt::format("each GPU runs attention for {} of the {} sequences and reads only their state ({:.0f} MB "
                      "instead of {:.0f} MB), and dispatch / combine sends {:.0f} MB instead of EP's {:.0f} MB",
                      b.seqs_per_rank, batch, b.attn_state_bytes / 1e6, c.options[0].attn_state_bytes / 1e6,
                      b.comm_bytes / 1e6, c.options[0].comm_bytes / 1e6);
  else
    why = gpus > 1 ? "the fewest collectives: at this batch neither the weight reads TP saves nor the state DP splits "
                     "pay for TP's second all-reduce or DP's idle ranks"
                   : "one GPU";
  c.reason = fmt::format("{} ({}): {:.3f} ms of attention + communication per step", layout_name(b.layout),
                         layout_flags(b.layout), b.step_ms());
  for (const LayoutEstimate& e : c.options)
    if (&e != &b)
      c.reason += e.fits ? fmt::format(", {} {:.3f} ms", layout_name(e.layout), e.step_ms())
                         : fmt::format(", {} does not fit the batch", layout_name(e.layout));
  c.reason += "; " + why;
  return c;
}

}  // namespace dsinfer::parallel
