// ParallelRunner (see parallel_runner.h): creation (checks, per-GPU memory plan, the communicator: NCCL or the
// in-process group, shards on their worker threads) and the ModelRunner calls fanned out to every shard. Every
// shard call runs on the shard's own worker thread (whose current device is the shard's GPU), never on the
// caller's. A failure on any rank aborts the communicators and ends the runner (health(), docs/multi_gpu.md).
#include "backends/cuda/parallel/parallel_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>

#include "backends/cuda/parallel/dp_dispatch_cuda.h"
#include "backends/cuda/parallel/group_graphs.h"
#include "backends/cuda/parallel/inproc_device.h"
#include "backends/cuda/runner/cuda_runner.h"
#include "backends/cuda/runner/cuda_runner_impl.h"
#include "backends/cuda/runner/host_tier_cuda.h"
#include "backends/cuda/step/step_plan.h"
#include "cuda/cuda_common.h"
#include "model/tensor_table.h"
#include "model/weights_v41.h"
#include "parallel/eplb.h"
#include "parallel/fault_injection.h"
#include "parallel/inproc_comm.h"
#include "parallel/nccl_cuda.h"
#include "parallel/parallel_plan.h"
#include "parallel/shard_pool.h"
#include "runner/rank_split.h"

namespace dsinfer::backends {

namespace {

class ParallelRunner final : public runner::ModelRunner, public runner::RunnerDiagnostics {
 public:
  ParallelRunner(io::ModelConfig cfg, model::Numerics num, int32_t n, parallel::Layout layout)
      : cfg_(std::move(cfg)), num_(std::move(num)), layout_(layout), dp_(layout == parallel::Layout::kDataParallel),
        tp_(layout == parallel::Layout::kTensorParallel), shards_(size_t(n)), comms_(size_t(n)), out_(size_t(n)) {}
  ~ParallelRunner() override {
    // Shards and communicators are destroyed on their own threads (their GPU current), then the threads stop.
    pool_.set_on_failure(nullptr);
    (void)pool_.run([&](int32_t r) {
      if (r == 0) snapshots_.release();  // DP: the shared snapshot pool lives on rank 0's GPU
      shards_[size_t(r)].reset();
      comms_[size_t(r)].reset();
      return Status::ok();
    });
    (void)pool_.run([&](int32_t r) {
      if (r == 0) group_graphs_.reset();  // after every shard: their graphs' ranks on rank 0's GPU
      return Status::ok();
    });
  }
  Status init(const runner::RunnerOptions& opts);

  const io::ModelConfig& config() const override { return cfg_; }
  std::string name() const override {
    const std::string eplb = eplb_ ? fmt::format(", EPLB: {} redundant experts, every {} steps", redundant_, interval_) : "";
    return fmt::format("parallel ({} ranks on {} GPUs, {}{}, {}): {}", shards_.size(), devices_,
                       parallel::layout_name(layout_), eplb,
                       comms_[0] ? comms_[0]->name() : "", shards_[0] ? shards_[0]->name() : "");
  }
  // The shards' state format (every shard is made with the same options): the FP8 storage format where the one-GPU
  // runner takes it (RunnerOptions::fp8_state, official numerics), in EP, DP and TP alike
  // (GpuMultiGpu.Fp8StateRanksSharingOneGpuMatchOneRankBitForBit).
  int32_t kv_elem_bytes() const override { return shards_[0]->kv_elem_bytes(); }
  bool exact_math() const override { return shards_[0]->exact_math(); }
  bool fp32_weights() const override { return shards_[0]->fp32_weights(); }
  runner::RunnerDiagnostics& diagnostics() override { return *this; }
  Status health() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return failed_;
  }

