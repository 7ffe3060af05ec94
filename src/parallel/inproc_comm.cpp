// In-process communicator (see inproc_comm.h): one mutex, one condition variable and a generation counter per
// group. A collective is publish (stage the input, record what was called) -> barrier -> compute this rank's
// output from every staged input -> barrier -> write the output back.
#include "parallel/inproc_comm.h"

#include <cstring>
#include <numeric>
#include <span>

namespace dsinfer::parallel {

Status DeviceAccess::mark(int32_t rank, void*, MarkSet) const {
  return Status::errorf("rank {}: this in-process group's ranks do not share one device", rank);
}
Status DeviceAccess::wait_mark(int32_t rank, void*, MarkSet) const {
  return Status::errorf("rank {}: this in-process group's ranks do not share one device", rank);
}
Status DeviceAccess::sum_in_rank_order(float* const*, int32_t, size_t, void*) const {
  return Status::error("this in-process group's ranks do not share one device");
}
Status DeviceAccess::copy_on_device(void*, const void*, size_t, void*) const {
  return Status::error("this in-process group's ranks do not share one device");
}

namespace {

enum class Op { kAllReduce, kAllGather, kAllToAll, kBroadcast, kBarrier };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce_sum";
    case Op::kAllGather: return "all_gather";
    case Op::kAllToAll: return "all_to_all_v";
    case Op::kBroadcast: return "broadcast";
    case Op::kBarrier: return "barrier";
  }
  return "?";
}

struct Call {
  Op op = Op::kBarrier;
  size_t bytes = 0;  // all_reduce / all_gather / broadcast: the same on every rank
  int32_t root = 0;
  std::vector<size_t> send_bytes;   // all_to_all_v
  std::vector<uint8_t> staged;      // this rank's input, in host memory
  // On a shared device (nothing staged): all_reduce's buffer (float), all_to_all_v's send buffer (null when it
  // sends nothing).
  bool on_device = false;
  const void* device = nullptr;
  std::vector<size_t> recv_bytes = {};  // all_to_all_v on a shared device: what this rank expects from each rank
};

}  // namespace

class InProcessGroup {
 public:
  InProcessGroup(int32_t world, const CommOptions& opts, const DeviceAccess* device)
      : world_(world), opts_(opts), device_(device), calls_(size_t(world)), arrived_gen_(size_t(world), 0) {}

  int32_t world() const { return world_; }

  void abort(const Status& reason) {
    std::lock_guard<std::mutex> lk(mu_);
    fail_locked(reason);
  }
  Status health() {
    std::lock_guard<std::mutex> lk(mu_);
    return failed_;
  }

  Status stage_in(int32_t rank, const void* src, size_t bytes, void* stream, std::vector<uint8_t>& dst) const {
    dst.resize(bytes);
    if (bytes == 0) return Status::ok();
    if (!stream) {
      std::memcpy(dst.data(), src, bytes);
      return Status::ok();
    }
    if (!device_) return Status::errorf("rank {}: a device buffer was given to a host-only in-process group", rank);
    return device_->to_host(dst.data(), src, bytes, stream);
  }
  Status stage_out(int32_t rank, void* dst, const std::vector<uint8_t>& src, void* stream) const {
    if (src.empty()) return Status::ok();
    if (!stream) {
      std::memcpy(dst, src.data(), src.size());
      return Status::ok();
    }
    if (!device_) return Status::errorf("rank {}: a device buffer was given to a host-only in-process group", rank);
    return device_->from_host(dst, src.data(), src.size(), stream);
  }

  // The whole collective of one rank: `call` already holds its staged input; `out` receives its output.
  Status run(int32_t rank, Call call, std::vector<uint8_t>& out) {
    const Op op = call.op;
    calls_[size_t(rank)] = std::move(call);
    DSI_RETURN_IF_ERROR(barrier(rank, op));
    Status st = compute(rank, out);
    if (!st.is_ok()) abort(st);
    DSI_RETURN_IF_ERROR(barrier(rank, op));  // nobody's staging is reused while another rank still reads it
    return st;
  }

