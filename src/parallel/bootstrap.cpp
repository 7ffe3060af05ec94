// torchrun variables and the TCP rendezvous (see bootstrap.h). Wire format, all integers little-endian u32:
//   hello  (rank > 0 -> rank 0): "DSIB" rank world
//   answer (rank 0 -> rank > 0): "DSIB" status (0 = ok) length, then `length` bytes: the payload, or the error text
#include "parallel/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

namespace dsinfer::parallel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[4] = {'D', 'S', 'I', 'B'};
constexpr uint32_t kMaxPayload = 1 << 20;

bool parse_int(const std::string& s, long long* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end || errno == ERANGE) return false;
  *out = v;
  return true;
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<long long>(left, 0, 100));  // short slices: the caller re-checks the deadline
}

// Waits until fd is ready for `events` or the deadline passes (false).
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // the read / write reports the error
  }
  return false;
}

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::vector<uint8_t> answer(uint32_t status, std::span<const uint8_t> body) {
  std::vector<uint8_t> b(kMagic, kMagic + 4);
  put_u32(b, status);
  put_u32(b, uint32_t(body.size()));
  b.insert(b.end(), body.begin(), body.end());
  return b;
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

Status resolve(const std::string& addr, int32_t port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(addr.c_str(), service.c_str(), &hints, &out.list);
  if (rc != 0) return Status::errorf("MASTER_ADDR '{}' does not resolve: {}", addr, ::gai_strerror(rc));
  return Status::ok();
}

// One non-blocking connect attempt to any of addr's addresses; -1 when none accepted before the deadline.
int try_connect(const AddrInfo& ai, Clock::time_point deadline) {
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline)) {
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) return fd;
    }
    ::close(fd);
  }
  return -1;
}

}  // namespace

Status send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t off = 0; off < n;) {
    if (!wait_fd(fd, POLLOUT, deadline)) return Status::error("timed out sending");
    const ssize_t w = ::send(fd, p + off, n - off, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (w < 0 && (errno == ECONNRESET || errno == EPIPE)) return Status::error("the connection closed");
    if (w <= 0) return Status::errorf("send: {}", std::strerror(errno));
    off += size_t(w);
  }
  return Status::ok();
}

Status recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  uint8_t* p = static_cast<uint8_t*>(data);
  for (size_t off = 0; off < n;) {
    if (!wait_fd(fd, POLLIN, deadline)) return Status::errorf("timed out after {} of {} bytes", off, n);
    const ssize_t r = ::recv(fd, p + off, n - off, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE)))
      return Status::errorf("the connection closed after {} of {} bytes", off, n);
    if (r < 0) return Status::errorf("recv: {}", std::strerror(errno));
    off += size_t(r);
  }
  return Status::ok();
}

