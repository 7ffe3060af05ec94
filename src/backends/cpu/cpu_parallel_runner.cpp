// CpuParallelRunner (see cpu_parallel_runner.h).
#include "backends/cpu/cpu_parallel_runner.h"

#include <cstring>
#include <deque>
#include <future>
#include <mutex>

#include "backends/cpu/cpu_runner.h"
#include "backends/cpu/host_step_sampling.h"
#include "parallel/expert_dispatch.h"
#include "parallel/fault_injection.h"
#include "parallel/inproc_comm.h"
#include "parallel/parallel_plan.h"
#include "parallel/socket_comm.h"
#include "parallel/shard_pool.h"
#include "parallel/step_queue.h"
#include "runner/rank_split.h"

namespace dsinfer::backends {

namespace {

class CpuParallelRunner final : public runner::ModelRunner, public runner::RunnerDiagnostics {
 public:
  // world ranks; this process holds `local` of them from rank `first` (all of them, or its own under a launch of one
  // process per rank).
  CpuParallelRunner(int32_t world, int32_t first, int32_t local, parallel::Layout layout)
      : layout_(layout), world_(world), first_(first), shards_(size_t(local)), out_(size_t(local)),
        traffic_(size_t(local)) {}
  ~CpuParallelRunner() override {
    (void)queue_.drain(wait_limit_);  // a queued step still uses the shards
    (void)pool_.run([&](int32_t r) {
      shards_[size_t(r)].reset();
      return Status::ok();
    });
  }
  Status init(const runner::RunnerOptions& opts, const std::optional<parallel::LaunchEnv>& launch);

  const io::ModelConfig& config() const override { return shards_[0]->config(); }
  std::string name() const override {
    const std::string here = per_process() ? fmt::format(", rank {} in this process", first_) : "";
    return fmt::format("cpu parallel ({} ranks{}, {}, {}): {}", world_, here, parallel::layout_name(layout_),
                       comms_[0]->name(), shards_[0]->name());
  }
  int32_t kv_elem_bytes() const override { return 4; }
  bool exact_math() const override { return true; }
  bool fp32_weights() const override { return shards_[0]->fp32_weights(); }
  runner::RunnerDiagnostics& diagnostics() override { return *this; }
  Status health() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return failed_;
  }
  int32_t state_ranks() const override { return dp() ? int32_t(shards_.size()) : 1; }

  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_len) override;
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override;
  Status bind_snapshots(int32_t n) override;
  Status bind_host_blocks(int32_t n) override;
  Status copy_state(std::span<const cache::StateCopy> copies) override;
  Status read_state(std::span<const cache::StateRegion> regions, std::span<uint8_t> out) override {
    DSI_RETURN_IF_ERROR(idle());
    if (dp()) return regions_dp(regions, out.data(), out.size(), cache::CopyRun::Dir::kToHost);
    DSI_RETURN_IF_ERROR(health());
    return shards_[0]->read_state(regions, out);  // the state is replicated
  }
  Status write_state(std::span<const cache::StateRegion> regions, std::span<const uint8_t> in) override {
    DSI_RETURN_IF_ERROR(idle());
    if (dp()) return regions_dp(regions, const_cast<uint8_t*>(in.data()), in.size(), cache::CopyRun::Dir::kToDevice);
    return all([&](CpuRunner& s) { return s.write_state(regions, in); });
  }
  Status set_hidden_capture(std::vector<int64_t> layers) override {
    return layers.empty()
               ? Status::ok()
               : Status::error("speculative decoding is not implemented with several ranks yet (docs/multi_gpu.md)");
  }
  // "Device" sampling and asynchronous steps on the host (docs/multi_gpu.md "Asynchronous steps at N > 1"): a
  // begun step and its sampling are queued on one driver thread (parallel::StepQueue), which runs the ranks (step())
  // and then samples rank 0's gathered logits with the reference Sampler, so the engine plans step t+1 while the
  // ranks compute step t. A step's token fills are resolved on that thread from the sampling queued before it.
  bool supports_device_sampling() const override { return true; }
  bool supports_async_steps() const override { return true; }
  Status begin_sampled_step(const scheduler::BatchPlan& plan) override;
  Status sample_rows(const sampling::PackedRows& rows, std::vector<ops::SampleRowOut>& out) override {
    if (!launched_.empty()) return Status::error("cpu parallel runner: sample_rows while samplings are outstanding");
    DSI_RETURN_IF_ERROR(launch_sample_rows(rows));
    return wait_sample_rows(out);
  }
  Status launch_sample_rows(const sampling::PackedRows& rows) override;
  Status wait_sample_rows(std::vector<ops::SampleRowOut>& out) override;