  // Ranks sharing one device (DeviceAccess, inproc_comm.h): the all-reduce of the ranks' device buffers, on the
  // device. Marks and waits are ordered by the two rendezvous; rank 0 issues the sum on its stream.
  bool on_shared_device(void* stream) const {
    return stream && device_ && world_ <= device_->shared_device_ranks();
  }
  Status reduce_on_device(int32_t rank, float* buf, size_t count, void* stream) {
    if (rank > 0) DSI_RETURN_IF_ERROR(device_->mark(rank, stream, MarkSet::kReduce));
    calls_[size_t(rank)] = Call{Op::kAllReduce, count * sizeof(float), 0, {}, {}, true, buf};
    DSI_RETURN_IF_ERROR(barrier(rank, Op::kAllReduce));
    Status st = agree(rank);
    if (st.is_ok() && rank == 0) st = sum_on_device(count, stream);
    if (!st.is_ok()) abort(st);
    DSI_RETURN_IF_ERROR(barrier(rank, Op::kAllReduce));  // rank 0's mark is recorded before anyone waits for it
    if (rank > 0) DSI_RETURN_IF_ERROR(device_->wait_mark(0, stream, MarkSet::kReduce));
    return st;
  }

  // all_to_all_v of ranks sharing one device (DeviceAccess, inproc_comm.h): each rank copies its segments out of
  // every rank's send buffer on its own stream, between the kSent and kRead marks.
  Status exchange_on_device(int32_t rank, const void* send, std::span<const size_t> send_bytes, void* recv,
                            std::span<const size_t> recv_bytes, void* stream) {
    DSI_RETURN_IF_ERROR(device_->mark(rank, stream, MarkSet::kSent));
    calls_[size_t(rank)] = Call{Op::kAllToAll, 0, 0, {send_bytes.begin(), send_bytes.end()}, {}, true, send,
                                {recv_bytes.begin(), recv_bytes.end()}};
    DSI_RETURN_IF_ERROR(barrier(rank, Op::kAllToAll));
    Status st = agree(rank);
    if (st.is_ok()) st = sizes_agree();  // every rank decides alike: all copy, or none reads a buffer
    if (st.is_ok()) st = copy_segments(rank, recv, stream);
    if (st.is_ok()) st = device_->mark(rank, stream, MarkSet::kRead);
    if (!st.is_ok()) abort(st);
    DSI_RETURN_IF_ERROR(barrier(rank, Op::kAllToAll));  // every kRead mark is recorded before anyone waits for it
    for (int32_t r = 0; r < world_; ++r)
      if (r != rank) DSI_RETURN_IF_ERROR(device_->wait_mark(r, stream, MarkSet::kRead));
    return st;
  }

