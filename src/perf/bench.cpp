// Bench driver (see bench.h): medians of `iters` timed steps after one warm-up, op times summed over layers, floors
// from perf::step_costs at the ceilings given, and the step as a user runs it (graphed decode, chunked prefill).
#include "perf/bench.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "cache/state_layout.h"
#include "dsinfer/engine.h"
#include "perf/ceilings.h"
#include "perf/cost_model.h"
#include "sampling/row_pack.h"

namespace dsinfer::perf {

scheduler::BatchPlan make_bench_plan(int64_t seqs, int64_t new_tokens, int64_t context, int64_t blocks_per_seq,
                                     int64_t vocab, std::vector<std::vector<cache::BlockId>>& tables, bool verify) {
  scheduler::BatchPlan p;
  p.clear();
  tables.assign(size_t(seqs), {});
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables[size_t(s)].push_back(cache::BlockId(s * blocks_per_seq + b));
    scheduler::SeqPlan sp;
    sp.seq_id = scheduler::SeqId(s + 1);
    sp.start_pos = context;
    sp.num_new_tokens = int32_t(new_tokens);
    sp.token_offset = p.num_tokens();
    sp.is_prefill = new_tokens > 1 && !verify;
    sp.num_spec_tokens = verify ? int32_t(new_tokens - 1) : 0;
    sp.needs_logits = true;
    sp.logits_row = int32_t(p.logits_token_index.size());
    sp.slot = cache::SlotId(s);
    sp.block_table = tables[size_t(s)];
    for (int64_t i = 0; i < new_tokens; ++i) {
      p.token_ids.push_back(int32_t((s * 7919 + i * 104729 + 13) % vocab));
      p.positions.push_back(context + i);
    }
    p.cu_seqlens.push_back(p.num_tokens());
    for (int64_t i = verify ? 0 : new_tokens - 1; i < new_tokens; ++i)
      p.logits_token_index.push_back(int32_t(p.num_tokens() - new_tokens + i));
    p.seqs.push_back(sp);
  }
  return p;
}

void share_blocks(scheduler::BatchPlan& plan, std::vector<std::vector<cache::BlockId>>& tables, int64_t num_blocks) {
  for (size_t s = 0; s < plan.seqs.size(); ++s) {
    for (cache::BlockId& b : tables[s]) b = cache::BlockId(int64_t(b) % num_blocks);
    plan.seqs[s].block_table = tables[s];
  }
}

