// CudaRunner's device sampling (ModelRunner::begin_sampled_step / sample_rows, and the asynchronous halves
// launch_sample_rows / wait_sample_rows): the forward runs as in step() but the logits stay in device scratch; the
// packed row descriptions go up in one copy, ops::cuda::sample_rows samples every row on the runner's stream, and
// only the per-row results (ids, logprobs) come back. Saves the [rows, vocab] fp32 logits download (132 MB at 256
// rows of the V4 vocabulary) and the host sampling. Two buffer sets alternate so that step t+1's sampling can be
// queued while the host still reads step t's results; step t+1's token fills read step t's ids on the device.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cuda/runner/cuda_runner_impl.h"
#include "cuda/cuda_common.h"
#include "ops/sampling/sampling_cuda.h"
#include "ops/token_fill/token_fill_cuda.h"
#include "speculative/chained_step.h"

namespace dsinfer::backends {

namespace {
size_t align16(size_t n) { return (n + 15) & ~size_t(15); }
cudaEvent_t ev(void* e) { return static_cast<cudaEvent_t>(e); }
Status make_event(void*& e, bool timing) {
  if (e) return Status::ok();
  cudaEvent_t x = nullptr;
  DSI_CUDA_TRY(cudaEventCreateWithFlags(&x, timing ? cudaEventDefault : cudaEventDisableTiming));
  e = x;
  return Status::ok();
}
}  // namespace

SamplerSet::~SamplerSet() {
  if (host_in) cudaFreeHost(host_in);
  if (host_out) cudaFreeHost(host_out);
  if (done) cudaEventDestroy(ev(done));
}

StepEvents::~StepEvents() {
  for (int k = 0; k < kRing; ++k) {
    if (start[k]) cudaEventDestroy(ev(start[k]));
    if (end[k]) cudaEventDestroy(ev(end[k]));
  }
}

DeviceSamplerBuffers::~DeviceSamplerBuffers() {
}

int64_t CudaRunner::prev_sample_rows() const {
  const DeviceSamplerBuffers& d = token_src_ ? token_src_->dsamp_ : dsamp_;  // a shard > 0: shard 0's sampling
  return d.last < 0 ? 0 : d.set[d.last].rows;
}

Status CudaRunner::fill_plan_tokens(const StepPlanLayout& L) {
  if (L.F == 0) return Status::ok();
  const DeviceSamplerBuffers& d = token_src_ ? token_src_->dsamp_ : dsamp_;
  if (!dsamp_.defer_logits || d.last < 0) return Status::error("cuda runner: token fills without a sampled step before");
  const SamplerSet& p = d.set[d.last];
  if (token_src_) {  // the ids are shard 0's, sampled on its stream: this stream waits for that sampling
    if (token_src_->device_ordinal() != device_ordinal())
      return Status::errorf("cuda runner: token fills from GPU {} on GPU {}", token_src_->device_ordinal(),
                            device_ordinal());
    DSI_CUDA_TRY(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), ev(p.done), 0));
  }
  return ops::cuda::fill_step_tokens(reinterpret_cast<int32_t*>(plan_.device() + L.tokens), L.T,
                                     reinterpret_cast<const int32_t*>(plan_.device() + L.fills), L.F, p.dev_out.data(),
                                     p.rows, cfg_.vocab_size, stream_);
}

Status CudaRunner::step_event_start() {
  StepEvents& e = dsamp_.events;
  if (e.on) {  // the step's device work starts with its plan upload (a begin without a launch is overwritten)
    e.started = e.ended;
    DSI_CUDA_TRY(cudaEventRecord(ev(e.start[e.started % StepEvents::kRing]), static_cast<cudaStream_t>(stream_)));
    ++e.started;
  }
  return Status::ok();
}

Status CudaRunner::step_event_end() {
  StepEvents& e = dsamp_.events;
  if (e.on && e.started == e.ended + 1) {
    DSI_CUDA_TRY(cudaEventRecord(ev(e.end[e.ended % StepEvents::kRing]), static_cast<cudaStream_t>(stream_)));
    ++e.ended;
  }
  return Status::ok();
}

Status CudaRunner::count_step_events() {
  StepEvents& e = dsamp_.events;
  if (e.on && e.counted < e.ended) {  // this step's end event has completed, and with it every earlier event
    const int k = int(e.counted % StepEvents::kRing);
    float ms = 0;
    DSI_CUDA_TRY(cudaEventElapsedTime(&ms, ev(e.start[k]), ev(e.end[k])));
    e.busy_ms += ms;
    if (e.counted > 0) {
      DSI_CUDA_TRY(cudaEventElapsedTime(&ms, ev(e.end[(e.counted - 1) % StepEvents::kRing]), ev(e.start[k])));
      e.idle_ms += std::max(ms, 0.0f);
    }
    ++e.counted;
    ++e.steps;
  }
  return Status::ok();
}

