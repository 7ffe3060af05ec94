// CpuParallelRunner (see cpu_parallel_runner.h).
#include "backends/cpu/cpu_parallel_runner.h"

#include <mutex>

#include "backends/cpu/cpu_runner.h"
#include "parallel/fault_injection.h"
#include "parallel/inproc_comm.h"
#include "parallel/parallel_plan.h"
#include "parallel/shard_pool.h"

namespace dsinfer::backends {

namespace {

class CpuParallelRunner final : public runner::ModelRunner, public runner::RunnerDiagnostics {
 public:
  explicit CpuParallelRunner(int32_t n) : shards_(size_t(n)), unused_(size_t(n)) {}
  ~CpuParallelRunner() override {
    (void)pool_.run([&](int32_t r) {
      shards_[size_t(r)].reset();
      return Status::ok();
    });
  }
  Status init(const runner::RunnerOptions& opts);

  const io::ModelConfig& config() const override { return shards_[0]->config(); }
  std::string name() const override {
    return fmt::format("cpu parallel ({} ranks, expert parallel, {}): {}", shards_.size(), comms_[0]->name(),
                       shards_[0]->name());
  }
  int32_t kv_elem_bytes() const override { return 4; }
  bool exact_math() const override { return true; }
  bool fp32_weights() const override { return shards_[0]->fp32_weights(); }
  runner::RunnerDiagnostics& diagnostics() override { return *this; }
  Status health() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return failed_;
  }

  Status bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_len) override {
    return all([&](CpuRunner& s) { return s.bind_state(layout, num_slots, num_blocks, max_len); });
  }
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override {
    DSI_RETURN_IF_ERROR(health());
    Status st = pool_.run([&](int32_t r) {
      return shards_[size_t(r)]->step(plan, r == 0 ? logits : unused_[size_t(r)]);  // rank 0's logits
    });
    ++steps_;
    return st.is_ok() ? st : health();
  }
  Status bind_snapshots(int32_t n) override {
    return all([&](CpuRunner& s) { return s.bind_snapshots(n); });
  }
  Status bind_host_blocks(int32_t n) override {
    return all([&](CpuRunner& s) { return s.bind_host_blocks(n); });
  }
  Status copy_state(std::span<const cache::StateCopy> copies) override {
    return all([&](CpuRunner& s) { return s.copy_state(copies); });  // the state is replicated
  }
  Status set_hidden_capture(std::vector<int64_t> layers) override {
    return layers.empty()
               ? Status::ok()
               : Status::error("speculative decoding is not implemented with several ranks yet (docs/multi_gpu.md)");
  }

 private:
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
  Status load_rank(const runner::RunnerOptions& opts, int32_t r);

  parallel::ShardPool pool_;
  std::vector<std::unique_ptr<parallel::Communicator>> comms_;
  std::vector<std::unique_ptr<CpuRunner>> shards_;
  std::vector<std::vector<float>> unused_;  // ranks > 0: their logits (identical to rank 0's) are dropped
  parallel::FaultInjection fault_;
  int64_t steps_ = 0;  // written between steps by the caller, read by the ranks during one
  mutable std::mutex mu_;
  Status failed_ = Status::ok();
};

Status CpuParallelRunner::load_rank(const runner::RunnerOptions& opts, int32_t r) {
  if (fault_.hits_load(r)) return fault_.fire(0);
  const int32_t n = int32_t(shards_.size());
  DSI_ASSIGN_OR_RETURN(auto model, load_cpu_model(opts.model_dir, opts.numerics));
  DSI_ASSIGN_OR_RETURN(const parallel::ExpertRange range,
                       parallel::expert_range(model->config().n_routed_experts, r, n));
  model::ExpertShard shard;
  shard.lo = range.lo;
  shard.hi = range.hi;
  shard.shared = r == 0;
  parallel::Communicator* comm = comms_[size_t(r)].get();
  shard.reduce = [this, comm, r](std::vector<float>& partial) -> Status {
    if (fault_.hits_step(r, steps_)) return fault_.fire(steps_);
    return comm->all_reduce_sum(partial.data(), partial.size(), nullptr);
  };
  DSI_RETURN_IF_ERROR(model->set_expert_shard(std::move(shard)));
  shards_[size_t(r)] = std::make_unique<CpuRunner>(std::move(model));
  return Status::ok();
}

Status CpuParallelRunner::init(const runner::RunnerOptions& opts) {
  const int32_t n = int32_t(shards_.size());
  if (opts.communicator != "auto" && opts.communicator != "in-process")
    return Status::errorf("the cpu backend's ranks use the in-process communicator, not '{}'", opts.communicator);
  if (opts.collective_timeout_ms < 1) return Status::errorf("collective timeout {} ms", opts.collective_timeout_ms);
  DSI_ASSIGN_OR_RETURN(fault_, parallel::parse_fault_injection(opts.fault_injection, n));
  const auto timeout = std::chrono::milliseconds(opts.collective_timeout_ms);
  comms_ = parallel::make_inprocess_group(n, parallel::CommOptions{timeout});
  pool_.set_on_failure([this](int32_t r, const Status& cause) { fail(r, cause); });
  pool_.set_deadline(timeout + std::chrono::seconds(5));  // the communicator's own deadline comes first
  Status st = pool_.start(n, [&](int32_t r) { return load_rank(opts, r); });
  return st.is_ok() ? st : health();
}

}  // namespace

Result<std::unique_ptr<runner::ModelRunner>> create_cpu_parallel_runner(const runner::RunnerOptions& opts) {
  if (opts.gpus < 2) return Status::errorf("the cpu parallel runner needs 2 or more ranks, got {}", opts.gpus);
  if (opts.load_format != runner::LoadFormat::kAuto)
    return Status::error("dummy weights are only supported by the cuda backend");
  auto r = std::make_unique<CpuParallelRunner>(opts.gpus);
  DSI_RETURN_IF_ERROR(r->init(opts));
  return std::unique_ptr<runner::ModelRunner>(std::move(r));
}

}  // namespace dsinfer::backends
