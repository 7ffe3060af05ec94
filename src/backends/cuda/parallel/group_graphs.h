// CUDA graphs of a parallel group's decode step (docs/multi_gpu.md "CUDA graphs at N > 1"), for ranks that share
// one GPU through the in-process communicator, whose all-reduce then joins the ranks' streams on the device
// (parallel/inproc_comm.h DeviceAccess). ONE capture holds every rank's stream: rank 0 begins it and forks the
// others into it, every rank records its forward on its own stream (the collectives' marks and waits become edges
// between them), the others join rank 0's stream and rank 0 ends it. Rank 0 then launches that one graph for the
// whole group, after every rank's plan upload; the others' streams wait for it.
//
// A shape's first step runs eagerly (its lazily sized scratch is then in place), the next is captured; a change
// of any rank's scratch generation drops the graphs (not the shapes seen: a later capture of one needs no eager
// step again); clear() (new state, an EPLB rebalance) drops both. Every call is collective (each rank's thread, the same key):
// the ranks meet on the communicator's barrier, so a failed group ends every rank's call. Plain header.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "backends/cuda/step/group_step_graphs.h"
#include "core/status.h"
#include "parallel/communicator.h"

namespace dsinfer::backends {

class GroupGraphs {
 public:
  explicit GroupGraphs(int32_t world);
  ~GroupGraphs();
  GroupGraphs(const GroupGraphs&) = delete;
  GroupGraphs& operator=(const GroupGraphs&) = delete;
  Status init_rank(int32_t rank);  // on the rank's thread, its GPU current: its events

  // Rank `rank`'s part of the group's decode step of shape `key` (its scratch generation `gen`; `forward` launches
  // its layers on `stream`, kernels and device collectives only). Returns once the step is queued.
  Status launch(int32_t rank, parallel::Communicator& comm, int64_t key, uint64_t gen, void* stream,
                const std::function<Status()>& forward);
  void clear();  // between steps (no rank inside launch)
  int64_t captures() const;

  // Rank r's view, handed to its shard (CudaRunner::set_group_graphs).
  class Rank final : public GroupStepGraphs {
   public:
    Rank(GroupGraphs& g, int32_t rank, parallel::Communicator& comm) : g_(g), rank_(rank), comm_(comm) {}
    Status launch(int64_t key, uint64_t gen, void* stream, const std::function<Status()>& forward) override {
      return g_.launch(rank_, comm_, key, gen, stream, forward);
    }

   private:
    GroupGraphs& g_;
    int32_t rank_;
    parallel::Communicator& comm_;
  };

 private:
  enum class Mode { kEager, kCapture, kReplay };
  Status capture(int32_t rank, parallel::Communicator& comm, int64_t key, void* stream,
                 const std::function<Status()>& forward);
  Status replay(int32_t rank, parallel::Communicator& comm, int64_t key, void* stream);
  Mode decide();       // rank 0, between two barriers
  void drop_graphs();  // the executable graphs (not the shapes seen)

  const int32_t world_;
  // cudaEvent_t: per rank > 0 its stream's work before the step (ready_) and the end of its captured part (join_);
  // rank 0's capture start, which the other ranks' streams wait for (fork_), and the end of its graph launch (done_).
  std::vector<void*> ready_, join_;
  void* fork_ = nullptr;
  void* done_ = nullptr;
  std::vector<int64_t> keys_;
  std::vector<uint64_t> gens_;
  std::map<int64_t, void*> graphs_;  // key -> cudaGraphExec_t (rank 0 writes, between barriers)
  std::set<int64_t> seen_;           // keys run eagerly once since the last drop
  std::vector<uint64_t> graph_gens_;
  Mode mode_ = Mode::kEager;
  // Rank 0's verdicts, each written between two barriers and read by every rank after the second: the step's shape
  // agreed (decided_), the capture begun (begun_), the capture ended and instantiated (captured_).
  Status decided_ = Status::ok();
  Status begun_ = Status::ok();
  Status captured_ = Status::ok();
  int64_t captures_ = 0;
  mutable std::mutex mu_;  // captures_ (read by diagnostics from any thread)
};

}  // namespace dsinfer::backends