  // DP attention: the engine's StateCache splits its slots and blocks into one range per rank.
  int32_t state_ranks() const override { return dp_ ? int32_t(shards_.size()) : 1; }
  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_len) override;
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override;
  // Device sampling in every layout. EP / TP: shard 0 alone computes logits and samples. DP attention: each rank
  // samples its own sequences' rows on its GPU (begin_dp_sampled_step and the two after it), so no logits come to
  // the host. With asynchronous steps no shard waits for its device work; without, EP / TP's other shards wait for
  // theirs (their stream is idle between steps, as EPLB's reloads need).
  bool supports_device_sampling() const override { return true; }
  Status begin_sampled_step(const scheduler::BatchPlan& plan) override {
    if (!plan.token_fills.empty() && !async_)
      return Status::error("parallel runner: token fills without asynchronous steps");
    DSI_RETURN_IF_ERROR(before_step());
    if (dp_) return begin_dp_sampled_step(plan);
    return checked(pool_.run([&](int32_t r) {
      DSI_RETURN_IF_ERROR(inject(r));
      std::vector<float> unused;
      return r == 0 || async_ ? shards_[size_t(r)]->begin_sampled_step(plan) : shards_[size_t(r)]->step(plan, unused);
    }));
  }
  Status sample_rows(const sampling::PackedRows& rows, std::vector<ops::SampleRowOut>& out) override {
    if (dp_) {
      DSI_RETURN_IF_ERROR(launch_sample_rows(rows));
      return wait_sample_rows(out);
    }
    return on_first([&](CudaRunner& s) { return s.sample_rows(rows, out); });
  }
  // Asynchronous steps (docs/multi_gpu.md "Asynchronous steps at N > 1"): ranks sharing one GPU (in-process
  // communicator) without EPLB. EP / TP: shard 0 samples; the other shards' token fills read its ids on the device
  // after its sampling's event (CudaRunner::set_token_source). DP: each rank fills its sequences' tokens from its
  // own sampling. No rank waits for the device in a step.
  bool supports_async_steps() const override { return async_; }
  Status launch_sample_rows(const sampling::PackedRows& rows) override {
    if (dp_) return launch_dp_sample_rows(rows);
    return on_first([&](CudaRunner& s) { return s.launch_sample_rows(rows); });
  }
  Status wait_sample_rows(std::vector<ops::SampleRowOut>& out) override {
    if (dp_) return wait_dp_sample_rows(out);
    return on_first([&](CudaRunner& s) { return s.wait_sample_rows(out); });
  }
  Status bind_snapshots(int32_t n) override;
  Status bind_host_blocks(int32_t n) override;
  Status copy_state(std::span<const cache::StateCopy> copies) override;
  Status read_state(std::span<const cache::StateRegion> regions, std::span<uint8_t> out) override {
    if (dp_) return Status::error("parallel runner: state export with DP attention is not implemented yet");
    return on_first([&](CudaRunner& s) { return s.read_state(regions, out); });  // the state is replicated
  }
  Status write_state(std::span<const cache::StateRegion> regions, std::span<const uint8_t> in) override {
    if (dp_) return Status::error("parallel runner: state import with DP attention is not implemented yet");
    return all([&](CudaRunner& s) { return s.write_state(regions, in); });
  }
  Status set_hidden_capture(std::vector<int64_t> layers) override {
    return layers.empty() ? Status::ok()
                          : Status::error("speculative decoding is not implemented with --gpus > 1 yet (docs/multi_gpu.md)");
  }

  double device_bytes_in_use() const override {
    double most = -1.0;  // ranks sharing a GPU see the same device, so the largest is one GPU's use
    for (const auto& s : shards_) {
      if (s) most = std::max(most, s->device_bytes_in_use());
    }
    return most;
  }
  Status set_timing(bool on) override { return all([&](CudaRunner& s) { return s.set_timing(on); }); }
  Result<std::vector<OpTime>> op_times() override {
    std::vector<OpTime> times;  // shard 0's: the shards run the same ops in lockstep (the all-reduce joins them)
    DSI_RETURN_IF_ERROR(on_first([&](CudaRunner& s) -> Status {
      DSI_ASSIGN_OR_RETURN(times, s.op_times());
      return Status::ok();
    }));
    return times;
  }
  Status randomize_state(uint64_t seed) override {
    return all([&](CudaRunner& s) { return s.randomize_state(seed); });  // same seed: identical replicas
  }
  // Step events (dsinfer bench --engine-decode): rank 0's stream, which every collective of a step joins.
  Status set_step_events(bool on) override { return on_first([&](CudaRunner& s) { return s.set_step_events(on); }); }
  Result<StepGapTimes> step_gap_times() override {
    StepGapTimes t;
    DSI_RETURN_IF_ERROR(on_first([&](CudaRunner& s) -> Status {
      DSI_ASSIGN_OR_RETURN(t, s.step_gap_times());
      return Status::ok();
    }));
    return t;
  }
  int64_t graphs_captured() const override { return group_graphs_ ? group_graphs_->captures() : 0; }
  CommTraffic take_comm_traffic() override {
    CommTraffic sum;  // between steps: no shard is running
    for (auto& s : shards_) {
      const CommTraffic t = s->take_comm_traffic();
      sum.bytes += t.bytes;
      sum.calls += t.calls;
    }
    return sum;
  }

 private:
  // EPLB (docs/multi_gpu.md): every interval_ steps, before the next step runs, the placement of every layer is
  // recomputed from rank 0's counts and applied on every shard (parallel_runner_eplb_cuda.cpp).
  // A failed rebalance may have reached some shards and not others (they would disagree on which rank computes
  // an expert): it ends this runner, every later step returns its error.
  Status before_step() {
    DSI_RETURN_IF_ERROR(health());
    if (eplb_ && steps_ > 0 && steps_ % interval_ == 0) {
      if (Status s = rebalance(); !s.is_ok()) {
        fail(-1, Status::errorf("eplb rebalance failed, the GPUs' expert placements may differ; restart the engine "
                                "({})", s.message()));
        return health();
      }
    }
    ++steps_;
    return Status::ok();
  }
  Status rebalance();
  Status make_comms(const runner::RunnerOptions& opts, int32_t n);