 private:
  // Every queued step and sampling has run (the calls that touch the state or the shards directly wait for it).
  Status idle() {
    if (!queue_.drain(wait_limit_))
      fail(-1, Status::errorf("cpu parallel runner: a queued step did not end within {} ms", wait_limit_.count()));
    return health();
  }
  Status run_step(const scheduler::BatchPlan& plan, std::vector<float>& logits);
  bool dp() const { return layout_ == parallel::Layout::kDataParallel; }
  bool per_process() const { return int32_t(shards_.size()) < world_; }  // one process per rank (torchrun)
  Status same_plan_everywhere(const scheduler::BatchPlan& plan);
  // The first failure of any rank: recorded with its rank, every communicator aborted (ranks blocked in a
  // collective return at once). Called on the failing rank's thread, or by the pool at its deadline (rank -1).
  void fail(int32_t rank, const Status& cause) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!failed_.is_ok()) return;
    failed_ = rank >= 0 ? Status::errorf("rank {} failed: {}", rank, cause.message()) : cause;
    for (auto& c : comms_) c->abort(failed_);
  }
  template <typename F>
  Status all(F&& f) {
    DSI_RETURN_IF_ERROR(health());
    Status st = pool_.run([&](int32_t r) { return f(*shards_[size_t(r)]); });
    return st.is_ok() ? st : health();
  }
  Status load_rank(const runner::RunnerOptions& opts, int32_t i);  // local shard i: rank first_ + i
  // The planted step fault of rank r, fired at its first collective of that step (its peers wait there).
  Status step_fault(int32_t r) const { return fault_.hits_step(r, steps_) ? fault_.fire(steps_) : Status::ok(); }
  Status copy_one(const cache::StateCopy& c);
  // DP: each region on the rank holding its block (snapshots: the shared pool), host bytes back to back.
  Status regions_dp(std::span<const cache::StateRegion> regions, uint8_t* host, size_t bytes, cache::CopyRun::Dir dir);

  parallel::Layout layout_;
  int32_t world_ = 1, first_ = 0;  // the group's ranks; the first held here (shards_[i] is rank first_ + i)
  parallel::ShardPool pool_;
  std::vector<std::unique_ptr<parallel::Communicator>> comms_;
  std::vector<std::unique_ptr<CpuRunner>> shards_;
  std::vector<std::vector<float>> out_;  // each local rank's logits (EP: identical to the first's, dropped)
  parallel::FaultInjection fault_;
  int64_t steps_ = 0;  // written between steps by the caller, read by the ranks during one
  mutable std::mutex mu_;
  Status failed_ = Status::ok();
  // DP attention: each rank's part of the plan (runner/rank_split.h), its dispatch traffic; the snapshot and
  // host-tier pools every rank shares (one process, host memory).
  runner::RankPlans split_;
  std::vector<parallel::DispatchStats> traffic_;
  int32_t slots_per_rank_ = 0, blocks_per_rank_ = 0;
  int64_t slot_bytes_ = 0, block_bytes_ = 0;
  std::vector<float> snapshots_, host_blocks_;
  int32_t num_snapshots_ = 0, num_host_blocks_ = 0;
  // Asynchronous steps: the driver thread and what its jobs share (touched by the jobs only, in queue order: the
  // begun step, its logits and status, the ids of the last sampling); the caller's side keeps the launched results.
  parallel::StepQueue queue_;
  std::chrono::milliseconds wait_limit_{std::chrono::minutes(10)};  // init: the pool's deadline + 5 s
  std::shared_ptr<HostStep> begun_;  // caller side: the step of the last begin_sampled_step
  std::vector<float> step_logits_;
  Status step_status_ = Status::ok();
  std::vector<int32_t> last_ids_;
  sampling::Sampler sampler_;
  struct Launched {
    std::promise<Status> done;
    std::vector<ops::SampleRowOut> out;
  };
  std::deque<std::pair<std::shared_ptr<Launched>, std::future<Status>>> launched_;
};