std::map<std::string, std::string> torchrun_env() {
  std::map<std::string, std::string> env;
  for (const char* k : {"WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
    if (const char* v = std::getenv(k)) env[k] = v;
  return env;
}

Result<std::optional<LaunchEnv>> parse_launch_env(const std::map<std::string, std::string>& env, int32_t local_gpus) {
  auto it = env.find("WORLD_SIZE");
  if (it == env.end()) return std::optional<LaunchEnv>();
  long long world = 0;
  if (!parse_int(it->second, &world) || world < 1 || world > (1 << 20))
    return Status::errorf("WORLD_SIZE='{}' is not a positive integer", it->second);
  if (world == 1) return std::optional<LaunchEnv>();
  if (local_gpus >= 0 && world > local_gpus)
    return Status::errorf("WORLD_SIZE={} is more than the {} GPUs of this node: multi-node inference is not "
                          "implemented yet (one process per GPU of one node, or one process driving every GPU; see "
                          "docs/multi_gpu.md)", world, local_gpus);
  auto integer = [&](const char* name, long long lo, long long hi, const std::string& range) -> Result<int32_t> {
    auto v = env.find(name);
    if (v == env.end())
      return Status::errorf("WORLD_SIZE={} (one process per GPU) needs {} too; it is not set", world, name);
    long long n = 0;
    if (!parse_int(v->second, &n) || n < lo || n > hi)
      return Status::errorf("{}='{}' is not an integer in {}", name, v->second, range);
    return int32_t(n);
  };
  LaunchEnv e;
  e.world = int32_t(world);
  DSI_ASSIGN_OR_RETURN(e.rank, integer("RANK", 0, world - 1, fmt::format("[0, WORLD_SIZE={})", world)));
  const long long gpus = local_gpus >= 0 ? local_gpus : (1 << 20);
  DSI_ASSIGN_OR_RETURN(e.local_rank, integer("LOCAL_RANK", 0, gpus - 1,
                                             local_gpus >= 0 ? fmt::format("[0, {}) (the GPUs visible)", gpus)
                                                             : std::string("[0, ...)")));
  DSI_ASSIGN_OR_RETURN(e.master_port, integer("MASTER_PORT", 1, 65535, "[1, 65535]"));
  auto addr = env.find("MASTER_ADDR");
  if (addr == env.end() || addr->second.empty())
    return Status::errorf("WORLD_SIZE={} (one process per GPU) needs MASTER_ADDR (rank 0's address); it is {}",
                          world, addr == env.end() ? "not set" : "empty");
  e.master_addr = addr->second;
  return std::optional<LaunchEnv>(e);
}

RendezvousServer::RendezvousServer(RendezvousServer&& o) noexcept : fd_(o.fd_), port_(o.port_) { o.fd_ = -1; }
RendezvousServer& RendezvousServer::operator=(RendezvousServer&& o) noexcept {
  std::swap(fd_, o.fd_);
  std::swap(port_, o.port_);
  return *this;
}
RendezvousServer::~RendezvousServer() {
  if (fd_ >= 0) ::close(fd_);
}

Result<RendezvousServer> RendezvousServer::listen(const std::string& addr, int32_t port) {
  AddrInfo ai;
  DSI_RETURN_IF_ERROR(resolve(addr, port, true, ai));
  std::string last = "no address";
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    RendezvousServer s;
    s.fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (s.fd_ < 0) continue;
    const int one = 1;
    ::setsockopt(s.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd_, a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.fd_, 128) != 0) {
      last = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(s.fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    s.port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return s;
  }
  return Status::errorf("rendezvous: rank 0 cannot listen on MASTER_ADDR={} MASTER_PORT={}: {}", addr, port, last);
}

Status RendezvousServer::serve(int32_t world, std::span<const uint8_t> payload, Clock::time_point deadline) {
  return serve_impl(world, payload, deadline, nullptr);
}

Result<std::vector<int>> RendezvousServer::accept_ranks(int32_t world, Clock::time_point deadline) {
  std::vector<int> fds(size_t(std::max(world, 1)), -1);
  const Status st = serve_impl(world, {}, deadline, &fds);
  if (st.is_ok()) return fds;
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  return st;
}

Status RendezvousServer::serve_impl(int32_t world, std::span<const uint8_t> payload, Clock::time_point deadline,
                                    std::vector<int>* keep) {
  if (fd_ < 0) return Status::error("rendezvous: the server is not listening");
  std::set<int32_t> served;
  while (int32_t(served.size()) < world - 1) {
    if (!wait_fd(fd_, POLLIN, deadline)) {
      std::string missing;
      for (int32_t r = 1; r < world; ++r)
        if (!served.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return Status::errorf("rendezvous: rank(s) {} of WORLD_SIZE={} did not reach rank 0 on port {} in time",
                            missing, world, port_);
    }
    const int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) continue;
    // One hello per connection, read within a short window: a silent stray connection cannot stall the others.
    const Clock::time_point hello_by = std::min(deadline, Clock::now() + std::chrono::seconds(5));
    uint8_t hello[12];
    std::string problem;
    int32_t rank = -1;
    if (!recv_all(c, hello, sizeof hello, hello_by).is_ok() || std::memcmp(hello, kMagic, 4) != 0) {
      problem = "not a dsinfer rendezvous hello";
    } else {
      rank = int32_t(get_u32(hello + 4));
      const int32_t w = int32_t(get_u32(hello + 8));
      if (w != world) problem = fmt::format("WORLD_SIZE={} here but {} at rank 0", w, world);
      else if (rank < 1 || rank >= world) problem = fmt::format("RANK={} is not in [1, {})", rank, world);
      else if (served.count(rank)) problem = fmt::format("RANK={} already joined (two processes with one RANK?)", rank);
    }
    const std::string_view text(problem);
    const std::vector<uint8_t> out =
        problem.empty() ? answer(0, payload)
                        : answer(1, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    if (send_all(c, out.data(), out.size(), hello_by).is_ok() && problem.empty()) {
      served.insert(rank);
      if (keep) {
        (*keep)[size_t(rank)] = c;
        continue;
      }
    }
    ::close(c);
  }
  return Status::ok();
}

namespace {

// rendezvous_fetch; with `keep`, the connection stays open there (an ok answer only).
Result<std::vector<uint8_t>> fetch_impl(const std::string& addr, int32_t port, int32_t rank, int32_t world,
                                        Clock::time_point deadline, int* keep) {
  AddrInfo ai;
  DSI_RETURN_IF_ERROR(resolve(addr, port, false, ai));
  const std::string where = fmt::format("MASTER_ADDR={} MASTER_PORT={}", addr, port);
  int fd = -1;
  while ((fd = try_connect(ai, deadline)) < 0) {  // rank 0 may not listen yet
    if (Clock::now() >= deadline)
      return Status::errorf("rendezvous: rank {} could not connect to rank 0 at {} in time", rank, where);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, ms_left(deadline) + 1)));
  }
  std::vector<uint8_t> hello(kMagic, kMagic + 4);
  put_u32(hello, uint32_t(rank));
  put_u32(hello, uint32_t(world));
  uint8_t head[12];
  Status st = send_all(fd, hello.data(), hello.size(), deadline);
  if (st.is_ok()) st = recv_all(fd, head, sizeof head, deadline);
  std::vector<uint8_t> body;
  if (st.is_ok() && std::memcmp(head, kMagic, 4) != 0) st = Status::error("the answer is not a dsinfer rendezvous");
  if (st.is_ok() && get_u32(head + 8) > kMaxPayload)
    st = Status::errorf("the answer announces {} bytes (limit {})", get_u32(head + 8), kMaxPayload);
  if (st.is_ok()) {
    body.resize(get_u32(head + 8));
    st = recv_all(fd, body.data(), body.size(), deadline);
  }
  if (st.is_ok() && get_u32(head + 4) == 0 && keep) *keep = fd;
  else ::close(fd);
  if (!st.is_ok()) return Status::errorf("rendezvous: rank {} with rank 0 at {}: {}", rank, where, st.message());
  if (get_u32(head + 4) != 0)
    return Status::errorf("rendezvous: rank 0 at {} refused rank {}: {}", where, rank,
                          std::string(body.begin(), body.end()));
  return body;
}

}  // namespace

Result<std::vector<uint8_t>> rendezvous_fetch(const std::string& addr, int32_t port, int32_t rank, int32_t world,
                                              Clock::time_point deadline) {
  return fetch_impl(addr, port, rank, world, deadline, nullptr);
}

Result<int> rendezvous_connect(const std::string& addr, int32_t port, int32_t rank, int32_t world,
                               Clock::time_point deadline) {
  int fd = -1;
  DSI_RETURN_IF_ERROR(fetch_impl(addr, port, rank, world, deadline, &fd).status());
  return fd;
}

Result<std::vector<uint8_t>> exchange_id(const LaunchEnv& env, std::span<const uint8_t> payload,
                                         std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  if (env.rank != 0) return rendezvous_fetch(env.master_addr, env.master_port, env.rank, env.world, deadline);
  DSI_ASSIGN_OR_RETURN(RendezvousServer server, RendezvousServer::listen(env.master_addr, env.master_port));
  DSI_RETURN_IF_ERROR(server.serve(env.world, payload, deadline));
  return std::vector<uint8_t>(payload.begin(), payload.end());
}

}  // namespace dsinfer::parallel