  // The first failure of any rank (rank -1: not one rank's): recorded, every communicator aborted so no rank
  // stays blocked in a collective. Called on the failing rank's thread or by the pool at its deadline.
  void fail(int32_t rank, const Status& cause) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!failed_.is_ok()) return;
    failed_ = rank >= 0 ? Status::errorf("rank {} (GPU {}) failed: {}", rank, rank % devices_, cause.message()) : cause;
    for (auto& c : comms_)
      if (c) c->abort(failed_);
  }
  // A fanned-out call's result: ok, or the runner's failure (the root cause with its rank) once it has one.
  Status checked(const Status& st) {
    if (st.is_ok()) return st;
    const Status h = health();
    return h.is_ok() ? st : h;
  }
  // Test-only planted fault (parallel/fault_injection.h) at the start of rank r's step.
  Status inject(int32_t r) { return fault_.hits_step(r, steps_ - 1) ? fault_.fire(steps_ - 1) : Status::ok(); }

  Status copy_replicated_state(std::span<const cache::StateCopy> copies);  // EP / TP: copy_state
  // DP attention, ranks sharing one GPU: every rank's token count in the split step, which sizes the
  // fixed-capacity exchange (expert_exchange_cuda.cpp: no count goes through the host). Empty (the exchange of
  // counts) over NCCL, on several GPUs, with DSINFER_DP_EXCHANGE=counts, or in a step whose N x largest per-rank
  // token count passes detail::kDpFixedExchangeMaxRows (prefill chunks: the fixed buffers grow as N^2).
  void set_rank_tokens() {
    rank_tokens_.clear();
    group_key_ = -1;
    if (!fixed_exchange_) return;
    int64_t most = 0;
    for (const scheduler::BatchPlan& p : split_.plans) most = std::max<int64_t>(most, p.num_tokens());
    if (most * int64_t(split_.plans.size()) > detail::kDpFixedExchangeMaxRows) return;
    for (const scheduler::BatchPlan& p : split_.plans) rank_tokens_.push_back(p.num_tokens());
    group_key_ = dp_group_key();
  }
  int64_t dp_group_key();
  // Every rank's part of a DP step: its token counts (the exchange's capacities) and the group's graph key.
  void set_dp_step(int32_t r) {
    shards_[size_t(r)]->set_dp_rank_tokens(rank_tokens_);
    shards_[size_t(r)]->set_dp_group_key(group_key_);
  }
  // DP attention's device sampling: every rank its part of the plan and of the rows, on its own GPU.
  Status begin_dp_sampled_step(const scheduler::BatchPlan& plan);
  Status launch_dp_sample_rows(const sampling::PackedRows& rows);
  Status wait_dp_sample_rows(std::vector<ops::SampleRowOut>& out);
  // Graphs of the whole group's decode steps (EP and TP with the ranks on one GPU, in-process: group_graphs.h),
  // dropped where a shard would drop its own (new state, a rebalance).
  Status enable_group_graphs();
  Status enable_async_steps();
  Status drop_group_graphs() {
    if (!group_graphs_) return Status::ok();
    return checked(pool_.run([&](int32_t r) {
      if (r == 0) group_graphs_->clear();
      return Status::ok();
    }));
  }

  template <typename F>
  Status all(F&& f) {
    DSI_RETURN_IF_ERROR(health());
    return checked(pool_.run([&](int32_t r) { return f(*shards_[size_t(r)]); }));
  }
  template <typename F>
  Status on_first(F&& f) {
    DSI_RETURN_IF_ERROR(health());
    return checked(pool_.run([&](int32_t r) { return r == 0 ? f(*shards_[0]) : Status::ok(); }));
  }

  io::ModelConfig cfg_;
  model::Numerics num_;
  const parallel::Layout layout_;
  const bool dp_;  // DP attention + EP (parallel::layout_of), else EP with replicated attention and state
  const bool tp_;  // TP attention + EP: the state replicated, each shard the query heads of its output groups
  parallel::ShardPool pool_;
  std::vector<std::unique_ptr<CudaRunner>> shards_;
  std::vector<std::unique_ptr<parallel::Communicator>> comms_;
  int32_t devices_ = 1;  // GPUs used: rank r runs on GPU r % devices_ (in-process ranks may share one)
  // In-process ranks: the device side of the communicator (the all-reduce on the device when they share one GPU),
  // made before and destroyed after the communicators; the group's decode graphs and each rank's view of them.
  std::unique_ptr<CudaDeviceAccess> access_;
  bool async_ = false;  // enable_async_steps
  std::unique_ptr<GroupGraphs> group_graphs_;
  std::vector<std::unique_ptr<GroupGraphs::Rank>> graph_ranks_;
  parallel::FaultInjection fault_;
  bool eplb_ = false;
  int32_t redundant_ = 0;
  int64_t interval_ = 0, steps_ = 0;
  std::vector<parallel::Placement> placement_;  // per layer, identical on every shard
  mutable std::mutex mu_;
  Status failed_ = Status::ok();  // under mu_
  // DP attention: each rank's logits, its part of the plan (runner/rank_split.h), the ranges of the engine's slot and
  // block ids each rank holds, and the snapshot (on rank 0's GPU) and host-tier pools every rank shares.
  std::vector<std::vector<float>> out_;
  runner::RankPlans split_;
  // DP device sampling: each rank's rows of a launch, and where every row of each launch not yet waited for went
  // (oldest first: at most two) and of the latest launch (its ids feed the next step's token fills).
  std::vector<sampling::PackedRows> rank_rows_;
  std::deque<std::vector<runner::RankRow>> launched_;
  std::vector<runner::RankRow> last_launch_;
  std::vector<std::vector<ops::SampleRowOut>> rank_out_;
  bool fixed_exchange_ = false;  // init: DP ranks sharing one GPU
  std::vector<int64_t> rank_tokens_;
  // DP group graphs: the step's key (-1: eager), one id per shape of the whole group (every rank's tokens and
  // sequences), and the bound state's layout and length (fixed_shape_step).
  int64_t group_key_ = -1;
  std::map<std::vector<int64_t>, int64_t> group_keys_;
  cache::StateLayout state_layout_;
  int64_t max_len_ = 0;
  int32_t slots_per_rank_ = 0, blocks_per_rank_ = 0;
  int64_t slot_bytes_ = 0, block_bytes_ = 0;
  cuda::DeviceBuffer<uint8_t> snapshots_;
  PinnedHostBuffer host_blocks_;
  int64_t num_snapshots_ = 0, num_host_blocks_ = 0;
};