Status CpuParallelRunner::load_rank(const runner::RunnerOptions& opts, int32_t i) {
  const int32_t r = first_ + i, n = world_;
  if (fault_.hits_load(r)) return fault_.fire(0);
  DSI_ASSIGN_OR_RETURN(auto model, load_cpu_model(opts.model_dir, opts.numerics, opts.engram_placement));
  const io::ModelConfig& cfg = model->config();
  DSI_ASSIGN_OR_RETURN(const parallel::ExpertRange range, parallel::expert_range(cfg.n_routed_experts, r, n));
  model::ExpertShard shard;
  parallel::Communicator* comm = comms_[size_t(i)].get();
  const parallel::DispatchShape shape{0, cfg.num_experts_per_tok, cfg.hidden_size, cfg.n_routed_experts};
  // Every pair's output through `route` (dispatch_combine or gather_pair_outputs); a step fault fires first.
  using Route = decltype(&parallel::dispatch_combine);
  const auto exchange_by = [this, comm, r, i, shape](Route route) {
    return [this, comm, r, i, shape, route](int64_t, std::span<const float> x, std::span<const int32_t> idx,
                                         std::span<const float> wt, const model::ExpertCompute& compute,
                                         std::vector<float>& y) -> Status {
      DSI_RETURN_IF_ERROR(step_fault(r));
      parallel::DispatchShape sh = shape;
      sh.tokens = int64_t(idx.size()) / shape.topk;
      return route(*comm, sh, x, idx, wt, compute, y, &traffic_[size_t(i)]);
    };
  };
  if (dp()) {  // this rank's tokens only; the routed pairs go to the experts' ranks, the shared expert stays here
    shard.exchange = exchange_by(&parallel::dispatch_combine);
  } else {  // EP and TP: every rank every token; its experts' partial MoE output summed over the ranks
    // A rank's partial sum, reduced in rank order (fp64, one rounding); a step fault fires at the rank's first.
    // Also the exact gathers (a buffer this rank fills only its part of: the sum is an all-gather).
    const auto reduce = [this, comm, r](std::vector<float>& partial) -> Status {
      DSI_RETURN_IF_ERROR(step_fault(r));
      return comm->all_reduce_sum(partial.data(), partial.size(), nullptr);
    };
    shard.lo = range.lo;
    shard.hi = range.hi;
    shard.shared = r == 0;
    shard.reduce = reduce;
    if (opts.batch_invariant)  // N ranks give one rank's bits: every pair's output gathered, combined here
      shard.exchange = exchange_by(&parallel::gather_pair_outputs);
    if (layout_ == parallel::Layout::kTensorParallel) {  // and its query heads' share of the attention output
      DSI_ASSIGN_OR_RETURN(const parallel::HeadRange heads, parallel::head_range(cfg.num_attention_heads, r, n));
      model::HeadShard hs;
      hs.lo = heads.lo;
      hs.hi = heads.hi;
      hs.exact = opts.batch_invariant;
      hs.whole_groups = parallel::heads_in_whole_groups(cfg.num_attention_heads, cfg.o_groups, n);
      hs.reduce = reduce;
      hs.gather = reduce;
      DSI_RETURN_IF_ERROR(model->set_head_shard(std::move(hs)));
    }
  }
  DSI_RETURN_IF_ERROR(model->set_expert_shard(std::move(shard)));
  shards_[size_t(i)] = std::make_unique<CpuRunner>(std::move(model));
  return Status::ok();
}

Status CpuParallelRunner::init(const runner::RunnerOptions& opts, const std::optional<parallel::LaunchEnv>& launch) {
  if (opts.communicator != "auto" && opts.communicator != "in-process")
    return Status::errorf("the cpu backend's ranks use the in-process communicator, not '{}'", opts.communicator);
  if (launch && opts.communicator != "auto")
    return Status::errorf("WORLD_SIZE={}: one process per rank talks over sockets (--communicator auto), not '{}'",
                          launch->world, opts.communicator);
  if (opts.collective_timeout_ms < 1) return Status::errorf("collective timeout {} ms", opts.collective_timeout_ms);
  DSI_ASSIGN_OR_RETURN(fault_, parallel::parse_fault_injection(opts.fault_injection, world_, per_process()));
  const auto timeout = std::chrono::milliseconds(opts.collective_timeout_ms);
  if (launch) {  // the rendezvous before the load: every process's failure then reaches the others
    DSI_ASSIGN_OR_RETURN(auto comm, parallel::connect_socket_group(*launch, parallel::CommOptions{timeout}));
    comms_.push_back(std::move(comm));
  } else {
    comms_ = parallel::make_inprocess_group(world_, parallel::CommOptions{timeout});
  }
  pool_.set_on_failure([this](int32_t i, const Status& cause) { fail(first_ + i, cause); });
  pool_.set_deadline(timeout + std::chrono::seconds(5));  // the communicator's own deadline comes first
  wait_limit_ = timeout + std::chrono::seconds(10);       // a queued step ends by the pool's deadline
  Status st = pool_.start(int32_t(shards_.size()), [&](int32_t i) { return load_rank(opts, i); });
  return st.is_ok() ? st : health();
}

