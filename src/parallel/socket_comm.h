// The socket communicator (docs/multi_gpu.md "Communicators"): one rank per process, the ranks joined over TCP by
// the torchrun rendezvous (parallel/bootstrap.h), host buffers only (the cpu backend; `stream` is ignored). A star
// through rank 0: every rank > 0 keeps one connection to rank 0, sends its input of each collective there, and
// reads its output back; rank 0 computes every rank's output from all inputs in a FIXED rank order (all_reduce_sum:
// ((r0 + r1) + r2) + ... in fp64, rounded once to fp32, the in-process group's arithmetic), so every rank gets the
// same bits as the in-process group's, whatever the timing. Ranks that disagree on the call (another collective,
// size or root; all_to_all_v sizes a receiver does not expect) are refused by name, never mixed up.
//
// Faults: a failure ends the group for every rank. abort(reason) tells rank 0 (or, on rank 0, every rank) the reason
// when no frame is half written, then shuts the sockets, which wakes this rank's blocked call; a rank that exits or
// is killed closes its connection, which rank 0 sees at once (it waits on every connection together) and passes on
// naming that rank. Rank 0 keeps the deadline of every collective (CommOptions::timeout, naming the ranks that never
// came); the others wait 2 s longer for rank 0's answer, so that the named cause reaches them first.
// Slow by design (two host round trips through rank 0 per collective): it makes one process per rank runnable and
// checkable without several GPUs.
#pragma once
#include <memory>

#include "parallel/bootstrap.h"
#include "parallel/communicator.h"

namespace dsinfer::parallel {

// This process's rank of env.world: rank 0 listens on MASTER_ADDR:MASTER_PORT and accepts the others, which
// connect (retrying until it listens). Every wait ends by opts.timeout.
Result<std::unique_ptr<Communicator>> connect_socket_group(const LaunchEnv& env, const CommOptions& opts);
// Rank 0 on a server already listening (tests: port 0), and a rank > 0 joining it.
Result<std::unique_ptr<Communicator>> accept_socket_group(RendezvousServer& server, int32_t world,
                                                          const CommOptions& opts);
Result<std::unique_ptr<Communicator>> join_socket_group(const std::string& addr, int32_t port, int32_t rank,
                                                        int32_t world, const CommOptions& opts);

}  // namespace dsinfer::parallel