Status ParallelRunner::bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks,
                                  int64_t max_len) {
  slot_bytes_ = layout.slot_bytes;
  block_bytes_ = layout.block_bytes;
  state_layout_ = layout;
  max_len_ = max_len;
  DSI_RETURN_IF_ERROR(drop_group_graphs());
  if (!dp_) return all([&](CudaRunner& s) { return s.bind_state(layout, num_slots, num_blocks, max_len); });
  const int32_t n = int32_t(shards_.size());
  if (num_slots % n != 0 || num_blocks % n != 0)
    return Status::errorf("parallel runner: {} slots / {} blocks do not split over {} ranks", num_slots, num_blocks,
                          n);
  slots_per_rank_ = num_slots / n;
  blocks_per_rank_ = num_blocks / n;
  return all([&](CudaRunner& s) { return s.bind_state(layout, slots_per_rank_, blocks_per_rank_, max_len); });
}

Status ParallelRunner::step(const scheduler::BatchPlan& plan, std::vector<float>& logits) {
  DSI_RETURN_IF_ERROR(before_step());
  if (!dp_)
    return checked(pool_.run([&](int32_t r) {
      DSI_RETURN_IF_ERROR(inject(r));
      std::vector<float> unused;  // shards > 0 compute no logits
      return shards_[size_t(r)]->step(plan, r == 0 ? logits : unused);
    }));
  DSI_RETURN_IF_ERROR(runner::split_plan_by_rank(plan, int32_t(shards_.size()), slots_per_rank_, blocks_per_rank_,
                                                 split_));
  set_rank_tokens();
  // Every rank runs a step, one without sequences too: it serves the routed pairs its experts are sent.
  DSI_RETURN_IF_ERROR(checked(pool_.run([&](int32_t r) {
    DSI_RETURN_IF_ERROR(inject(r));
    set_dp_step(r);
    return shards_[size_t(r)]->step(split_.plans[size_t(r)], out_[size_t(r)]);
  })));
  const size_t V = size_t(cfg_.vocab_size);
  logits.assign(size_t(plan.num_logits()) * V, 0.0f);
  for (size_t r = 0; r < shards_.size(); ++r)
    for (size_t i = 0; i < split_.rows[r].size(); ++i)
      std::copy_n(out_[r].data() + i * V, V, logits.data() + size_t(split_.rows[r][i]) * V);
  return Status::ok();
}

// DP attention with the group's decode graphs (DSINFER_GROUP_GRAPHS=1, ranks sharing one GPU): a step is graphed when
// every rank with tokens runs a fixed-shape (decode) step; its key names the whole group's shape (every rank's
// tokens and sequences: the exchange's capacities and every rank's forward follow from it), the same on every rank.
int64_t ParallelRunner::dp_group_key() {
  if (!group_graphs_) return -1;
  std::vector<int64_t> shape;
  bool any = false;
  for (const scheduler::BatchPlan& p : split_.plans) {
    if (p.num_tokens() > 0 && !fixed_shape_step(p, state_layout_, max_len_)) return -1;
    any = any || p.num_tokens() > 0;
    shape.push_back(p.num_tokens());
    shape.push_back(p.num_seqs());
  }
  if (!any) return -1;
  const auto [it, fresh] = group_keys_.emplace(std::move(shape), int64_t(group_keys_.size()));
  return it->second;
}