// One process per rank: every process runs the same engine on the same requests, so every step's plan (its
// sequences, tokens, positions, slots and blocks, and the tokens filled in from the last sampling) must be the same
// on every rank. An all-gather of the plan's hash before the step checks it: a rank that differs ends the group
// with an error naming it and the step, on every process alike (each compares every rank's hash).
Status CpuParallelRunner::same_plan_everywhere(const scheduler::BatchPlan& plan) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the plan's fields
  auto mix = [&h](const void* p, size_t n) {
    for (size_t k = 0; k < n; ++k) h = (h ^ static_cast<const uint8_t*>(p)[k]) * 1099511628211ull;
  };
  auto mix_v = [&mix](const auto& v) {
    const uint64_t n = v.size();
    mix(&n, sizeof n);
    if (n) mix(v.data(), n * sizeof(v[0]));
  };
  mix(&plan.step, sizeof plan.step);
  for (const scheduler::SeqPlan& q : plan.seqs) {
    const int64_t f[] = {int64_t(q.seq_id), int64_t(q.request_id), q.start_pos, q.num_new_tokens, q.token_offset,
                         q.is_prefill, q.needs_logits, q.logits_row, q.num_spec_tokens, q.slot};
    mix(f, sizeof f);
    mix_v(q.block_table);
  }
  mix_v(plan.token_ids);
  mix_v(plan.positions);
  mix_v(plan.logits_token_index);
  for (const cache::StateCopy& c : plan.state_copies) {
    const int32_t f[] = {int32_t(c.kind), c.src, c.dst};
    mix(f, sizeof f);
  }
  if (fault_.hits_plan(first_, steps_)) h ^= 1;  // test only: this rank's plan looks different
  std::vector<uint64_t> all(static_cast<size_t>(world_));
  if (Status st = comms_[0]->all_gather(&h, all.data(), sizeof h, nullptr); !st.is_ok()) {
    fail(-1, st);
    return health();
  }
  for (int32_t r = 1; r < world_; ++r)
    if (all[size_t(r)] != all[0]) {
      fail(-1, Status::errorf("step {}: rank {}'s plan differs from rank 0's (hash {:016x}, rank 0 {:016x}): every "
                              "process of a launch of one process per rank must run the same requests with the same "
                              "options", steps_, r, all[size_t(r)], all[0]));
      return health();
    }
  return Status::ok();
}

Status CpuParallelRunner::bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks,
                                     int64_t max_len) {
  DSI_RETURN_IF_ERROR(idle());
  if (!dp()) return all([&](CpuRunner& s) { return s.bind_state(layout, num_slots, num_blocks, max_len); });
  const int32_t n = int32_t(shards_.size());
  if (num_slots % n != 0 || num_blocks % n != 0)
    return Status::errorf("cpu parallel runner: {} slots / {} blocks do not split over {} ranks", num_slots,
                          num_blocks, n);
  slots_per_rank_ = num_slots / n;
  blocks_per_rank_ = num_blocks / n;
  slot_bytes_ = layout.slot_bytes;
  block_bytes_ = layout.block_bytes;
  return all([&](CpuRunner& s) { return s.bind_state(layout, slots_per_rank_, blocks_per_rank_, max_len); });
}

Status CpuParallelRunner::bind_snapshots(int32_t n) {
  DSI_RETURN_IF_ERROR(idle());
  if (!dp()) return all([&](CpuRunner& s) { return s.bind_snapshots(n); });
  if (n < 0) return Status::errorf("cpu parallel runner: {} snapshots", n);
  snapshots_.assign(size_t(n) * size_t(slot_bytes_ / 4), 0.0f);
  num_snapshots_ = n;
  return Status::ok();
}