Status CudaRunner::begin_sampled_step(const scheduler::BatchPlan& plan) {
  DSI_RETURN_IF_ERROR(step_event_start());
  dsamp_.logits_rows = -1;
  dsamp_.defer_logits = true;
  std::vector<float> unused;
  const Status s = step(plan, unused);
  dsamp_.defer_logits = false;
  if (s) dsamp_.logits_rows = plan.num_tokens() > 0 ? plan.num_logits() : 0;
  return s;
}

Status CudaRunner::begin_chained_step(const scheduler::BatchPlan& plan, const speculative::RoundOutputs& round) {
  if (!supports_chained_steps()) return Status::error("cuda runner: chained verify steps need one rank");
  if (!round.accepted || !round.verified || !round.drafts || round.block < 1)
    return Status::error("cuda runner: a chained verify step without the round's outputs");
  if (!fixed_shape_step(plan, layout_, max_model_len_) || plan.num_tokens() == plan.num_seqs())
    return Status::error("cuda runner: a chained step must be a fixed-shape verify step");
  for (const scheduler::SeqPlan& sp : plan.seqs) {
    const int64_t end = sp.start_pos + speculative::chain_lookahead(sp.num_spec_tokens, round.block);  // once moved
    if (sp.num_spec_tokens > round.block || end > max_model_len_ ||
        end > int64_t(sp.block_table.size()) * layout_.block_size)
      return Status::errorf("cuda runner: chained sequence {} at position {} does not fit its {} blocks or "
                            "max_model_len {} after moving up to {} positions",
                            sp.seq_id, sp.start_pos, sp.block_table.size(), max_model_len_, 1 + round.block);
  }
  chain_ = &round;
  const Status s = begin_sampled_step(plan);
  chain_ = nullptr;
  return s;
}

Status CudaRunner::sample_rows(const sampling::PackedRows& rows, std::vector<ops::SampleRowOut>& out) {
  if (dsamp_.outstanding > 0) return Status::error("cuda runner: sample_rows while asynchronous samplings are outstanding");
  DSI_RETURN_IF_ERROR(launch_sample_rows(rows));
  return wait_sample_rows(out);
}