// DP attention with device sampling: each rank runs its part of the plan (its token fills mapped to the rows its own
// previous sampling produced: a sequence never changes rank) and keeps its logits on its GPU.
Status ParallelRunner::begin_dp_sampled_step(const scheduler::BatchPlan& plan) {
  DSI_RETURN_IF_ERROR(runner::split_plan_by_rank(plan, int32_t(shards_.size()), slots_per_rank_, blocks_per_rank_,
                                                 split_, last_launch_));
  set_rank_tokens();
  return checked(pool_.run([&](int32_t r) {
    DSI_RETURN_IF_ERROR(inject(r));
    set_dp_step(r);
    return shards_[size_t(r)]->begin_sampled_step(split_.plans[size_t(r)]);
  }));
}

// Every rank launches a sampling, of no rows too (its outstanding samplings then stay in step with the others'):
// each rank's rows of the last begun step, on its stream.
Status ParallelRunner::launch_dp_sample_rows(const sampling::PackedRows& rows) {
  DSI_RETURN_IF_ERROR(health());
  if (launched_.size() >= 2) return Status::error("parallel runner: two samplings are outstanding already");
  std::vector<runner::RankRow> where;
  DSI_RETURN_IF_ERROR(runner::split_sample_rows(rows, split_, rank_rows_, where));
  DSI_RETURN_IF_ERROR(
      checked(pool_.run([&](int32_t r) { return shards_[size_t(r)]->launch_sample_rows(rank_rows_[size_t(r)]); })));
  last_launch_ = where;
  launched_.push_back(std::move(where));
  return Status::ok();
}

// The oldest launch: every rank's results, back in the order of the launch's rows.
Status ParallelRunner::wait_dp_sample_rows(std::vector<ops::SampleRowOut>& out) {
  out.clear();
  DSI_RETURN_IF_ERROR(health());
  if (launched_.empty()) return Status::error("parallel runner: wait_sample_rows with no sampling launched");
  rank_out_.resize(shards_.size());
  DSI_RETURN_IF_ERROR(
      checked(pool_.run([&](int32_t r) { return shards_[size_t(r)]->wait_sample_rows(rank_out_[size_t(r)]); })));
  const std::vector<runner::RankRow> where = std::move(launched_.front());
  launched_.pop_front();
  out.resize(where.size());
  for (size_t i = 0; i < where.size(); ++i) {
    const std::vector<ops::SampleRowOut>& got = rank_out_[size_t(where[i].rank)];
    if (size_t(where[i].row) >= got.size())
      return Status::errorf("parallel runner: rank {} returned {} sampled rows, row {} missing", where[i].rank,
                            got.size(), where[i].row);
    out[i] = got[size_t(where[i].row)];
  }
  return Status::ok();
}

// DP attention: one snapshot pool (on rank 0's GPU) and one host tier for every rank, so a cached prefix is
// restored on whichever rank admits its next sequence. EP / TP (the state replicated on every rank): each shard its
// own snapshots on its GPU, and one host tier for all, which rank 0 spills to and every rank restores from.
Status ParallelRunner::bind_snapshots(int32_t n) {
  if (!dp_) return all([&](CudaRunner& s) { return s.bind_snapshots(n); });
  if (n < 0) return Status::errorf("parallel runner: {} snapshots", n);
  num_snapshots_ = n;
  return checked(pool_.run([&](int32_t r) {
    return r == 0 && n > 0 ? snapshots_.alloc(size_t(n) * size_t(slot_bytes_), "prefix-cache snapshots") : Status::ok();
  }));
}

Status ParallelRunner::bind_host_blocks(int32_t n) {
  if (n < 0) return Status::errorf("parallel runner: {} host blocks", n);
  num_host_blocks_ = n;
  return host_blocks_.alloc(size_t(n) * size_t(block_bytes_), "the prefix-cache host tier");
}

// DP attention: each copy on the rank holding its slot / block(s), in order (each rank's copies are waited for
// before the next rank's: a snapshot one rank writes may be the next copy's source on another).
Status ParallelRunner::copy_state(std::span<const cache::StateCopy> copies) {
  if (!dp_) return copy_replicated_state(copies);
  DSI_RETURN_IF_ERROR(health());
  const int32_t n = int32_t(shards_.size());
  std::vector<cache::StateCopy> run;
  int32_t rank = -1;
  auto flush = [&]() -> Status {
    if (run.empty()) return Status::ok();
    Status st = checked(pool_.run([&](int32_t r) {
      return r == rank ? shards_[size_t(r)]->copy_state_with_pools(run, snapshots_.data(), num_snapshots_,
                                                                    host_blocks_.data(), num_host_blocks_)
                       : Status::ok();
    }));
    run.clear();
    return st;
  };
  for (const cache::StateCopy& c : copies) {
    DSI_ASSIGN_OR_RETURN(const runner::RankCopy rc, runner::localize_copy(c, n, slots_per_rank_, blocks_per_rank_));
    if (rc.rank != rank) DSI_RETURN_IF_ERROR(flush());
    rank = rc.rank;
    run.push_back(rc.local);
  }
  return flush();
}

