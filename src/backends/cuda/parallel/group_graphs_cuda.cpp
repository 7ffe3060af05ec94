// GroupGraphs (see group_graphs.h). The order of the CUDA calls across the ranks' threads is set by the
// communicator's barriers: an event is recorded before the barrier after which another rank waits for it, and
// recorded again only after a later barrier that every waiter has passed.
#include "backends/cuda/parallel/group_graphs.h"

#include <cuda_runtime.h>

#include "cuda/cuda_common.h"

namespace dsinfer::backends {

namespace {
cudaEvent_t ev(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
Status make_event(void*& e) {
  cudaEvent_t x = nullptr;
  DSI_CUDA_TRY(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
  e = x;
  return Status::ok();
}
}  // namespace

GroupGraphs::GroupGraphs(int32_t world)
    : world_(world), ready_(size_t(world)), join_(size_t(world)), keys_(size_t(world)), gens_(size_t(world)) {}

GroupGraphs::~GroupGraphs() {
  clear();
  for (void* e : ready_)
    if (e) cudaEventDestroy(ev(e));
  for (void* e : join_)
    if (e) cudaEventDestroy(ev(e));
  if (fork_) cudaEventDestroy(ev(fork_));
  if (done_) cudaEventDestroy(ev(done_));
}

Status GroupGraphs::init_rank(int32_t rank) {
  if (rank == 0) {
    DSI_RETURN_IF_ERROR(make_event(fork_));
    return make_event(done_);
  }
  DSI_RETURN_IF_ERROR(make_event(ready_[size_t(rank)]));
  return make_event(join_[size_t(rank)]);
}

void GroupGraphs::drop_graphs() {
  for (auto& [k, g] : graphs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
  graphs_.clear();
}

void GroupGraphs::clear() {
  drop_graphs();
  seen_.clear();
}

int64_t GroupGraphs::captures() const {
  std::lock_guard<std::mutex> lk(mu_);
  return captures_;
}

GroupGraphs::Mode GroupGraphs::decide() {
  decided_ = Status::ok();
  for (int32_t r = 1; r < world_; ++r)
    if (keys_[size_t(r)] != keys_[0]) {
      decided_ = Status::errorf("decode graphs: rank {} runs a step of shape {}, rank 0 one of shape {}", r,
                                keys_[size_t(r)], keys_[0]);
      return Mode::kEager;
    }
  if (gens_ != graph_gens_) {  // some rank's scratch moved: its captured pointers are stale
    drop_graphs();  // the shapes seen stay seen: their lazily sized scratch is as large as it was
    graph_gens_ = gens_;
  }
  if (graphs_.count(keys_[0])) return Mode::kReplay;
  if (seen_.count(keys_[0])) return Mode::kCapture;
  seen_.insert(keys_[0]);
  return Mode::kEager;
}

Status GroupGraphs::launch(int32_t rank, parallel::Communicator& comm, int64_t key, uint64_t gen, void* stream,
                           const std::function<Status()>& forward) {
  if (rank < 0 || rank >= world_) return Status::errorf("decode graphs: rank {} of {}", rank, world_);
  keys_[size_t(rank)] = key;
  gens_[size_t(rank)] = gen;
  if (rank > 0) DSI_CUDA_TRY(cudaEventRecord(ev(ready_[size_t(rank)]), st(stream)));  // its plan upload
  DSI_RETURN_IF_ERROR(comm.barrier());
  if (rank == 0) mode_ = decide();
  DSI_RETURN_IF_ERROR(comm.barrier());
  DSI_RETURN_IF_ERROR(decided_);
  switch (mode_) {
    case Mode::kEager: return forward();
    case Mode::kCapture: DSI_RETURN_IF_ERROR(capture(rank, comm, key, stream, forward)); break;
    case Mode::kReplay: break;
  }
  return replay(rank, comm, key, stream);
}

// Rank 0 ends the capture whatever happened (its stream must leave capture mode); a rank whose forward failed
// returns at once and the group's abort (the ParallelRunner's failure handler) ends the others' barriers.
Status GroupGraphs::capture(int32_t rank, parallel::Communicator& comm, int64_t key, void* stream,
                            const std::function<Status()>& forward) {
  cudaStream_t s = st(stream);
  if (rank == 0) {
    begun_ = cuda::cuda_status(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture",
                               __FILE__, __LINE__);
    if (begun_.is_ok()) begun_ = cuda::cuda_status(cudaEventRecord(ev(fork_), s), "cudaEventRecord", __FILE__, __LINE__);
  }
  DSI_RETURN_IF_ERROR(comm.barrier());
  DSI_RETURN_IF_ERROR(begun_);
  if (rank > 0) DSI_CUDA_TRY(cudaStreamWaitEvent(s, ev(fork_), 0));  // this stream joins rank 0's capture
  Status fwd = forward();
  if (fwd.is_ok() && rank > 0) fwd = cuda::cuda_status(cudaEventRecord(ev(join_[size_t(rank)]), s), "cudaEventRecord",
                                                       __FILE__, __LINE__);
  if (rank > 0) {
    DSI_RETURN_IF_ERROR(fwd.with_context("capturing the group's decode graph"));
    DSI_RETURN_IF_ERROR(comm.barrier());  // every part recorded
    DSI_RETURN_IF_ERROR(comm.barrier());  // rank 0 ended the capture
    return captured_;
  }
  Status joined = fwd.is_ok() ? comm.barrier() : fwd;
  for (int32_t r = 1; r < world_ && joined.is_ok(); ++r)
    joined = cuda::cuda_status(cudaStreamWaitEvent(s, ev(join_[size_t(r)]), 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
  cudaGraph_t g = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s, &g);
  cudaGraphExec_t exec = nullptr;
  if (joined.is_ok() && end == cudaSuccess) {
    joined = cuda::cuda_status(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate", __FILE__, __LINE__);
  } else if (joined.is_ok()) {
    joined = cuda::cuda_status(end, "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  if (g) cudaGraphDestroy(g);
  if (joined.is_ok()) {
    graphs_[key] = exec;
    std::lock_guard<std::mutex> lk(mu_);
    ++captures_;
  }
  captured_ = joined.with_context("capturing the group's decode graph");
  if (!fwd.is_ok()) return captured_;
  DSI_RETURN_IF_ERROR(comm.barrier());
  return captured_;
}

Status GroupGraphs::replay(int32_t rank, parallel::Communicator& comm, int64_t key, void* stream) {
  cudaStream_t s = st(stream);
  if (rank == 0) {
    Status launched = Status::ok();
    auto it = graphs_.find(key);
    if (it == graphs_.end()) launched = Status::errorf("decode graphs: no graph of shape {}", key);
    for (int32_t r = 1; r < world_ && launched.is_ok(); ++r)  // every rank's plan upload before the graph
      launched = cuda::cuda_status(cudaStreamWaitEvent(s, ev(ready_[size_t(r)]), 0), "cudaStreamWaitEvent", __FILE__, __LINE__);
    if (launched.is_ok())
      launched = cuda::cuda_status(cudaGraphLaunch(static_cast<cudaGraphExec_t>(it->second), s), "cudaGraphLaunch",
                                   __FILE__, __LINE__);
    if (launched.is_ok()) launched = cuda::cuda_status(cudaEventRecord(ev(done_), s), "cudaEventRecord", __FILE__, __LINE__);
    if (!launched.is_ok()) comm.abort(launched);
  }
  DSI_RETURN_IF_ERROR(comm.barrier());
  if (rank > 0) DSI_CUDA_TRY(cudaStreamWaitEvent(s, ev(done_), 0));  // its next work after the whole graph
  return Status::ok();
}

}  // namespace dsinfer::backends