Status CudaRunner::launch_sample_rows(const sampling::PackedRows& rows) {
  DSI_RETURN_IF_ERROR(bind_device());
  const int64_t n = int64_t(rows.rows.size()), V = cfg_.vocab_size;
  if (dsamp_.outstanding >= 2) return Status::error("cuda runner: two samplings are outstanding already");
  if (dsamp_.logits_rows < 0) return Status::error("cuda runner: sample_rows without a begin_sampled_step");
  if (n > 0 && rows.vocab() != V) return Status::errorf("cuda runner: rows packed for vocab {}, the model has {}", rows.vocab(), V);
  cudaStream_t cs = static_cast<cudaStream_t>(stream_);
  SamplerSet& b = dsamp_.set[dsamp_.next];
  const size_t desc_bytes = align16(size_t(n) * sizeof(ops::SampleRowDesc));
  const size_t entry_bytes = align16(rows.entries.size() * sizeof(ops::SampleEntry));
  const size_t mask_bytes = rows.mask_words.size() * sizeof(int32_t);
  const size_t in_bytes = std::max<size_t>(desc_bytes + entry_bytes + mask_bytes, 4096);
  const size_t out_rows = size_t(std::max<int64_t>(n, 1));
  const size_t work = size_t(ops::cuda::sample_rows_work_floats(std::max<int64_t>(n, 1), V));
  if (b.dev_in.size() < in_bytes || b.dev_out.size() < out_rows || dsamp_.work.size() < work)
    DSI_CUDA_TRY(cudaStreamSynchronize(cs));  // growing: the step launched before may still read the old buffers
  if (b.host_in_bytes < in_bytes) {
    if (b.host_in) cudaFreeHost(b.host_in);
    b.host_in = nullptr;
    b.host_in_bytes = 0;
    DSI_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&b.host_in), in_bytes));
    b.host_in_bytes = in_bytes;
  }
  if (b.host_out_rows < out_rows) {
    if (b.host_out) cudaFreeHost(b.host_out);
    b.host_out = nullptr;
    b.host_out_rows = 0;
    DSI_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&b.host_out), out_rows * sizeof(ops::SampleRowOut)));
    b.host_out_rows = out_rows;
  }
  if (b.dev_in.size() < in_bytes) DSI_RETURN_IF_ERROR(b.dev_in.alloc(in_bytes, "device sampling input"));
  if (b.dev_out.size() < out_rows) DSI_RETURN_IF_ERROR(b.dev_out.alloc(out_rows, "device sampling output"));
  if (dsamp_.work.size() < work) DSI_RETURN_IF_ERROR(dsamp_.work.alloc(work, "device sampling work rows"));
  DSI_RETURN_IF_ERROR(make_event(b.done, false));
  if (n > 0) {
    // This set's previous launch was waited for, so its staging is free to rewrite.
    std::memcpy(b.host_in, rows.rows.data(), size_t(n) * sizeof(ops::SampleRowDesc));
    if (!rows.entries.empty())
      std::memcpy(b.host_in + desc_bytes, rows.entries.data(), rows.entries.size() * sizeof(ops::SampleEntry));
    if (mask_bytes) std::memcpy(b.host_in + desc_bytes + entry_bytes, rows.mask_words.data(), mask_bytes);
    DSI_CUDA_TRY(cudaMemcpyAsync(b.dev_in.data(), b.host_in, desc_bytes + entry_bytes + mask_bytes, cudaMemcpyHostToDevice, cs));
    ops::cuda::SampleRowsArgs a;
    a.logits = fwd_->logits();
    a.logits_stride = V;
    a.V = V;
    a.logits_rows = dsamp_.logits_rows;
    a.rows = reinterpret_cast<const ops::SampleRowDesc*>(b.dev_in.data());
    a.num_rows = n;
    a.entries = reinterpret_cast<const ops::SampleEntry*>(b.dev_in.data() + desc_bytes);
    a.num_entries = int64_t(rows.entries.size());
    a.mask_words = mask_bytes ? reinterpret_cast<const int32_t*>(b.dev_in.data() + desc_bytes + entry_bytes) : nullptr;
    a.num_mask_rows = rows.num_mask_rows();
    a.words_per_row = rows.words_per_row();
    a.work = dsamp_.work.data();
    a.out = b.dev_out.data();
    DSI_RETURN_IF_ERROR(ops::cuda::sample_rows(a, stream_));
    DSI_CUDA_TRY(cudaMemcpyAsync(b.host_out, b.dev_out.data(), size_t(n) * sizeof(ops::SampleRowOut),
                                 cudaMemcpyDeviceToHost, cs));
  }
  DSI_RETURN_IF_ERROR(step_event_end());
  DSI_CUDA_TRY(cudaEventRecord(ev(b.done), cs));
  b.rows = n;
  b.outstanding = true;
  dsamp_.last = dsamp_.next;
  dsamp_.next ^= 1;
  ++dsamp_.outstanding;
  return Status::ok();
}

Status CudaRunner::wait_sample_rows(std::vector<ops::SampleRowOut>& out) {
  out.clear();
  if (dsamp_.outstanding == 0) return Status::error("cuda runner: wait_sample_rows with no sampling launched");
  SamplerSet& b = dsamp_.set[dsamp_.oldest];
  DSI_CUDA_TRY(cudaEventSynchronize(ev(b.done)));
  out.assign(b.host_out, b.host_out + b.rows);
  b.outstanding = false;
  dsamp_.oldest ^= 1;
  --dsamp_.outstanding;
  return count_step_events();
}

Status CudaRunner::set_step_events(bool on) {
  StepEvents& e = dsamp_.events;
  if (dsamp_.outstanding > 0) return Status::error("cuda runner: step events switched while samplings are outstanding");
  for (int k = 0; on && k < StepEvents::kRing; ++k) {
    DSI_RETURN_IF_ERROR(make_event(e.start[k], true));
    DSI_RETURN_IF_ERROR(make_event(e.end[k], true));
  }
  e.on = on;
  e.started = e.ended = e.counted = e.steps = 0;
  e.busy_ms = e.idle_ms = 0;
  return Status::ok();
}

Result<runner::RunnerDiagnostics::StepGapTimes> CudaRunner::step_gap_times() {
  StepGapTimes t;
  t.steps = dsamp_.events.steps;
  t.busy_ms = dsamp_.events.busy_ms;
  t.idle_ms = dsamp_.events.idle_ms;
  return t;
}

}  // namespace dsinfer::backends