// EP / TP: every shard holds the same state, so every shard runs every copy against its own state and snapshots,
// except a spill to the shared host tier, which rank 0 alone writes. In order: the copies before a spill (restores
// from the host block it overwrites among them) finish on every shard before it, and it finishes before the next.
Status ParallelRunner::copy_replicated_state(std::span<const cache::StateCopy> copies) {
  DSI_RETURN_IF_ERROR(health());
  using Kind = cache::StateCopy::Kind;
  size_t begin = 0;
  while (begin < copies.size()) {
    const bool spill = copies[begin].kind == Kind::kBlockToHost;
    size_t end = begin + 1;
    while (end < copies.size() && (copies[end].kind == Kind::kBlockToHost) == spill) ++end;
    const std::span<const cache::StateCopy> run = copies.subspan(begin, end - begin);
    DSI_RETURN_IF_ERROR(checked(pool_.run([&](int32_t r) {
      return r == 0 || !spill ? shards_[size_t(r)]->copy_state_with_host_tier(run, host_blocks_.data(), num_host_blocks_)
                              : Status::ok();
    })));
    begin = end;
  }
  return Status::ok();
}

// One rebalance: counts -> per-layer greedy placement (a layer with no counted tokens keeps its placement) ->
// every shard reloads its changed slots. DSINFER_EPLB_LOG=1 prints one line per rebalance (the expected max/mean
// rank load of the counted tokens under the old and the new placements, averaged over the layers).
Status ParallelRunner::rebalance() {
  std::vector<uint32_t> counts;
  DSI_RETURN_IF_ERROR(on_first([&](CudaRunner& s) { return s.eplb_take_counts(counts); }));
  const size_t E = size_t(cfg_.n_routed_experts), n = shards_.size();
  if (counts.size() != placement_.size() * E) return Status::error("eplb: expert counts do not match the layers");
  std::vector<parallel::Placement> next = placement_;
  double before = 0, after = 0;
  int64_t layers = 0;
  for (size_t l = 0; l < placement_.size(); ++l) {
    std::vector<double> load(E);
    double sum = 0;
    for (size_t e = 0; e < E; ++e) sum += load[e] = double(counts[l * E + e]);
    if (sum <= 0) continue;
    DSI_ASSIGN_OR_RETURN(next[l], parallel::compute_placement(load, int32_t(n), redundant_, &placement_[l]));
    before += parallel::max_mean_ratio(parallel::expected_rank_loads(placement_[l], load));
    after += parallel::max_mean_ratio(parallel::expected_rank_loads(next[l], load));
    ++layers;
  }
  if (layers == 0) return Status::ok();
  std::vector<int32_t> reloaded(n, 0);
  DSI_RETURN_IF_ERROR(pool_.run([&](int32_t r) -> Status {
    DSI_ASSIGN_OR_RETURN(reloaded[size_t(r)], shards_[size_t(r)]->eplb_apply(next));
    return Status::ok();
  }));
  placement_ = std::move(next);
  DSI_RETURN_IF_ERROR(drop_group_graphs());  // the expert tables were rewritten under the captured steps
  if (const char* v = std::getenv("DSINFER_EPLB_LOG"); v && std::string(v) == "1") {
    int64_t total = 0;
    for (int32_t x : reloaded) total += x;
    std::fprintf(stderr, "eplb: step %lld: %lld layers rebalanced, max/mean rank load %.3f -> %.3f, %lld slots reloaded\n",
                 static_cast<long long>(steps_), static_cast<long long>(layers), before / double(layers),
                 after / double(layers), static_cast<long long>(total));
  }
  return Status::ok();
}

// Every GPU's free memory against the per-rank sizing (times the ranks sharing a GPU, in-process), before anything
// is allocated. query_device makes each GPU current in turn: the caller's current device is restored afterwards.
Status check_memory(const io::ModelConfig& cfg, int32_t n, int32_t devices, int32_t redundant) {
  parallel::RankMemory m =
      parallel::rank_memory(cfg.is_v41() ? model::weight_specs_v41(cfg) : model::weight_specs(cfg), n, redundant);
  const int32_t sharing = (n + devices - 1) / devices;
  m.dense_bytes *= sharing;
  m.expert_bytes *= sharing;
  int prev = 0;
  DSI_CUDA_TRY(cudaGetDevice(&prev));
  Status st = Status::ok();
  for (int32_t g = 0; g < devices && st.is_ok(); ++g) {
    auto d = cuda::query_device(g);
    st = d.is_ok() ? parallel::check_rank_fits(m, n, g, d->free_bytes, d->name) : d.status();
  }
  DSI_CUDA_TRY(cudaSetDevice(prev));
  return st;
}