namespace {

// The engine's default prefill chunk (EngineOptions::max_num_batched_tokens, include/dsinfer/engine.h).
const int64_t kEngineChunk = EngineOptions{}.max_num_batched_tokens;

template <typename T>
double median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return double(v[v.size() / 2]);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Per-op samples keyed by (name, layer), and host wall times, of `iters` steps after one warm-up.
struct Samples {
  std::map<std::pair<std::string, int64_t>, std::vector<float>> ops;
  std::vector<double> step_ms;
  runner::RunnerDiagnostics::CommTraffic comm;  // over the timed steps
};

Status time_steps(runner::ModelRunner& r, const scheduler::BatchPlan& plan, int64_t iters, Samples& out) {
  std::vector<float> logits;
  for (int64_t it = 0; it < iters + 1; ++it) {  // first run = warm-up
    const auto t0 = std::chrono::steady_clock::now();
    DSI_RETURN_IF_ERROR(r.step(plan, logits));
    const double ms = ms_since(t0);
    DSI_ASSIGN_OR_RETURN(auto times, r.diagnostics().op_times());
    const runner::RunnerDiagnostics::CommTraffic comm = r.diagnostics().take_comm_traffic();
    if (it == 0) continue;
    out.step_ms.push_back(ms);
    out.comm.bytes += comm.bytes;
    out.comm.calls += comm.calls;
    for (const auto& t : times) out.ops[{t.name, t.layer}].push_back(t.ms);
  }
  return Status::ok();
}

// Decode again without per-op events: the runner replays its CUDA graph. Median host wall time of the step as the
// engine runs it: with device sampling (CUDA), the forward and greedy sampling of every logits row on the device,
// only the ids coming back (the engine's path); otherwise step() with the logits downloaded for the host sampler.
Result<double> time_graph_steps(runner::ModelRunner& r, const scheduler::BatchPlan& plan, int64_t iters) {
  DSI_RETURN_IF_ERROR(r.diagnostics().set_timing(false));
  const bool device = r.supports_device_sampling();
  SamplingParams greedy;
  greedy.temperature = 0;
  sampling::PackedRows rows;
  rows.clear(r.config().vocab_size);
  if (device) {
    for (int32_t row = 0; row < plan.num_logits(); ++row) {
      sampling::RowRequest req;
      req.logits_row = row;
      req.params = &greedy;
      DSI_RETURN_IF_ERROR(rows.add(req));
    }
  }
  std::vector<float> logits;
  std::vector<ops::SampleRowOut> ids;
  std::vector<double> g;
  Status s;
  for (int64_t it = 0; it < iters + 1 && s.is_ok(); ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    if (device) {
      s = r.begin_sampled_step(plan);
      if (s) s = r.sample_rows(rows, ids);
    } else {
      s = r.step(plan, logits);
    }
    if (it > 0) g.push_back(ms_since(t0));
  }
  (void)r.diagnostics().set_timing(true);
  if (!s) return s.with_context("graph replay");
  return median(g);
}

// What the floors of a run use: the ceilings and the state format.
struct FloorModel {
  Ceilings ceil;
  WeightBytes wb;
  int64_t expert_parallel = 1;
};

// Ops aggregated over layers (by name) with the cost model's floors, bytes and flops for the same names; the
// per-layer ops and the rest (embed, head) also summed apart.
void aggregate(const io::ModelConfig& cfg, const Samples& samples, const FloorModel& fm, BenchCase& c) {
  std::map<std::string, BenchOp> agg;
  for (const auto& [key, v] : samples.ops) {
    const double ms = median(v);
    agg[key.first].measured_ms += ms;
    (key.second >= 0 ? c.layers_ms : c.head_ms) += ms;
  }
  const StepShape shape{c.seqs, c.new_tokens, c.context, c.logits_rows, fm.expert_parallel};
  for (const OpCost& oc : step_costs(cfg, shape, fm.wb, cfg.num_hidden_layers)) {
    BenchOp& op = agg[oc.name];
    const double f = 1e3 * oc.floor_s(fm.ceil);
    op.floor_ms += f;
    op.bytes += oc.bytes;
    op.flops += oc.flops;
    c.floor_ms += f;
    (oc.layer >= 0 ? c.layers_floor_ms : c.head_floor_ms) += f;
  }
  for (auto& [name, op] : agg) {
    if (op.measured_ms == 0 && op.floor_ms == 0) continue;
    op.name = name;
    c.ops_ms += op.measured_ms;
    c.ops.push_back(op);
  }
}

// DP attention (ModelRunner::state_ranks() > 1): the state split into one range of slots and blocks per rank, as the
// engine's StateCache splits it; a bench plan's sequence s goes to rank s % ranks (its (s / ranks)-th slot and
// blocks there), so the batch is spread over the ranks as the engine's admission spreads it.
struct StateSpread {
  int32_t ranks = 1;
  int64_t slots_per_rank = 0, blocks_per_rank = 0;
};

void spread_over_ranks(const StateSpread& sp, int64_t blocks_per_seq, scheduler::BatchPlan& plan,
                       std::vector<std::vector<cache::BlockId>>& tables) {
  if (sp.ranks <= 1) return;
  for (size_t s = 0; s < plan.seqs.size(); ++s) {
    const int64_t q = int64_t(s) % sp.ranks, i = int64_t(s) / sp.ranks;
    plan.seqs[s].slot = cache::SlotId(q * sp.slots_per_rank + i);
    for (size_t j = 0; j < tables[s].size(); ++j)
      tables[s][j] = cache::BlockId(q * sp.blocks_per_rank + i * blocks_per_seq + int64_t(j));
  }
}

// Collective traffic and time per step (several ranks): bytes and calls from the runner's counters, the time from
// rank 0's collective ops.
void add_comm(const Samples& samples, int64_t steps, BenchCase& c) {
  double ms = 0;
  bool any = false;
  for (const BenchOp& op : c.ops)
    if (op.name == "moe_allreduce" || op.name == "moe_dispatch" || op.name == "moe_combine" ||
        op.name == "attn_allreduce") {
      ms += op.measured_ms;
      any = true;
    }
  if (!any || steps <= 0) return;
  c.comm_bytes_per_step = double(samples.comm.bytes) / double(steps);
  c.comm_calls_per_step = double(samples.comm.calls) / double(steps);
  c.comm_ms = ms;
}

BenchCase run_case(runner::ModelRunner& r, const cache::StateLayout& layout, const BenchOptions& o, const FloorModel& fm,
                   const StateSpread& spread, const char* title, int64_t seqs, int64_t new_tokens, int64_t ctx,
                   bool verify = false) {
  BenchCase c;
  c.title = title;
  c.seqs = seqs;
  c.new_tokens = new_tokens;
  c.context = ctx;
  c.logits_rows = verify ? seqs * new_tokens : seqs;
  std::vector<std::vector<cache::BlockId>> tables;
  const int64_t blocks_per_seq = layout.blocks_per_sequence(ctx + new_tokens);
  scheduler::BatchPlan plan =
      make_bench_plan(seqs, new_tokens, ctx, blocks_per_seq, r.config().vocab_size, tables, verify);
  spread_over_ranks(spread, blocks_per_seq, plan, tables);
  Samples samples;
  if (Status s = time_steps(r, plan, o.iters, samples); !s) {
    c.error = s.message();
    return c;
  }
  aggregate(r.config(), samples, fm, c);
  add_comm(samples, int64_t(samples.step_ms.size()), c);
  c.step_ms = median(samples.step_ms);
  c.peak_device_bytes = r.diagnostics().device_bytes_in_use();
  if (new_tokens == 1) {
    auto g = time_graph_steps(r, plan, o.iters);
    if (!g) {
      c.error = g.status().message();
    } else {
      c.graph_step_ms = *g;
      c.user_ms = *g;
      c.user_floor_ms = c.floor_ms;
    }
  }
  return c;
}

// The prefill of o.prefill tokens in steps of o.prefill_chunk (each step one chunk at the positions after the
// previous ones, so attention reads the state the earlier chunks wrote): a one-chunk warm-up, then one timed pass.
// step_ms = the whole pass (time to first token), op times summed over chunks, floors of the unchunked prefill.
BenchCase run_chunked_prefill(runner::ModelRunner& r, const cache::StateLayout& layout, const BenchOptions& o,
                              const FloorModel& fm) {
  BenchCase c;
  c.title = "prefill";
  c.seqs = 1;
  c.new_tokens = o.prefill;
  c.context = 0;
  c.logits_rows = 1;
  c.chunk = o.prefill_chunk;
  std::vector<std::vector<cache::BlockId>> tables;
  std::vector<float> logits;
  Samples sums;
  auto chunk_plan = [&](int64_t pos) {
    const int64_t n = std::min(o.prefill_chunk, o.prefill - pos);
    return make_bench_plan(1, n, pos, layout.blocks_per_sequence(pos + n), r.config().vocab_size, tables);
  };
  Status s = r.step(chunk_plan(0), logits);  // warm-up (plans, buffers, cuBLASLt heuristics)
  double wall = 0;
  for (int64_t pos = 0; pos < o.prefill && s.is_ok(); pos += o.prefill_chunk) {
    const scheduler::BatchPlan plan = chunk_plan(pos);
    const auto t0 = std::chrono::steady_clock::now();
    s = r.step(plan, logits);
    wall += ms_since(t0);
    c.peak_device_bytes = std::max(c.peak_device_bytes, r.diagnostics().device_bytes_in_use());
    if (!s) break;
    auto times = r.diagnostics().op_times();
    if (!times) {
      s = times.status();
      break;
    }
    for (const auto& t : *times) {
      auto& v = sums.ops[{t.name, t.layer}];
      if (v.empty()) v.push_back(0.0f);
      v[0] += t.ms;
    }
  }
  if (!s) {
    c.error = s.message();
    return c;
  }
  aggregate(r.config(), sums, fm, c);
  c.step_ms = wall;
  return c;
}

// The floor of a prefill of `total` tokens run in chunks of `chunk`: the sum of each chunk's step floor (each chunk
// re-reads the weights and attends the state the earlier ones wrote).
double chunked_floor_ms(const io::ModelConfig& cfg, int64_t total, int64_t chunk, const FloorModel& fm) {
  double ms = 0;
  for (int64_t pos = 0; pos < total; pos += chunk) {
    const StepShape shape{1, std::min(chunk, total - pos), pos, 1, fm.expert_parallel};
    for (const OpCost& oc : step_costs(cfg, shape, fm.wb, cfg.num_hidden_layers)) ms += 1e3 * oc.floor_s(fm.ceil);
  }
  return ms;
}

// The prefill as the engine runs it: the prompt in steps of `chunk` tokens, without per-op events; the median over
// `iters` passes (after one warm-up pass) of the host wall time of the whole prompt (time to first token).
Status time_user_prefill(runner::ModelRunner& r, const cache::StateLayout& layout, const BenchOptions& o,
                         const FloorModel& fm, BenchCase& c) {
  const int64_t chunk = o.prefill_chunk > 0 ? std::min(o.prefill_chunk, o.prefill) : std::min(kEngineChunk, o.prefill);
  std::vector<std::vector<cache::BlockId>> tables;
  std::vector<float> logits;
  DSI_RETURN_IF_ERROR(r.diagnostics().set_timing(false));
  // The device's busy time too where the backend has step events (two events a step).
  const bool events = bool(r.diagnostics().set_step_events(true));
  std::vector<double> walls, busy;
  Status s;
  for (int64_t it = 0; it < o.iters + 1 && s.is_ok(); ++it) {
    double wall = 0, busy0 = 0;
    if (events) {
      auto g = r.diagnostics().step_gap_times();
      if (g) busy0 = g->busy_ms;
    }
    for (int64_t pos = 0; pos < o.prefill && s.is_ok(); pos += chunk) {
      const int64_t n = std::min(chunk, o.prefill - pos);
      const scheduler::BatchPlan plan =
          make_bench_plan(1, n, pos, layout.blocks_per_sequence(pos + n), r.config().vocab_size, tables);
      const auto t0 = std::chrono::steady_clock::now();
      s = r.step(plan, logits);
      wall += ms_since(t0);
    }
    if (it == 0) continue;
    walls.push_back(wall);
    if (events) {
      auto g = r.diagnostics().step_gap_times();
      if (g) busy.push_back(g->busy_ms - busy0);
    }
  }
  if (events) (void)r.diagnostics().set_step_events(false);
  (void)r.diagnostics().set_timing(true);
  if (!s) return s.with_context("prefill as the engine runs it");
  c.user_ms = median(walls);
  if (!busy.empty()) c.user_device_ms = median(busy);
  c.user_chunk = chunk;
  c.user_floor_ms = chunked_floor_ms(r.config(), o.prefill, chunk, fm);
  return Status::ok();
}

}  // namespace

