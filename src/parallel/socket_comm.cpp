// Socket communicator (see socket_comm.h). Wire format, integers little-endian; one frame per message:
//   header (32 bytes): "DSIC" kind:u32 seq:u32 root:i32 count:u64 payload:u64, then `payload` bytes.
//   kind: the collective (a rank's input to rank 0, rank 0's answer) or kAbort (payload: the reason, text).
//   input payloads: all_reduce_sum count fp32; all_gather count bytes; broadcast count bytes from the root, nothing
//   from the others; all_to_all_v world u64 send sizes, world u64 receive sizes, then the send buffer; barrier none.
#include "parallel/socket_comm.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <numeric>

namespace dsinfer::parallel {

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[4] = {'D', 'S', 'I', 'C'};
constexpr size_t kHeaderBytes = 32;
constexpr uint64_t kMaxPayload = uint64_t(1) << 36;  // a corrupt length is refused, not allocated
constexpr uint64_t kMaxReason = 1 << 16;
constexpr auto kPeerGrace = std::chrono::seconds(2);  // rank 0 keeps the deadline; its answer reaches the others

enum Kind : uint32_t { kAllReduce = 1, kAllGather, kAllToAll, kBroadcast, kBarrier, kAbort = 100 };

const char* kind_name(uint32_t k) {
  switch (k) {
    case kAllReduce: return "all_reduce_sum";
    case kAllGather: return "all_gather";
    case kAllToAll: return "all_to_all_v";
    case kBroadcast: return "broadcast";
    case kBarrier: return "barrier";
    case kAbort: return "abort";
  }
  return "an unknown frame";
}

struct Header {
  uint32_t kind = 0, seq = 0;
  int32_t root = 0;
  uint64_t count = 0, payload = 0;
};

void put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

std::array<uint8_t, kHeaderBytes> encode(const Header& h) {
  std::array<uint8_t, kHeaderBytes> b{};
  std::memcpy(b.data(), kMagic, 4);
  put(b.data() + 4, h.kind, 4);
  put(b.data() + 8, h.seq, 4);
  put(b.data() + 12, uint32_t(h.root), 4);
  put(b.data() + 16, h.count, 8);
  put(b.data() + 24, h.payload, 8);
  return b;
}

// False for a frame that is not ours (the magic) or announces an absurd payload.
bool decode(const uint8_t* b, Header* h) {
  if (std::memcmp(b, kMagic, 4) != 0) return false;
  h->kind = uint32_t(get(b + 4, 4));
  h->seq = uint32_t(get(b + 8, 4));
  h->root = int32_t(uint32_t(get(b + 12, 4)));
  h->count = get(b + 16, 8);
  h->payload = get(b + 24, 8);
  return h->payload <= (h->kind == kAbort ? kMaxReason : kMaxPayload);
}

// One rank's input of a collective.
struct Input {
  Header h;
  std::vector<uint8_t> data;
};

std::span<const uint8_t> bytes_of(const void* p, size_t n) { return {static_cast<const uint8_t*>(p), n}; }

class SocketComm final : public Communicator {
 public:
  SocketComm(int32_t rank, int32_t world, std::vector<int> fds, const CommOptions& opts)
      : rank_(rank), world_(world), fds_(std::move(fds)), half_written_(fds_.size(), 0), opts_(opts),
        inputs_(size_t(world)) {
    const int one = 1;
    for (int fd : fds_)
      if (fd >= 0) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~SocketComm() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  int32_t world() const override { return world_; }
  int32_t rank() const override { return rank_; }
  std::string name() const override { return "socket (one process per rank, fixed rank order via rank 0)"; }
  bool fixed_order() const override { return true; }

  Status all_reduce_sum(float* buf, size_t count, void*) override {
    std::vector<uint8_t> out;
    DSI_RETURN_IF_ERROR(call({kAllReduce, 0, 0, count, 0}, {bytes_of(buf, count * 4)}, out, count * 4));
    if (!out.empty()) std::memcpy(buf, out.data(), out.size());
    return Status::ok();
  }
  Status all_gather(const void* send, void* recv, size_t bytes, void*) override {
    std::vector<uint8_t> out;
    DSI_RETURN_IF_ERROR(call({kAllGather, 0, 0, bytes, 0}, {bytes_of(send, bytes)}, out, bytes * size_t(world_)));
    if (!out.empty()) std::memcpy(recv, out.data(), out.size());
    return Status::ok();
  }
  Status all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                      std::span<const size_t> recv_bytes, void*) override {
    if (send_bytes.size() != size_t(world_) || recv_bytes.size() != size_t(world_))
      return Status::errorf("all_to_all_v: {} send / {} receive sizes for {} ranks", send_bytes.size(),
                            recv_bytes.size(), world_);
    std::vector<uint8_t> sizes(size_t(world_) * 16);
    for (int32_t q = 0; q < world_; ++q) {
      put(sizes.data() + size_t(q) * 8, send_bytes[size_t(q)], 8);
      put(sizes.data() + size_t(world_ + q) * 8, recv_bytes[size_t(q)], 8);
    }
    const size_t total = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t(0));
    const size_t expect = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0));
    std::vector<uint8_t> out;
    DSI_RETURN_IF_ERROR(call({kAllToAll, 0, 0, 0, 0}, {sizes, bytes_of(send, total)}, out, expect));
    if (!out.empty()) std::memcpy(recv, out.data(), out.size());
    return Status::ok();
  }
  Status broadcast(void* buf, size_t bytes, int32_t root, void*) override {
    if (root < 0 || root >= world_) return Status::errorf("broadcast: root {} of {} ranks", root, world_);
    std::vector<uint8_t> out;
    DSI_RETURN_IF_ERROR(
        call({kBroadcast, 0, root, bytes, 0}, {bytes_of(buf, rank_ == root ? bytes : 0)}, out, bytes));
    if (!out.empty()) std::memcpy(buf, out.data(), out.size());
    return Status::ok();
  }
  Status barrier() override {
    std::vector<uint8_t> out;
    return call({kBarrier, 0, 0, 0, 0}, {}, out, 0);
  }

  void abort(const Status& reason) override {
    const Status why = reason.is_ok() ? Status::error("aborted") : reason;
    end(why, fmt::format("rank {} ended the group: {}", rank_, why.message()));
  }
  Status health() override {
    std::lock_guard<std::mutex> lk(mu_);
    return failed_;
  }

 private:
  // The collective `h` with this rank's input `parts`; `out` receives this rank's output (`expect` bytes).
  Status call(Header h, std::initializer_list<std::span<const uint8_t>> parts, std::vector<uint8_t>& out,
              size_t expect) {
    if (!health().is_ok()) return ended(h.kind);
    h.seq = seq_++;
    Input mine{h, {}};
    for (const auto& p : parts) mine.data.insert(mine.data.end(), p.begin(), p.end());
    mine.h.payload = mine.data.size();
    DSI_RETURN_IF_ERROR(rank_ == 0 ? call_root(std::move(mine), out) : call_peer(std::move(mine), out));
    if (out.size() != expect) {
      end(Status::errorf("rank {}: {} expected {} bytes, rank 0 answered {}", rank_, kind_name(h.kind), expect,
                         out.size()));
      return ended(h.kind);
    }
    return Status::ok();
  }

  Status ended(uint32_t kind) {
    return Status::errorf("rank {}: {} failed, the parallel group has ended: {}", rank_, kind_name(kind),
                          health().message());
  }

  // Ends the group (the first reason stays): tells the other side(s) `wire` where no frame is half written, then
  // shuts the sockets, which wakes a call blocked on them.
  void end(const Status& reason, const std::string& wire) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!failed_.is_ok()) return;
      failed_ = reason;
    }
    std::unique_lock<std::mutex> wl(write_mu_, std::try_to_lock);
    if (wl.owns_lock()) {
      const std::string text = wire.substr(0, size_t(kMaxReason));
      const auto head = encode({kAbort, 0, 0, 0, text.size()});
      const Clock::time_point by = Clock::now() + std::chrono::seconds(1);
      for (size_t i = 0; i < fds_.size(); ++i)
        if (fds_[i] >= 0 && !half_written_[i] && send_all(fds_[i], head.data(), head.size(), by).is_ok())
          (void)send_all(fds_[i], text.data(), text.size(), by);
    }
    for (int fd : fds_)
      if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
  void end(const Status& reason) { end(reason, reason.message()); }

  // One frame to fds_[i]; a frame cut short stays marked (no abort frame is written into its middle).
  Status write_frame(size_t i, const Header& h, std::span<const uint8_t> data, Clock::time_point deadline) {
    std::lock_guard<std::mutex> wl(write_mu_);
    if (!health().is_ok()) return health();
    half_written_[i] = 1;
    const auto head = encode(h);
    DSI_RETURN_IF_ERROR(send_all(fds_[i], head.data(), head.size(), deadline));
    if (!data.empty()) DSI_RETURN_IF_ERROR(send_all(fds_[i], data.data(), data.size(), deadline));
    half_written_[i] = 0;
    return Status::ok();
  }

  // The reason in an abort frame whose header is `h`, read from fd (a short wait: it was sent whole).
  std::string read_reason(int fd, const Header& h) {
    std::string text(size_t(h.payload), '\0');
    if (!recv_all(fd, text.data(), text.size(), Clock::now() + std::chrono::seconds(1)).is_ok())
      return "(its reason was cut off)";
    return text;
  }

  // ---- rank > 0: send the input to rank 0, read the output back.
  Status call_peer(Input mine, std::vector<uint8_t>& out) {
    const uint32_t kind = mine.h.kind;
    const Clock::time_point deadline = Clock::now() + opts_.timeout + kPeerGrace;
    Status st = write_frame(0, mine.h, mine.data, deadline);
    uint8_t raw[kHeaderBytes];
    if (st.is_ok()) {
      st = recv_all(fds_[0], raw, sizeof raw, deadline);
    } else if (health().is_ok()) {  // rank 0 may have said why it closed before it did
      if (recv_all(fds_[0], raw, sizeof raw, Clock::now() + std::chrono::milliseconds(200)).is_ok()) st = Status::ok();
    }
    if (!health().is_ok()) return ended(kind);  // aborted from another thread meanwhile
    if (!st.is_ok()) {
      const bool late = st.message().find("timed out") != std::string::npos;
      end(late ? Status::errorf("rank {} waited {} ms in {} for rank 0 (collective deadline)", rank_,
                                std::chrono::duration_cast<std::chrono::milliseconds>(opts_.timeout + kPeerGrace)
                                    .count(), kind_name(kind))
               : Status::errorf("rank {}: the connection to rank 0 closed in {} (rank 0 failed or exited): {}",
                                rank_, kind_name(kind), st.message()));
      return ended(kind);
    }
    Header h;
    if (!decode(raw, &h)) {
      end(Status::errorf("rank {}: rank 0 answered {} with a frame that is not a dsinfer collective", rank_,
                         kind_name(kind)));
      return ended(kind);
    }
    if (h.kind == kAbort) {
      const std::string why = read_reason(fds_[0], h);
      end(Status::error(why), why);
      return ended(kind);
    }
    if (h.kind != kind || h.seq != mine.h.seq) {
      end(Status::errorf("rank {}: rank 0 answered {} #{} with {} #{}", rank_, kind_name(kind), mine.h.seq,
                         kind_name(h.kind), h.seq));
      return ended(kind);
    }
    out.resize(size_t(h.payload));
    st = recv_all(fds_[0], out.data(), out.size(), deadline);
    if (!st.is_ok()) {
      if (health().is_ok())
        end(Status::errorf("rank {}: rank 0's answer to {} was cut off: {}", rank_, kind_name(kind), st.message()));
      return ended(kind);
    }
    return Status::ok();
  }

  // ---- rank 0: gather every input, compute every output, answer.
  Status call_root(Input mine, std::vector<uint8_t>& out) {
    const uint32_t kind = mine.h.kind;
    const Clock::time_point deadline = Clock::now() + opts_.timeout;
    inputs_[0] = std::move(mine);
    Status st = gather(kind, deadline);
    std::vector<std::vector<uint8_t>> outs;
    bool same = false;
    if (st.is_ok()) st = compute(outs, same);
    if (!st.is_ok()) {
      end(st);
      return ended(kind);
    }
    for (int32_t r = 1; r < world_; ++r) {
      const std::vector<uint8_t>& o = outs[same ? 0 : size_t(r)];
      st = write_frame(size_t(r), {kind, inputs_[0].h.seq, inputs_[0].h.root, inputs_[0].h.count, o.size()}, o,
                       deadline);
      if (!st.is_ok()) {
        if (health().is_ok())
          end(Status::errorf("rank 0 could not answer rank {} in {}: {}", r, kind_name(kind), st.message()));
        return ended(kind);
      }
    }
    out = std::move(outs[0]);
    return Status::ok();
  }

  // Every rank's input, read from every connection together: a rank that closes or aborts is seen at once.
  Status gather(uint32_t kind, Clock::time_point deadline) {
    struct Pending {
      uint8_t raw[kHeaderBytes];
      size_t got = 0;     // header bytes, then payload bytes
      bool head = false;  // the header is complete
      bool done = false;
    };
    std::vector<Pending> p(static_cast<size_t>(world_));
    for (;;) {
      std::vector<pollfd> pfds;
      std::vector<int32_t> who;
      for (int32_t r = 1; r < world_; ++r)
        if (!p[size_t(r)].done) {
          pfds.push_back({fds_[size_t(r)], POLLIN, 0});
          who.push_back(r);
        }
      if (pfds.empty()) return Status::ok();
      if (!health().is_ok()) return health();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        std::string missing;
        for (int32_t r : who) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        return Status::errorf("rank 0 waited {} ms in {} for rank(s) {} (collective deadline)", opts_.timeout.count(),
                              kind_name(kind), missing);
      }
      const int n = ::poll(pfds.data(), pfds.size(), int(std::min<long long>(left, 100)));
      if (n < 0 && errno != EINTR) return Status::errorf("rank 0: poll: {}", std::strerror(errno));
      for (size_t k = 0; n > 0 && k < pfds.size(); ++k) {
        if (!pfds[k].revents) continue;
        const int32_t r = who[k];
        Pending& q = p[size_t(r)];
        Input& in = inputs_[size_t(r)];
        uint8_t* dst = q.head ? in.data.data() + q.got : q.raw + q.got;
        const size_t want = q.head ? in.data.size() - q.got : kHeaderBytes - q.got;
        const ssize_t got = ::recv(fds_[size_t(r)], dst, want, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (!health().is_ok()) return health();  // aborted here: the sockets were shut
        if (got == 0 || (got < 0 && (errno == ECONNRESET || errno == EPIPE)))
          return Status::errorf("rank {} closed its connection in {} (it failed or exited)", r, kind_name(kind));
        if (got < 0) return Status::errorf("rank 0: recv from rank {}: {}", r, std::strerror(errno));
        q.got += size_t(got);
        if (!q.head && q.got == kHeaderBytes) {
          if (!decode(q.raw, &in.h))
            return Status::errorf("rank {} sent a frame that is not a dsinfer collective in {}", r, kind_name(kind));
          if (in.h.kind == kAbort) return Status::error(read_reason(fds_[size_t(r)], in.h));
          if (in.h.kind != kind || in.h.seq != inputs_[0].h.seq)
            return Status::errorf("ranks disagree on the collective: rank 0 called {} #{}, rank {} {} #{}",
                                  kind_name(kind), inputs_[0].h.seq, r, kind_name(in.h.kind), in.h.seq);
          q.head = true;
          q.got = 0;
          in.data.resize(size_t(in.h.payload));
        }
        if (q.head && q.got == in.data.size()) q.done = true;
      }
    }
  }

  // Every rank's output from every rank's input (same: one output for all, in outs[0]).
  Status compute(std::vector<std::vector<uint8_t>>& outs, bool& same) const {
    const Header& me = inputs_[0].h;
    for (int32_t r = 1; r < world_; ++r) {
      const Header& h = inputs_[size_t(r)].h;
      if (h.count != me.count || h.root != me.root)
        return Status::errorf("ranks disagree on the collective: rank 0 called {} ({} count, root {}), rank {} "
                              "({} count, root {})", kind_name(me.kind), me.count, me.root, r, h.count, h.root);
    }
    same = me.kind != kAllToAll;
    outs.assign(same ? 1 : size_t(world_), {});
    switch (me.kind) {
      case kAllReduce: {
        for (int32_t r = 0; r < world_; ++r)
          if (inputs_[size_t(r)].data.size() != me.count * 4)
            return Status::errorf("all_reduce_sum: rank {} sent {} bytes for {} values", r,
                                  inputs_[size_t(r)].data.size(), me.count);
        outs[0].resize(size_t(me.count) * 4);
        for (size_t i = 0; i < me.count; ++i) {  // rank order, fp64, one rounding: the in-process group's bits
          double acc = 0;
          for (const Input& in : inputs_) {
            float v;
            std::memcpy(&v, in.data.data() + i * 4, 4);
            acc += double(v);
          }
          const float o = float(acc);
          std::memcpy(outs[0].data() + i * 4, &o, 4);
        }
        return Status::ok();
      }
      case kAllGather:
        for (int32_t r = 0; r < world_; ++r) {
          if (inputs_[size_t(r)].data.size() != me.count)
            return Status::errorf("all_gather: rank {} sent {} of {} bytes", r, inputs_[size_t(r)].data.size(),
                                  me.count);
          outs[0].insert(outs[0].end(), inputs_[size_t(r)].data.begin(), inputs_[size_t(r)].data.end());
        }
        return Status::ok();
      case kBroadcast:
        if (inputs_[size_t(me.root)].data.size() != me.count)
          return Status::errorf("broadcast: root {} sent {} of {} bytes", me.root,
                                inputs_[size_t(me.root)].data.size(), me.count);
        outs[0] = inputs_[size_t(me.root)].data;
        return Status::ok();
      case kBarrier: return Status::ok();
      case kAllToAll: return exchange(outs);
    }
    return Status::errorf("rank 0: unknown collective {}", me.kind);
  }

  // all_to_all_v: what each sender announced is what its receiver expects (every pair checked here, so every rank
  // gets the same answer), then each rank's segments of every rank's send buffer, in rank order.
  Status exchange(std::vector<std::vector<uint8_t>>& outs) const {
    const size_t w = size_t(world_);
    auto size_at = [&](size_t r, size_t k) { return size_t(get(inputs_[r].data.data() + k * 8, 8)); };
    for (size_t r = 0; r < w; ++r) {
      if (inputs_[r].data.size() < w * 16)
        return Status::errorf("all_to_all_v: rank {} sent {} bytes, not its sizes", r, inputs_[r].data.size());
      size_t total = 0;
      for (size_t q = 0; q < w; ++q) total += size_at(r, q);
      if (inputs_[r].data.size() != w * 16 + total)
        return Status::errorf("all_to_all_v: rank {}'s send sizes add to {} bytes, it sent {}", r, total,
                              inputs_[r].data.size() - w * 16);
    }
    for (size_t q = 0; q < w; ++q)
      for (size_t r = 0; r < w; ++r)
        if (size_at(r, q) != size_at(q, w + r))
          return Status::errorf("all_to_all_v: rank {} expected {} bytes from rank {}, which sent {}", q,
                                size_at(q, w + r), r, size_at(r, q));
    for (size_t q = 0; q < w; ++q)
      for (size_t r = 0; r < w; ++r) {
        size_t off = w * 16;
        for (size_t k = 0; k < q; ++k) off += size_at(r, k);
        const uint8_t* src = inputs_[r].data.data() + off;
        outs[q].insert(outs[q].end(), src, src + size_at(r, q));
      }
    return Status::ok();
  }

  const int32_t rank_, world_;
  std::vector<int> fds_;             // rank 0: [r] = rank r's connection ([0] = -1); a rank > 0: [0] = rank 0's
  std::vector<char> half_written_;   // per connection: a frame was cut short there (guarded by write_mu_)
  const CommOptions opts_;
  uint32_t seq_ = 0;                 // the collectives so far (the caller's thread only)
  std::vector<Input> inputs_;        // rank 0: every rank's input of the current collective
  std::mutex mu_, write_mu_;
  Status failed_ = Status::ok();
};

}  // namespace