// The communicator (docs/multi_gpu.md "Communicators"): NCCL with one GPU per rank; the in-process group when
// asked for (ranks may then share GPUs: rank r on GPU r % visible) or, with "auto", for --batch-invariant with more
// than 2 ranks (NCCL's summation order follows its algorithm choice by size; the in-process order is fixed).
Status ParallelRunner::make_comms(const runner::RunnerOptions& opts, int32_t n) {
  int count = 0;
  DSI_CUDA_TRY(cudaGetDeviceCount(&count));
  std::string kind = opts.communicator;
  if (kind == "auto") kind = opts.batch_invariant && n > 2 ? "in-process" : "nccl";
  if (opts.collective_timeout_ms < 1) return Status::errorf("collective timeout {} ms", opts.collective_timeout_ms);
  const parallel::CommOptions copts{std::chrono::milliseconds(opts.collective_timeout_ms)};
  if (kind == "nccl") {
    if (count < n)
      return Status::errorf("--gpus {} with NCCL needs {} GPUs (one per rank), {} visible; --communicator in-process "
                            "runs several ranks on one GPU (for checks: weights and state are then held per rank)",
                            n, n, count);
    devices_ = n;
    DSI_RETURN_IF_ERROR(parallel::nccl_load());
    DSI_ASSIGN_OR_RETURN(const parallel::NcclId id, parallel::nccl_unique_id());
    // Each worker makes its GPU current once, then joins the communicator (ncclCommInitRank blocks until every
    // rank has joined: the workers run it at the same time).
    return pool_.start(n, [&, id](int32_t r) -> Status {
      DSI_CUDA_TRY(cudaSetDevice(r));
      auto c = std::make_unique<parallel::NcclComm>(copts);
      Status st = c->init(id, n, r);
      std::lock_guard<std::mutex> lk(mu_);  // fail() may read comms_ from another rank's thread
      comms_[size_t(r)] = std::move(c);
      return st;
    });
  }
  if (kind != "in-process") return Status::errorf("unknown communicator '{}' (auto, nccl or in-process)", kind);
  devices_ = std::max(1, std::min(count, n));
  // Ranks sharing one GPU sum on the device (inproc_device.h); on several GPUs they stage through the host, as
  // they do with DSINFER_INPROC_DEVICE_REDUCE=0 (for measuring the two paths; graphs then stay off).
  const char* dev = std::getenv("DSINFER_INPROC_DEVICE_REDUCE");
  const bool device_reduce = devices_ == 1 && !(dev && std::string(dev) == "0");
  access_ = std::make_unique<CudaDeviceAccess>(device_reduce ? n : 0);
  comms_ = parallel::make_inprocess_group(n, copts, access_.get());
  return pool_.start(n, [&](int32_t r) -> Status {
    DSI_CUDA_TRY(cudaSetDevice(r % devices_));
    return access_->init_rank(r);
  });
}

Status ParallelRunner::init(const runner::RunnerOptions& opts) {
  const int32_t n = int32_t(shards_.size());
  DSI_RETURN_IF_ERROR(parallel::expert_range(cfg_.n_routed_experts, 0, n).status());
  DSI_ASSIGN_OR_RETURN(fault_, parallel::parse_fault_injection(opts.fault_injection, n));
  eplb_ = opts.eplb;
  if (dp_ && eplb_) return Status::error("--eplb with DP attention (--data-parallel-size > 1) is not implemented yet");
  // The DP exchange runs moe_cuda and its plain combine; V4.1's `official` MoE weights each expert inside its SwiGLU
  // and rounds per expert in expert-id order (moe_official_cuda), which the exchange does not reproduce.
  if (dp_ && cfg_.is_v41() && num_.bf16_activations)
    return Status::error("DP attention (--data-parallel-size > 1) with DeepSeek-V4.1 `official` numerics is not "
                         "implemented on the cuda backend (the expert exchange does not run the official MoE); use "
                         "--numerics hf or the EP layout");
  redundant_ = opts.eplb ? opts.num_redundant_experts : 0;
  interval_ = opts.eplb_interval;
  if (eplb_) {
    DSI_RETURN_IF_ERROR(parallel::validate_eplb(cfg_.n_routed_experts, n, redundant_, interval_));
    placement_.assign(size_t(cfg_.num_hidden_layers), parallel::static_placement(int32_t(cfg_.n_routed_experts), n, redundant_));
  }
  int count = 0;
  DSI_CUDA_TRY(cudaGetDeviceCount(&count));
  const int32_t planned = opts.communicator == "in-process" ? std::max(1, std::min(count, n)) : n;
  DSI_RETURN_IF_ERROR(check_memory(cfg_, n, std::min(planned, std::max(count, 1)), redundant_));
  pool_.set_on_failure([this](int32_t r, const Status& cause) { fail(r, cause); });
  pool_.set_deadline(std::chrono::milliseconds(opts.collective_timeout_ms) + std::chrono::seconds(5));
  DSI_RETURN_IF_ERROR(checked(make_comms(opts, n)));
  DSI_RETURN_IF_ERROR(checked(pool_.run([&](int32_t r) -> Status {
    if (fault_.hits_load(r)) return fault_.fire(0);
    runner::RunnerOptions so = opts;
    so.device = r % devices_;
    so.ep_rank = r;
    so.ep_size = n;
    auto shard = std::make_unique<CudaRunner>(cfg_, num_);
    DSI_RETURN_IF_ERROR(shard->init(so).with_context(fmt::format("GPU {}", so.device)));
    shard->set_expert_comm(comms_[size_t(r)].get());
    shard->set_data_parallel(dp_);
    shard->set_tensor_parallel(tp_);
    shard->set_compute_logits(r == 0 || dp_);
    shards_[size_t(r)] = std::move(shard);
    return Status::ok();
  })));
  // DP's exchange without host counts (expert_exchange_cuda.cpp) on ranks sharing one GPU, whose all-to-all stays on
  // the device (inproc_comm.h); DSINFER_DP_EXCHANGE=counts keeps the exchange of counts through the host (to compare).
  const char* x = std::getenv("DSINFER_DP_EXCHANGE");
  fixed_exchange_ = dp_ && access_ && access_->shared_device_ranks() >= n && !(x && std::string(x) == "counts");
  DSI_RETURN_IF_ERROR(enable_async_steps());
  return enable_group_graphs();
}