Status CpuParallelRunner::bind_host_blocks(int32_t n) {
  DSI_RETURN_IF_ERROR(idle());
  if (!dp()) return all([&](CpuRunner& s) { return s.bind_host_blocks(n); });
  if (n < 0) return Status::errorf("cpu parallel runner: {} host blocks", n);
  host_blocks_.assign(size_t(n) * size_t(block_bytes_ / 4), 0.0f);  // one host tier for every rank
  num_host_blocks_ = n;
  return Status::ok();
}

// DP: one copy on the rank holding its slot / block(s), with the shared snapshot and host-tier pools; the same
// bounds checks and byte ranges as one runner (cache::plan_copy_runs).
Status CpuParallelRunner::copy_one(const cache::StateCopy& c) {
  DSI_ASSIGN_OR_RETURN(const runner::RankCopy rc,
                       runner::localize_copy(c, int32_t(shards_.size()), slots_per_rank_, blocks_per_rank_));
  cache::StateMemory mem = shards_[size_t(rc.rank)]->state_memory();
  mem.snapshots = reinterpret_cast<uint8_t*>(snapshots_.data());
  mem.num_snapshots = num_snapshots_;
  mem.host_blocks = reinterpret_cast<uint8_t*>(host_blocks_.data());
  mem.num_host_blocks = num_host_blocks_;
  return cache::copy_on_host(std::span<const cache::StateCopy>(&rc.local, 1), mem, "cpu parallel runner");
}

Status CpuParallelRunner::regions_dp(std::span<const cache::StateRegion> regions, uint8_t* host, size_t bytes,
                                      cache::CopyRun::Dir dir) {
  DSI_RETURN_IF_ERROR(health());
  size_t off = 0;
  for (const cache::StateRegion& g : regions) {
    cache::StateRegion local = g;
    int32_t rank = 0;
    if (g.kind == cache::StateRegion::Kind::kBlock) {
      rank = blocks_per_rank_ > 0 && g.id >= 0 ? g.id / blocks_per_rank_ : -1;
      if (rank < 0 || rank >= int32_t(shards_.size()))
        return Status::errorf("cpu parallel runner: state region block {} is on no rank", g.id);
      local.id -= rank * blocks_per_rank_;
    }
    cache::StateMemory mem = shards_[size_t(rank)]->state_memory();
    mem.snapshots = reinterpret_cast<uint8_t*>(snapshots_.data());
    mem.num_snapshots = num_snapshots_;
    const size_t n = size_t(g.kind == cache::StateRegion::Kind::kBlock ? mem.block_bytes : mem.slot_bytes);
    if (off + n > bytes) return Status::errorf("cpu parallel runner: state regions overrun a {}-byte buffer", bytes);
    DSI_RETURN_IF_ERROR(cache::regions_on_host(std::span<const cache::StateRegion>(&local, 1), mem, host + off, n, dir,
                                               "cpu parallel runner"));
    off += n;
  }
  if (off != bytes) return Status::errorf("cpu parallel runner: state regions hold {} bytes, the buffer {}", off, bytes);
  return Status::ok();
}

Status CpuParallelRunner::copy_state(std::span<const cache::StateCopy> copies) {
  DSI_RETURN_IF_ERROR(idle());
  if (!dp()) return all([&](CpuRunner& s) { return s.copy_state(copies); });  // the state is replicated
  DSI_RETURN_IF_ERROR(health());
  for (const cache::StateCopy& c : copies) DSI_RETURN_IF_ERROR(copy_one(c));  // between steps: no rank is running
  return Status::ok();
}

Status CpuParallelRunner::step(const scheduler::BatchPlan& plan, std::vector<float>& logits) {
  DSI_RETURN_IF_ERROR(idle());
  if (!plan.token_fills.empty()) return Status::error("cpu parallel runner: token fills outside begin_sampled_step");
  return run_step(plan, logits);
}