  // Returns when every rank has arrived (ok), or the group failed / the deadline passed (its reason).
  Status barrier(int32_t rank, Op op) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!failed_.is_ok()) return with_rank(rank, op);
    const uint64_t gen = gen_;
    arrived_gen_[size_t(rank)] = gen + 1;
    if (++arrived_ == world_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
      return Status::ok();
    }
    const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    if (!cv_.wait_until(lk, deadline, [&] { return gen_ != gen || !failed_.is_ok(); })) {
      std::string missing;
      for (int32_t r = 0; r < world_; ++r)
        if (arrived_gen_[size_t(r)] != gen + 1) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      fail_locked(Status::errorf("rank {} waited {} ms in {} for rank(s) {} (collective deadline)", rank,
                                 opts_.timeout.count(), op_name(op), missing));
    }
    if (gen_ != gen) return Status::ok();
    return with_rank(rank, op);
  }

 private:
  Status with_rank(int32_t rank, Op op) const {
    return Status::errorf("rank {}: {} failed, the parallel group has ended: {}", rank, op_name(op), failed_.message());
  }
  void fail_locked(const Status& reason) {
    if (!failed_.is_ok()) return;
    failed_ = reason.is_ok() ? Status::error("aborted") : reason;
    cv_.notify_all();
  }

  // Every rank called the same collective with the same sizes (a device all-reduce on every rank or on none).
  Status agree(int32_t rank) const {
    const Call& me = calls_[size_t(rank)];
    for (int32_t r = 0; r < world_; ++r) {
      const Call& c = calls_[size_t(r)];
      if (c.op != me.op || (me.op != Op::kAllToAll && (c.bytes != me.bytes || c.root != me.root)) ||
          c.on_device != me.on_device)
        return Status::errorf("ranks disagree on the collective: rank {} called {} ({} bytes, root {}{}), rank {} {} "
                              "({} bytes, root {}{})", rank, op_name(me.op), me.bytes, me.root,
                              me.on_device ? ", on the device" : "", r, op_name(c.op), c.bytes, c.root,
                              c.on_device ? ", on the device" : "");
    }
    return Status::ok();
  }

  // Rank 0, between the rendezvous: its stream waits for every other rank's partial sums, sums every rank's buffer
  // in rank order in place, and marks the result.
  Status sum_on_device(size_t count, void* stream) const {
    std::vector<float*> bufs(static_cast<size_t>(world_), nullptr);
    for (int32_t r = 0; r < world_; ++r) {
      bufs[size_t(r)] = static_cast<float*>(const_cast<void*>(calls_[size_t(r)].device));  // the rank's own buffer
      if (r > 0) DSI_RETURN_IF_ERROR(device_->wait_mark(r, stream, MarkSet::kReduce));
    }
    if (count > 0) DSI_RETURN_IF_ERROR(device_->sum_in_rank_order(bufs.data(), world_, count, stream));
    return device_->mark(0, stream, MarkSet::kReduce);
  }

  // Between the rendezvous of a device all_to_all_v, on every rank: what every sender announced is what its receiver
  // expects (all_to_all_v checked each rank's counts of sizes). Every rank checks every pair, so all reach the same
  // answer: a rank that refused alone would leave while the others still copy out of its send buffer.
  Status sizes_agree() const {
    for (int32_t q = 0; q < world_; ++q)
      for (int32_t r = 0; r < world_; ++r) {
        const size_t sent = calls_[size_t(r)].send_bytes[size_t(q)], expected = calls_[size_t(q)].recv_bytes[size_t(r)];
        if (sent != expected)
          return Status::errorf("all_to_all_v: rank {} expected {} bytes from rank {}, which sent {}", q, expected, r,
                                sent);
      }
    return Status::ok();
  }

  // Between the rendezvous of a device all_to_all_v (sizes_agree first): rank's stream waits for every other rank's
  // kSent mark, then copies segment `rank` of every rank's send buffer to its receive buffer, in rank order.
  Status copy_segments(int32_t rank, void* recv, void* stream) const {
    size_t at = 0;
    for (int32_t r = 0; r < world_; ++r) {
      const Call& c = calls_[size_t(r)];
      const size_t len = c.send_bytes[size_t(rank)];
      if (r != rank) DSI_RETURN_IF_ERROR(device_->wait_mark(r, stream, MarkSet::kSent));
      const size_t off = std::accumulate(c.send_bytes.begin(), c.send_bytes.begin() + rank, size_t(0));
      if (len > 0)
        DSI_RETURN_IF_ERROR(device_->copy_on_device(static_cast<uint8_t*>(recv) + at,
                                                    static_cast<const uint8_t*>(c.device) + off, len, stream));
      at += len;
    }
    return Status::ok();
  }

  Status compute(int32_t rank, std::vector<uint8_t>& out) const {
    DSI_RETURN_IF_ERROR(agree(rank));
    const Call& me = calls_[size_t(rank)];
    switch (me.op) {
      case Op::kAllReduce: return reduce(out);
      case Op::kAllGather:
        out.clear();
        for (const Call& c : calls_) out.insert(out.end(), c.staged.begin(), c.staged.end());
        return Status::ok();
      case Op::kAllToAll: return exchange(rank, out);
      case Op::kBroadcast: out = calls_[size_t(me.root)].staged; return Status::ok();
      case Op::kBarrier: out.clear(); return Status::ok();
    }
    return Status::error("in-process group: unknown collective");
  }

  // Fixed rank order, fp64 accumulation, one rounding: the same bits for any world size's timing and any count.
  Status reduce(std::vector<uint8_t>& out) const {
    const size_t n = calls_[0].bytes / sizeof(float);
    out.resize(n * sizeof(float));
    float* o = reinterpret_cast<float*>(out.data());
    for (size_t i = 0; i < n; ++i) {
      double acc = 0;
      for (const Call& c : calls_) {
        float v;
        std::memcpy(&v, c.staged.data() + i * sizeof(float), sizeof(float));
        acc += double(v);
      }
      o[i] = float(acc);
    }
    return Status::ok();
  }

  Status exchange(int32_t rank, std::vector<uint8_t>& out) const {
    out.clear();
    for (int32_t r = 0; r < world_; ++r) {
      const Call& c = calls_[size_t(r)];
      if (c.send_bytes.size() != size_t(world_))
        return Status::errorf("all_to_all_v: rank {} gave {} send sizes for {} ranks", r, c.send_bytes.size(), world_);
      const size_t off = std::accumulate(c.send_bytes.begin(), c.send_bytes.begin() + rank, size_t(0));
      const size_t len = c.send_bytes[size_t(rank)];
      if (off + len > c.staged.size()) return Status::errorf("all_to_all_v: rank {}'s send sizes exceed its buffer", r);
      out.insert(out.end(), c.staged.begin() + std::ptrdiff_t(off), c.staged.begin() + std::ptrdiff_t(off + len));
    }
    return Status::ok();
  }

  const int32_t world_;
  const CommOptions opts_;
  const DeviceAccess* device_;
  std::vector<Call> calls_;  // rank r writes calls_[r] before the first barrier; everyone reads between the two
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> arrived_gen_;
  int32_t arrived_ = 0;
  uint64_t gen_ = 0;
  Status failed_ = Status::ok();
};