// Asynchronous steps at N > 1 for ranks sharing one GPU through the in-process communicator. EP and TP: the device
// all-reduce never waits on the host, and shard 0's sampled ids are on the GPU every shard runs on. DP attention:
// each rank samples its own sequences and fills their next tokens from its own ids (its exchange still brings each
// MoE layer's pair counts to the host, which then waits inside the step, but the steps stay in order on each
// stream). Off with EPLB (a rebalance rewrites expert slots between steps, which needs the previous step finished),
// and over NCCL or several GPUs (EP / TP: the ids would cross GPUs, a peer copy; DP would need no peer copy but has
// not run on several GPUs: none is lent).
Status ParallelRunner::enable_async_steps() {
  const int32_t n = int32_t(shards_.size());
  if (eplb_ || !access_ || access_->shared_device_ranks() < n) return Status::ok();
  for (int32_t r = 1; r < n && !dp_; ++r) shards_[size_t(r)]->set_token_source(shards_[0].get());
  async_ = true;
  return Status::ok();
}

// Decode graphs at N > 1 (docs/multi_gpu.md "CUDA graphs at N > 1"): for EP, TP and DP whose ranks share one GPU
// through the in-process communicator (its all-reduce and all-to-all then never wait on the host; DP with the
// fixed-capacity exchange, whose sizes the host knows). NCCL's capture is unchecked (no machine with two GPUs): eager.
// DSINFER_GROUP_GRAPHS=1 turns them on (DSINFER_CUDA_GRAPHS=0: every decode graph off).
Status ParallelRunner::enable_group_graphs() {
  const int32_t n = int32_t(shards_.size());
  if ((dp_ && !fixed_exchange_) || !access_ || access_->shared_device_ranks() < n) return Status::ok();
  // Opt-in: GpuGroupGraphs checked the capture on the H200 (session 16, bit for bit against eager and one rank), and
  // the --gpus 2 bench measured no gain from it (bench/NOTES.md, session 16 review).
  if (const char* g = std::getenv("DSINFER_GROUP_GRAPHS"); !g || std::string(g) != "1") return Status::ok();
  group_graphs_ = std::make_unique<GroupGraphs>(n);
  graph_ranks_.resize(size_t(n));
  return checked(pool_.run([&](int32_t r) -> Status {
    DSI_RETURN_IF_ERROR(group_graphs_->init_rank(r));
    graph_ranks_[size_t(r)] = std::make_unique<GroupGraphs::Rank>(*group_graphs_, r, *comms_[size_t(r)]);
    shards_[size_t(r)]->set_group_graphs(graph_ranks_[size_t(r)].get());
    return Status::ok();
  }));
}

}  // namespace

Result<std::unique_ptr<runner::ModelRunner>> create_parallel_runner(const runner::RunnerOptions& opts) {
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, cuda_model_config(opts));
  const parallel::Layout layout = parallel::layout_of(
      {opts.gpus, opts.expert_parallel_size, opts.data_parallel_size, opts.tensor_parallel_size});
  auto r = std::make_unique<ParallelRunner>(std::move(cfg), opts.numerics, opts.gpus, layout);
  DSI_RETURN_IF_ERROR(r->init(opts));
  return std::unique_ptr<runner::ModelRunner>(std::move(r));
}

}  // namespace dsinfer::backends