Result<std::unique_ptr<Communicator>> accept_socket_group(RendezvousServer& server, int32_t world,
                                                          const CommOptions& opts) {
  if (world < 2) return Status::errorf("socket communicator: {} ranks (2 or more)", world);
  DSI_ASSIGN_OR_RETURN(std::vector<int> fds, server.accept_ranks(world, Clock::now() + opts.timeout));
  return std::unique_ptr<Communicator>(std::make_unique<SocketComm>(0, world, std::move(fds), opts));
}

Result<std::unique_ptr<Communicator>> join_socket_group(const std::string& addr, int32_t port, int32_t rank,
                                                        int32_t world, const CommOptions& opts) {
  if (world < 2 || rank < 1 || rank >= world)
    return Status::errorf("socket communicator: rank {} of {} ranks", rank, world);
  DSI_ASSIGN_OR_RETURN(const int fd, rendezvous_connect(addr, port, rank, world, Clock::now() + opts.timeout));
  return std::unique_ptr<Communicator>(std::make_unique<SocketComm>(rank, world, std::vector<int>{fd}, opts));
}

Result<std::unique_ptr<Communicator>> connect_socket_group(const LaunchEnv& env, const CommOptions& opts) {
  if (env.rank != 0) return join_socket_group(env.master_addr, env.master_port, env.rank, env.world, opts);
  DSI_ASSIGN_OR_RETURN(RendezvousServer server, RendezvousServer::listen(env.master_addr, env.master_port));
  return accept_socket_group(server, env.world, opts);
}

}  // namespace dsinfer::parallel