namespace {

class InProcessComm final : public Communicator {
 public:
  InProcessComm(std::shared_ptr<InProcessGroup> g, int32_t rank) : g_(std::move(g)), rank_(rank) {}
  int32_t world() const override { return g_->world(); }
  int32_t rank() const override { return rank_; }
  std::string name() const override { return "in-process (fixed rank order)"; }
  bool fixed_order() const override { return true; }

  Status all_reduce_sum(float* buf, size_t count, void* stream) override {
    if (g_->on_shared_device(stream)) return g_->reduce_on_device(rank_, buf, count, stream);
    Call c{Op::kAllReduce, count * sizeof(float), 0, {}, {}};
    DSI_RETURN_IF_ERROR(g_->stage_in(rank_, buf, c.bytes, stream, c.staged));
    return finish(std::move(c), buf, stream);
  }
  Status all_gather(const void* send, void* recv, size_t bytes, void* stream) override {
    Call c{Op::kAllGather, bytes, 0, {}, {}};
    DSI_RETURN_IF_ERROR(g_->stage_in(rank_, send, bytes, stream, c.staged));
    return finish(std::move(c), recv, stream);
  }
  Status all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                      std::span<const size_t> recv_bytes, void* stream) override {
    if (send_bytes.size() != size_t(world()) || recv_bytes.size() != size_t(world()))
      return Status::errorf("all_to_all_v: {} send / {} receive sizes for {} ranks", send_bytes.size(),
                            recv_bytes.size(), world());
    if (g_->on_shared_device(stream))
      return g_->exchange_on_device(rank_, send, send_bytes, recv, recv_bytes, stream);
    Call c{Op::kAllToAll, 0, 0, {send_bytes.begin(), send_bytes.end()}, {}};
    const size_t total = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t(0));
    DSI_RETURN_IF_ERROR(g_->stage_in(rank_, send, total, stream, c.staged));
    std::vector<uint8_t> out;
    DSI_RETURN_IF_ERROR(g_->run(rank_, std::move(c), out));
    if (out.size() != std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0)))
      return Status::errorf("all_to_all_v: rank {} expected {} bytes, the other ranks sent {}", rank_,
                            std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0)), out.size());
    return g_->stage_out(rank_, recv, out, stream);
  }
  Status broadcast(void* buf, size_t bytes, int32_t root, void* stream) override {
    if (root < 0 || root >= world()) return Status::errorf("broadcast: root {} of {} ranks", root, world());
    Call c{Op::kBroadcast, bytes, root, {}, {}};
    DSI_RETURN_IF_ERROR(g_->stage_in(rank_, buf, rank_ == root ? bytes : 0, stream, c.staged));
    return finish(std::move(c), buf, stream);
  }
  Status barrier() override {
    std::vector<uint8_t> out;
    return g_->run(rank_, Call{Op::kBarrier, 0, 0, {}, {}}, out);
  }
  void abort(const Status& reason) override { g_->abort(reason); }
  Status health() override { return g_->health(); }

 private:
  Status finish(Call c, void* dst, void* stream) {
    std::vector<uint8_t> out;
    DSI_RETURN_IF_ERROR(g_->run(rank_, std::move(c), out));
    return g_->stage_out(rank_, dst, out, stream);
  }

  std::shared_ptr<InProcessGroup> g_;
  int32_t rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_inprocess_group(int32_t world, const CommOptions& opts,
                                                                const DeviceAccess* device) {
  auto g = std::make_shared<InProcessGroup>(world, opts, device);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int32_t r = 0; r < world; ++r) out.push_back(std::make_unique<InProcessComm>(g, r));
  return out;
}

}  // namespace dsinfer::parallel