// The ranks run `plan` (on the caller's thread, or the driver thread for a queued step).
Status CpuParallelRunner::run_step(const scheduler::BatchPlan& plan, std::vector<float>& logits) {
  DSI_RETURN_IF_ERROR(health());
  if (!dp()) {
    if (per_process()) DSI_RETURN_IF_ERROR(same_plan_everywhere(plan));
    Status st = pool_.run([&](int32_t i) {
      return shards_[size_t(i)]->step(plan, i == 0 ? logits : out_[size_t(i)]);  // the first local rank's logits
    });
    ++steps_;
    return st.is_ok() ? st : health();
  }
  DSI_RETURN_IF_ERROR(runner::split_plan_by_rank(plan, int32_t(shards_.size()), slots_per_rank_, blocks_per_rank_,
                                                 split_));
  // Every rank runs a step, one without sequences too: it serves the routed pairs its experts are sent.
  Status st = pool_.run([&](int32_t r) { return shards_[size_t(r)]->step(split_.plans[size_t(r)], out_[size_t(r)]); });
  ++steps_;
  if (!st.is_ok()) return health().is_ok() ? st : health();
  const size_t V = size_t(config().vocab_size);
  logits.assign(size_t(plan.num_logits()) * V, 0.0f);
  for (size_t r = 0; r < shards_.size(); ++r)
    for (size_t k = 0; k < split_.rows[r].size(); ++k)
      std::memcpy(logits.data() + size_t(split_.rows[r][k]) * V, out_[r].data() + k * V, V * sizeof(float));
  return Status::ok();
}

Status CpuParallelRunner::begin_sampled_step(const scheduler::BatchPlan& plan) {
  DSI_RETURN_IF_ERROR(health());
  // A begun step without a launch (the engine's packing failed) is overwritten, as on cuda: it still runs, unsampled.
  auto st = std::make_shared<HostStep>(plan);
  begun_ = st;
  queue_.submit([this, st] {
    step_status_ = st->resolve_fills(last_ids_);
    if (step_status_.is_ok()) step_status_ = run_step(st->plan(), step_logits_);
  });
  return Status::ok();
}

Status CpuParallelRunner::launch_sample_rows(const sampling::PackedRows& rows) {
  DSI_RETURN_IF_ERROR(health());
  if (!begun_) return Status::error("cpu parallel runner: launch_sample_rows without a begin_sampled_step");
  if (launched_.size() >= 2) return Status::error("cpu parallel runner: two samplings are outstanding already");
  auto l = std::make_shared<Launched>();
  std::future<Status> f = l->done.get_future();
  auto st = std::move(begun_);
  queue_.submit([this, st, l, rows]() {
    Status s = step_status_;
    if (s.is_ok())
      s = st->sample(rows, step_logits_, config().vocab_size, config().eos_token_id, sampler_, l->out);
    last_ids_.assign(l->out.size(), -1);  // a failed sampling leaves no ids: the next step's fills then fail too
    if (s.is_ok())
      for (size_t j = 0; j < l->out.size(); ++j) last_ids_[j] = l->out[j].token;
    l->done.set_value(s);
  });
  launched_.emplace_back(std::move(l), std::move(f));
  return Status::ok();
}

Status CpuParallelRunner::wait_sample_rows(std::vector<ops::SampleRowOut>& out) {
  out.clear();
  if (launched_.empty()) return Status::error("cpu parallel runner: wait_sample_rows with no sampling launched");
  auto [l, f] = std::move(launched_.front());
  launched_.pop_front();
  if (f.wait_for(wait_limit_) != std::future_status::ready) {
    fail(-1, Status::errorf("cpu parallel runner: a queued step did not end within {} ms", wait_limit_.count()));
    return health();
  }
  const Status s = f.get();
  if (!s.is_ok()) return health().is_ok() ? s : health();
  out = std::move(l->out);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<runner::ModelRunner>> create_cpu_parallel_runner(
    const runner::RunnerOptions& opts, const std::optional<parallel::LaunchEnv>& launch) {
  if (opts.gpus < 2) return Status::errorf("the cpu parallel runner needs 2 or more ranks, got {}", opts.gpus);
  if (opts.load_format != runner::LoadFormat::kAuto)
    return Status::error("dummy weights are only supported by the cuda backend");
  const parallel::Layout layout = parallel::layout_of(
      {opts.gpus, opts.expert_parallel_size, opts.data_parallel_size, opts.tensor_parallel_size});
  // A launch of one process per rank was checked by parallel::validate_parallel (--gpus WORLD_SIZE, EP or TP).
  auto r = launch ? std::make_unique<CpuParallelRunner>(opts.gpus, launch->rank, 1, layout)
                  : std::make_unique<CpuParallelRunner>(opts.gpus, 0, opts.gpus, layout);
  DSI_RETURN_IF_ERROR(r->init(opts, launch));
  return std::unique_ptr<runner::ModelRunner>(std::move(r));
}

}  // namespace dsinfer::backends