Status validate_bench_options(const BenchOptions& o) {
  if (o.iters < 1) return Status::errorf("bench iterations must be >= 1, found {}", o.iters);
  if (o.context < 0 || o.prefill < 0)
    return Status::errorf("bench context ({}) and prefill ({}) must be >= 0", o.context, o.prefill);
  if (o.prefill_chunk < 0) return Status::errorf("bench prefill chunk must be >= 0, found {}", o.prefill_chunk);
  for (int64_t b : o.batches)
    if (b < 1) return Status::errorf("bench batch size must be >= 1, found {}", b);
  for (int64_t k : o.verify_tokens)
    if (k < 1 || k > 64) return Status::errorf("bench verify tokens must be in [1, 64], found {}", k);
  DSI_RETURN_IF_ERROR(validate_ceilings_mode(o.ceilings));
  if (o.state_profile != "fp8" && o.state_profile != "bf16" && o.state_profile != "fp32")
    return Status::errorf("bench state profile must be fp8, bf16 or fp32, found '{}'", o.state_profile);
  if (o.state_format != "auto" && o.state_format != "fp32")
    return Status::errorf("bench state format must be auto or fp32, found '{}'", o.state_format);
  return Status::ok();
}

Status run_bench(runner::ModelRunner& r, const BenchOptions& o, const Ceilings& ceilings, BenchReport& report) {
  DSI_RETURN_IF_ERROR(validate_bench_options(o));
  const io::ModelConfig& cfg = r.config();
  FloorModel fm;
  fm.ceil = ceilings;
  DSI_ASSIGN_OR_RETURN(fm.wb, state_profile(cfg, o.state_profile));
  fm.expert_parallel = std::max<int64_t>(o.gpus, 1);
  report.ceilings = {ceilings.hbm_bytes_per_s, ceilings.bf16_flops, ceilings.fp8_flops, ceilings.source, o.state_profile};
  report.runner_name = r.name();
  report.num_layers = cfg.num_hidden_layers;
  const int64_t max_b = o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end());
  cache::StateCacheConfig cc;
  cc.kv_elem_bytes = r.kv_elem_bytes();
  cc.max_num_seqs = int32_t(max_b);
  const int64_t max_k = o.verify_tokens.empty() ? 0 : *std::max_element(o.verify_tokens.begin(), o.verify_tokens.end());
  cc.num_speculative_tokens = int32_t(max_k);
  DSI_ASSIGN_OR_RETURN(cache::StateLayout layout, cache::compute_state_layout(cfg, cc));
  StateSpread spread;
  spread.ranks = std::max(r.state_ranks(), 1);
  spread.slots_per_rank = (max_b + spread.ranks - 1) / spread.ranks;
  const int64_t blocks_decode = spread.slots_per_rank * layout.blocks_per_sequence(o.context + 1 + max_k);
  const int64_t blocks_prefill = layout.blocks_per_sequence(o.prefill);
  spread.blocks_per_rank = std::max(blocks_decode, blocks_prefill);
  DSI_RETURN_IF_ERROR(r.bind_state(layout, int32_t(spread.slots_per_rank * spread.ranks),
                                   int32_t(spread.blocks_per_rank * spread.ranks),
                                   std::max(o.context + 1 + max_k, o.prefill)));
  DSI_RETURN_IF_ERROR(r.diagnostics().randomize_state(7));
  DSI_RETURN_IF_ERROR(r.diagnostics().set_timing(true));
  report.ok = true;
  auto add = [&](BenchCase c) {
    report.ok &= c.error.empty();
    report.cases.push_back(std::move(c));
    if (o.on_case) o.on_case(report);
  };
  for (int64_t b : o.batches) add(run_case(r, layout, o, fm, spread, "decode", b, 1, o.context));
  for (int64_t k : o.verify_tokens)
    for (int64_t b : o.batches) add(run_case(r, layout, o, fm, spread, "verify", b, 1 + k, o.context, true));
  if (o.prefill > 0) {
    BenchCase c = o.prefill_chunk > 0 && o.prefill_chunk < o.prefill ? run_chunked_prefill(r, layout, o, fm)
                                                                      : run_case(r, layout, o, fm, spread, "prefill", 1, o.prefill, 0);
    if (c.error.empty())
      if (Status s = time_user_prefill(r, layout, o, fm, c); !s) c.error = s.message();
    add(std::move(c));
  }
  return Status::ok();
}

}  // namespace dsinfer::perf
