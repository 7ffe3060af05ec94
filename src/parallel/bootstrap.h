// Bootstrap of one process per rank from torchrun-style environment variables (docs/multi_gpu.md "Bootstrap"):
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, read and checked here only, and the rendezvous on
// MASTER_ADDR:MASTER_PORT that gives every process rank 0's payload (an NCCL unique id) or keeps each rank's
// connection to rank 0 open (the socket communicator, parallel/socket_comm.h), every wait bounded by a deadline. Without these variables (or WORLD_SIZE=1) one process drives every GPU of the node
// (`dsinfer serve --gpus N`, the default). Host code, no CUDA / NCCL.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace dsinfer::parallel {

// The torchrun variables of the current process environment (only those set).
std::map<std::string, std::string> torchrun_env();

struct LaunchEnv {
  int32_t rank = 0, world = 1, local_rank = 0;
  std::string master_addr;  // a numeric IPv4 / IPv6 address or a host name
  int32_t master_port = 0;
};

// nullopt when WORLD_SIZE is unset or 1 (one process; the other variables are then ignored, as torchrun's
// single-process launch sets them too). With WORLD_SIZE > 1 every variable must be set and valid: RANK in
// [0, WORLD_SIZE), LOCAL_RANK in [0, local_gpus) and WORLD_SIZE <= local_gpus (more is a multi-node launch, not
// implemented yet; local_gpus < 0: unknown, unchecked), MASTER_PORT in [1, 65535], MASTER_ADDR non-empty. Errors
// name the variable and its value.
Result<std::optional<LaunchEnv>> parse_launch_env(const std::map<std::string, std::string>& env, int32_t local_gpus);

// Rank 0's side of the rendezvous: a listening socket on MASTER_ADDR:port (port 0: any free port, see port()).
class RendezvousServer {
 public:
  RendezvousServer() = default;
  RendezvousServer(RendezvousServer&& o) noexcept;
  RendezvousServer& operator=(RendezvousServer&& o) noexcept;
  ~RendezvousServer();
  static Result<RendezvousServer> listen(const std::string& addr, int32_t port);
  int32_t port() const { return port_; }
  // Hands `payload` to each of the world - 1 other ranks once it has said who it is (a stray connection or a
  // malformed / duplicate / wrong-world hello is answered with an error and does not count), and returns when every
  // rank has it; by `deadline` it fails naming the ranks that never came.
  Status serve(int32_t world, std::span<const uint8_t> payload, std::chrono::steady_clock::time_point deadline);
  // serve() with an empty payload that keeps the connections: element r is rank r's socket (element 0: -1), owned
  // by the caller.
  Result<std::vector<int>> accept_ranks(int32_t world, std::chrono::steady_clock::time_point deadline);

 private:
  Status serve_impl(int32_t world, std::span<const uint8_t> payload, std::chrono::steady_clock::time_point deadline,
                    std::vector<int>* keep);
  int fd_ = -1;
  int32_t port_ = 0;
};

// A rank > 0's side: connects to addr:port (retrying until rank 0 listens), says (rank, world) and reads rank 0's
// payload; an error names the address and what failed or timed out.
Result<std::vector<uint8_t>> rendezvous_fetch(const std::string& addr, int32_t port, int32_t rank, int32_t world,
                                              std::chrono::steady_clock::time_point deadline);

// rendezvous_fetch that keeps the connection (accept_ranks' other end): the socket to rank 0, owned by the caller.
Result<int> rendezvous_connect(const std::string& addr, int32_t port, int32_t rank, int32_t world,
                               std::chrono::steady_clock::time_point deadline);

// Blocking transfers on a non-blocking socket, bounded by `deadline` (errors say what failed; "closed" when the peer
// closed or reset the connection).
Status send_all(int fd, const void* data, size_t n, std::chrono::steady_clock::time_point deadline);
Status recv_all(int fd, void* data, size_t n, std::chrono::steady_clock::time_point deadline);

// Both sides by env.rank: rank 0 listens on MASTER_PORT and serves `payload` (its NCCL unique id); every rank
// returns the payload.
Result<std::vector<uint8_t>> exchange_id(const LaunchEnv& env, std::span<const uint8_t> payload,
                                         std::chrono::milliseconds timeout);

}  // namespace dsinfer::parallel
