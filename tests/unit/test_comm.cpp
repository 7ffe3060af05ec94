// The in-process communicator and the shard pool (docs/multi_gpu.md "Communicators", "Faults"): every collective
// against a result computed here by hand, the fixed rank-order reduction on values whose fp32 sum depends on the
// order, and the failure paths: an abort wakes every blocked rank with the reason, a rank that never arrives fails
// the others at the deadline naming it, ranks that disagree on the call are refused, and a worker that throws or
// fails reports its rank once. Threads here are the ranks, as in the ParallelRunners.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>

#include "parallel/inproc_comm.h"
#include "parallel/shard_pool.h"

namespace {

using dsinfer::Status;
using dsinfer::parallel::CommOptions;
using dsinfer::parallel::Communicator;
using dsinfer::parallel::make_inprocess_group;

// Runs f(rank, comm) on one thread per rank and returns each rank's status.
template <typename F>
std::vector<Status> on_ranks(std::vector<std::unique_ptr<Communicator>>& comms, F f) {
  std::vector<std::future<Status>> fs;
  for (size_t r = 0; r < comms.size(); ++r)
    fs.push_back(std::async(std::launch::async, [&, r] { return f(int32_t(r), *comms[r]); }));
  std::vector<Status> out;
  for (auto& x : fs) out.push_back(x.get());
  return out;
}

CommOptions quick(int ms = 20000) { return CommOptions{std::chrono::milliseconds(ms)}; }

}  // namespace

// The sum is taken in rank order in fp64 and rounded once, whatever the arrival order: with 1e8, 1, -1e8, 1 an
// fp32 running sum in another order gives 0 or 2^k-rounded values, the fixed order gives exactly 2.
TEST(InProcessComm, AllReduceSumsInRankOrder) {
  for (int32_t world : {2, 3, 4, 8}) {
    auto comms = make_inprocess_group(world, quick());
    std::vector<std::vector<float>> bufs(static_cast<size_t>(world));
    for (int32_t r = 0; r < world; ++r)
      for (int i = 0; i < 37; ++i)
        bufs[size_t(r)].push_back(r % 4 == 0 ? 1e8f : r % 4 == 2 ? -1e8f : float(i) * 0.1f + r);
    std::vector<float> expect(37);
    for (int i = 0; i < 37; ++i) {
      double acc = 0;
      for (int32_t r = 0; r < world; ++r) acc += double(bufs[size_t(r)][size_t(i)]);
      expect[size_t(i)] = float(acc);
    }
    for (int rep = 0; rep < 5; ++rep) {
      auto work = bufs;
      auto st = on_ranks(comms, [&](int32_t r, Communicator& c) {
        std::this_thread::sleep_for(std::chrono::microseconds(((r * 7 + rep * 3) % 5) * 200));  // vary arrival
        return c.all_reduce_sum(work[size_t(r)].data(), 37, nullptr);
      });
      for (int32_t r = 0; r < world; ++r) {
        ASSERT_TRUE(st[size_t(r)].is_ok()) << st[size_t(r)].message();
        EXPECT_EQ(0, std::memcmp(work[size_t(r)].data(), expect.data(), 37 * sizeof(float)))
            << "world " << world << " rank " << r;
      }
    }
  }
  // The case the order decides: 1e8 + 1 - 1e8 + 1 in fp32, left to right, is 1; in fp64 rank order exactly 2.
  auto comms = make_inprocess_group(4, quick());
  std::vector<std::vector<float>> v = {{1e8f}, {1.0f}, {-1e8f}, {1.0f}};
  auto st =
      on_ranks(comms, [&](int32_t r, Communicator& c) { return c.all_reduce_sum(v[size_t(r)].data(), 1, nullptr); });
  for (int32_t r = 0; r < 4; ++r) {
    ASSERT_TRUE(st[size_t(r)].is_ok());
    EXPECT_EQ(v[size_t(r)][0], 2.0f);
  }
}

TEST(InProcessComm, GatherAllToAllBroadcastBarrier) {
  for (int32_t world : {2, 3, 8}) {
    auto comms = make_inprocess_group(world, quick());
    std::vector<std::vector<int32_t>> gathered(static_cast<size_t>(world)), got(static_cast<size_t>(world)),
        bc(static_cast<size_t>(world));
    auto st = on_ranks(comms, [&](int32_t r, Communicator& c) -> Status {
      const int32_t mine[2] = {r, 100 + r};
      gathered[size_t(r)].resize(size_t(2 * world));
      DSI_RETURN_IF_ERROR(c.all_gather(mine, gathered[size_t(r)].data(), sizeof(mine), nullptr));
      // Rank r sends q + 1 ints, each r * 1000 + q, to rank q; it receives r + 1 ints from every rank.
      std::vector<int32_t> send;
      std::vector<size_t> sb, rb;
      for (int32_t q = 0; q < world; ++q) {
        for (int32_t k = 0; k <= q; ++k) send.push_back(r * 1000 + q);
        sb.push_back(size_t(q + 1) * 4);
        rb.push_back(size_t(r + 1) * 4);
      }
      got[size_t(r)].resize(size_t(world * (r + 1)));
      DSI_RETURN_IF_ERROR(c.all_to_all_v(send.data(), sb, got[size_t(r)].data(), rb, nullptr));
      bc[size_t(r)] = {r, r, r};
      DSI_RETURN_IF_ERROR(c.broadcast(bc[size_t(r)].data(), 12, world - 1, nullptr));
      return c.barrier();
    });
    for (int32_t r = 0; r < world; ++r) {
      ASSERT_TRUE(st[size_t(r)].is_ok()) << st[size_t(r)].message();
      for (int32_t q = 0; q < world; ++q) {
        EXPECT_EQ(gathered[size_t(r)][size_t(2 * q)], q);
        EXPECT_EQ(gathered[size_t(r)][size_t(2 * q + 1)], 100 + q);
        for (int32_t k = 0; k <= r; ++k) EXPECT_EQ(got[size_t(r)][size_t(q * (r + 1) + k)], q * 1000 + r);
      }
      EXPECT_EQ(bc[size_t(r)], (std::vector<int32_t>{world - 1, world - 1, world - 1}));
    }
  }
}

// Device buffers (a non-null stream, as the CUDA ranks pass theirs) go through the group's DeviceAccess, both ways,
// on the caller's stream: here a host-memory stand-in that counts its copies and checks the stream it is given. The
// all_to_all_v pattern is the expert exchange's (zero-byte segments included: a rank without tokens). A host-only
// group refuses a device buffer, naming the rank.
TEST(InProcessComm, DeviceBuffersGoThroughTheDeviceAccess) {
  struct CountingAccess final : dsinfer::parallel::DeviceAccess {
    mutable std::atomic<int> to{0}, from{0}, wrong_stream{0};
    Status to_host(void* dst, const void* src, size_t bytes, void* stream) const override {
      ++to;
      if (stream != reinterpret_cast<void*>(0x5)) ++wrong_stream;
      std::memcpy(dst, src, bytes);
      return Status::ok();
    }
    Status from_host(void* dst, const void* src, size_t bytes, void* stream) const override {
      ++from;
      if (stream != reinterpret_cast<void*>(0x5)) ++wrong_stream;
      std::memcpy(dst, src, bytes);
      return Status::ok();
    }
  } access;
  auto comms = make_inprocess_group(3, quick(), &access);
  // Rank r sends r * q ints (value 10 * r + q) to rank q: rank 0 sends nothing, rank q receives r * q from r.
  std::vector<std::vector<int32_t>> got(3);
  auto st = on_ranks(comms, [&](int32_t r, Communicator& c) -> Status {
    std::vector<int32_t> send;
    std::vector<size_t> sb, rb;
    for (int32_t q = 0; q < 3; ++q) {
      for (int32_t k = 0; k < r * q; ++k) send.push_back(10 * r + q);
      sb.push_back(size_t(r * q) * 4);
      rb.push_back(size_t(q * r) * 4);
    }
    got[size_t(r)].assign(size_t(3 * r), -1);
    return c.all_to_all_v(send.data(), sb, got[size_t(r)].data(), rb, reinterpret_cast<void*>(0x5));
  });
  for (int32_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[size_t(r)].is_ok()) << st[size_t(r)].message();
    std::vector<int32_t> want;
    for (int32_t q = 0; q < 3; ++q)
      for (int32_t k = 0; k < q * r; ++k) want.push_back(10 * q + r);
    EXPECT_EQ(got[size_t(r)], want) << "rank " << r;
  }
  EXPECT_GE(access.to.load(), 2);  // ranks with bytes to send staged them through the access
  EXPECT_GE(access.from.load(), 2);
  EXPECT_EQ(access.wrong_stream.load(), 0);
  auto host_only = make_inprocess_group(2, quick());
  float x = 1;
  auto refused = on_ranks(host_only, [&](int32_t, Communicator& c) {
    return c.all_reduce_sum(&x, 1, reinterpret_cast<void*>(0x5));
  });
  EXPECT_NE(refused[0].message().find("device buffer was given to a host-only in-process group"), std::string::npos)
      << refused[0].message();
}

// Ranks sharing one device: all_reduce_sum never stages through the host; it marks, waits and sums through the
// DeviceAccess (inproc_comm.h). Here a host stand-in runs each call at once and records, for every wait, which of
// the marked rank's marks it saw: rank 0 must wait for each other rank's mark of the same collective (its partial
// sums) and every other rank for rank 0's mark of that collective (the sum), never an older or newer one, over
// many collectives with random delays on every rank; the sums are the fixed rank order's bits.
TEST(InProcessComm, SharedDeviceAllReduceJoinsTheRanksThroughMarks) {
  constexpr int32_t kWorld = 4;
  constexpr int32_t kCalls = 150;
  struct SharedDevice final : dsinfer::parallel::DeviceAccess {
    mutable std::mutex mu;
    mutable std::vector<int64_t> marks = std::vector<int64_t>(kWorld, 0);  // marks recorded per rank
    mutable std::vector<std::vector<int64_t>> seen = std::vector<std::vector<int64_t>>(kWorld);  // per waiting stream
    mutable std::atomic<int> staged{0}, sums{0};
    static int32_t rank_of(void* stream) { return int32_t(reinterpret_cast<intptr_t>(stream)) - 1; }
    Status to_host(void*, const void*, size_t, void*) const override { ++staged; return Status::ok(); }
    Status from_host(void*, const void*, size_t, void*) const override { ++staged; return Status::ok(); }
    int32_t shared_device_ranks() const override { return kWorld; }
    Status mark(int32_t rank, void* stream, dsinfer::parallel::MarkSet set) const override {
      std::lock_guard<std::mutex> lk(mu);
      if (rank_of(stream) != rank) return Status::errorf("rank {} marked on rank {}'s stream", rank, rank_of(stream));
      if (set != dsinfer::parallel::MarkSet::kReduce) return Status::error("an all-reduce marked another set");
      ++marks[size_t(rank)];
      return Status::ok();
    }
    Status wait_mark(int32_t rank, void* stream, dsinfer::parallel::MarkSet set) const override {
      std::lock_guard<std::mutex> lk(mu);
      if (set != dsinfer::parallel::MarkSet::kReduce) return Status::error("an all-reduce waited on another set");
      seen[size_t(rank_of(stream))].push_back(rank * 1000000 + marks[size_t(rank)]);
      return Status::ok();
    }
    Status sum_in_rank_order(float* const* bufs, int32_t world, size_t count, void* stream) const override {
      if (rank_of(stream) != 0 || world != kWorld) return Status::error("sum on the wrong stream or world");
      ++sums;
      for (size_t i = 0; i < count; ++i) {
        double acc = 0;
        for (int32_t r = 0; r < world; ++r) acc += double(bufs[r][i]);
        for (int32_t r = 0; r < world; ++r) bufs[r][i] = float(acc);
      }
      return Status::ok();
    }
  } dev;
  auto comms = make_inprocess_group(kWorld, quick(), &dev);
  const float vals[kWorld] = {1e8f, 1.0f, -1e8f, 1.0f};  // an fp32 running sum in another order is not 2
  std::vector<int> bad(kWorld, 0);
  auto st = on_ranks(comms, [&](int32_t r, Communicator& c) -> Status {
    std::mt19937 rng(uint32_t(r) * 7919u + 1u);
    for (int32_t k = 0; k < kCalls; ++k) {
      std::vector<float> b(5, vals[r]);
      if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      DSI_RETURN_IF_ERROR(c.all_reduce_sum(b.data(), b.size(), reinterpret_cast<void*>(intptr_t(r) + 1)));
      for (float x : b) bad[size_t(r)] += x != 2.0f;
    }
    return Status::ok();
  });
  for (int32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(st[size_t(r)].is_ok()) << st[size_t(r)].message();
    EXPECT_EQ(bad[size_t(r)], 0) << "rank " << r;
  }
  EXPECT_EQ(dev.staged.load(), 0);
  EXPECT_EQ(dev.sums.load(), kCalls);
  // Rank 0: per collective k, the marks k + 1 of ranks 1..3 in rank order; rank q: rank 0's mark k + 1.
  ASSERT_EQ(dev.seen[0].size(), size_t(kCalls * (kWorld - 1)));
  for (int32_t k = 0; k < kCalls; ++k)
    for (int32_t q = 1; q < kWorld; ++q)
      EXPECT_EQ(dev.seen[0][size_t(k * (kWorld - 1) + q - 1)], q * 1000000 + k + 1) << "collective " << k;
  for (int32_t q = 1; q < kWorld; ++q) {
    ASSERT_EQ(dev.seen[size_t(q)].size(), size_t(kCalls));
    for (int32_t k = 0; k < kCalls; ++k) EXPECT_EQ(dev.seen[size_t(q)][size_t(k)], k + 1) << "rank " << q;
  }
}

// Ranks sharing one device, session 19: all_to_all_v stays on the device too (the DP expert exchange's four calls per
// MoE layer). Each rank marks its send buffer written (kSent), copies its segments out of every rank's send buffer on
// its own stream after waiting for their kSent marks, marks (kRead), and after the second rendezvous waits for every
// other rank's kRead mark. A host stand-in records every wait: each must see the mark of its own collective, never
// an older or newer one, over many calls interleaved with device all-reduces (whose kReduce marks must keep their
// own discipline) and random delays on every rank. The received bytes are the host path's (the pattern of
// DeviceBuffersGoThroughTheDeviceAccess, zero-byte segments and a null send buffer of a rank sending nothing
// included), and nothing is staged through the host.
TEST(InProcessComm, SharedDeviceAllToAllJoinsTheRanksThroughMarks) {
  using dsinfer::parallel::MarkSet;
  constexpr int32_t kWorld = 3;
  constexpr int32_t kCalls = 120;
  struct SharedDevice final : dsinfer::parallel::DeviceAccess {
    mutable std::mutex mu;
    mutable int64_t marks[3][kWorld] = {};                // per set and rank
    mutable std::vector<std::vector<int64_t>> seen[3];    // per set: per waiting rank, rank * 1e6 + mark count
    mutable std::atomic<int> staged{0}, copies{0};
    SharedDevice() {
      for (auto& v : seen) v.resize(kWorld);
    }
    static int32_t rank_of(void* stream) { return int32_t(reinterpret_cast<intptr_t>(stream)) - 1; }
    Status to_host(void*, const void*, size_t, void*) const override { ++staged; return Status::ok(); }
    Status from_host(void*, const void*, size_t, void*) const override { ++staged; return Status::ok(); }
    int32_t shared_device_ranks() const override { return kWorld; }
    Status mark(int32_t rank, void* stream, MarkSet set) const override {
      std::lock_guard<std::mutex> lk(mu);
      if (rank_of(stream) != rank) return Status::errorf("rank {} marked on rank {}'s stream", rank, rank_of(stream));
      ++marks[int(set)][rank];
      return Status::ok();
    }
    Status wait_mark(int32_t rank, void* stream, MarkSet set) const override {
      std::lock_guard<std::mutex> lk(mu);
      seen[int(set)][size_t(rank_of(stream))].push_back(rank * 1000000 + marks[int(set)][rank]);
      return Status::ok();
    }
    Status sum_in_rank_order(float* const* bufs, int32_t world, size_t count, void*) const override {
      for (size_t i = 0; i < count; ++i) {
        double acc = 0;
        for (int32_t r = 0; r < world; ++r) acc += double(bufs[r][i]);
        for (int32_t r = 0; r < world; ++r) bufs[r][i] = float(acc);
      }
      return Status::ok();
    }
    Status copy_on_device(void* dst, const void* src, size_t bytes, void*) const override {
      ++copies;
      std::memcpy(dst, src, bytes);
      return Status::ok();
    }
  } dev;
  auto comms = make_inprocess_group(kWorld, quick(), &dev);
  std::vector<int> bad(kWorld, 0);
  auto st = on_ranks(comms, [&](int32_t r, Communicator& c) -> Status {
    std::mt19937 rng(uint32_t(r) * 104729u + 3u);
    void* stream = reinterpret_cast<void*>(intptr_t(r) + 1);
    for (int32_t k = 0; k < kCalls; ++k) {
      if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      // Rank r sends r * q + k % 2 ints (value 1000 * k + 10 * r + q) to rank q.
      std::vector<int32_t> send, got;
      std::vector<size_t> sb, rb;
      for (int32_t q = 0; q < kWorld; ++q) {
        for (int32_t i = 0; i < r * q + k % 2; ++i) send.push_back(1000 * k + 10 * r + q);
        sb.push_back(size_t(r * q + k % 2) * 4);
        rb.push_back(size_t(q * r + k % 2) * 4);
      }
      got.assign(std::accumulate(rb.begin(), rb.end(), size_t(0)) / 4, -1);
      DSI_RETURN_IF_ERROR(c.all_to_all_v(send.empty() ? nullptr : send.data(), sb, got.data(), rb, stream));
      std::vector<int32_t> want;
      for (int32_t q = 0; q < kWorld; ++q)
        for (int32_t i = 0; i < q * r + k % 2; ++i) want.push_back(1000 * k + 10 * q + r);
      bad[size_t(r)] += got != want;
      std::vector<float> b(3, float(r + 1));
      DSI_RETURN_IF_ERROR(c.all_reduce_sum(b.data(), b.size(), stream));
      for (float x : b) bad[size_t(r)] += x != 6.0f;
    }
    return Status::ok();
  });
  for (int32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(st[size_t(r)].is_ok()) << st[size_t(r)].message();
    EXPECT_EQ(bad[size_t(r)], 0) << "rank " << r;
  }
  EXPECT_EQ(dev.staged.load(), 0);
  EXPECT_GT(dev.copies.load(), kCalls);
  // Per all-to-all k, rank q waits for the kSent and then the kRead mark k + 1 of every other rank, in rank order.
  for (const MarkSet set : {MarkSet::kSent, MarkSet::kRead})
    for (int32_t q = 0; q < kWorld; ++q) {
      const std::vector<int64_t>& w = dev.seen[int(set)][size_t(q)];
      ASSERT_EQ(w.size(), size_t(kCalls * (kWorld - 1))) << "rank " << q;
      size_t i = 0;
      for (int32_t k = 0; k < kCalls; ++k)
        for (int32_t r = 0; r < kWorld; ++r) {
          if (r == q) continue;
          EXPECT_EQ(w[i++], r * 1000000 + k + 1) << "rank " << q << " set " << int(set) << " call " << k;
        }
    }
  // The all-reduces' marks keep their discipline between the all-to-alls.
  ASSERT_EQ(dev.seen[0][0].size(), size_t(kCalls * (kWorld - 1)));
  for (int32_t q = 1; q < kWorld; ++q) {
    ASSERT_EQ(dev.seen[0][size_t(q)].size(), size_t(kCalls));
    for (int32_t k = 0; k < kCalls; ++k) EXPECT_EQ(dev.seen[0][size_t(q)][size_t(k)], k + 1) << "rank " << q;
  }
}

// Ranks that disagree on a device all_to_all_v's sizes (rank 1 expects bytes rank 0 does not send) are refused on
// every rank with both sizes named, not left waiting.
TEST(InProcessComm, SharedDeviceAllToAllRefusesMismatchedSizes) {
  struct SharedDevice final : dsinfer::parallel::DeviceAccess {
    Status to_host(void*, const void*, size_t, void*) const override { return Status::error("staged"); }
    Status from_host(void*, const void*, size_t, void*) const override { return Status::error("staged"); }
    int32_t shared_device_ranks() const override { return 2; }
    Status mark(int32_t, void*, dsinfer::parallel::MarkSet) const override { return Status::ok(); }
    Status wait_mark(int32_t, void*, dsinfer::parallel::MarkSet) const override { return Status::ok(); }
    Status copy_on_device(void* dst, const void* src, size_t bytes, void*) const override {
      std::memcpy(dst, src, bytes);
      return Status::ok();
    }
  } dev;
  auto comms = make_inprocess_group(2, quick(), &dev);
  auto st = on_ranks(comms, [&](int32_t r, Communicator& c) -> Status {
    std::vector<int32_t> send(4, r), got(4, -1);
    const std::vector<size_t> sb = {4, 4}, rb = {r == 1 ? size_t(8) : size_t(4), 4};
    return c.all_to_all_v(send.data(), sb, got.data(), rb, reinterpret_cast<void*>(intptr_t(r) + 1));
  });
  for (int32_t r = 0; r < 2; ++r) ASSERT_FALSE(st[size_t(r)].is_ok()) << "rank " << r;
  EXPECT_NE(st[1].message().find("rank 1 expected 8 bytes from rank 0, which sent 4"), std::string::npos)
      << st[1].message();
}

// One rank fails instead of joining: its abort wakes the ranks already waiting, each returns the cause and its
// own rank, and every later call fails the same way (the group stays ended).
TEST(InProcessComm, AbortReachesEveryBlockedRank) {
  auto comms = make_inprocess_group(4, quick(600000));  // the deadline must not be what ends this test
  std::vector<float> buf(8, 1.0f);
  auto st = on_ranks(comms, [&](int32_t r, Communicator& c) -> Status {
    std::vector<float> b = buf;
    if (r != 2) return c.all_reduce_sum(b.data(), b.size(), nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c.abort(Status::error("rank 2 failed: out of memory"));
    return Status::error("failed");
  });
  for (int32_t r : {0, 1, 3}) {
    ASSERT_FALSE(st[size_t(r)].is_ok());
    EXPECT_NE(st[size_t(r)].message().find("rank 2 failed: out of memory"), std::string::npos)
        << st[size_t(r)].message();
    EXPECT_NE(st[size_t(r)].message().find("rank " + std::to_string(r) + ": all_reduce_sum"), std::string::npos);
  }
  EXPECT_FALSE(comms[0]->barrier().is_ok());
  EXPECT_NE(comms[1]->health().message().find("out of memory"), std::string::npos);
}

// Rank 1 never arrives: the others fail at the deadline, naming it, instead of hanging.
TEST(InProcessComm, DeadlineNamesTheMissingRank) {
  auto comms = make_inprocess_group(3, quick(300));
  auto st = on_ranks(comms, [&](int32_t r, Communicator& c) -> Status {
    if (r == 1) return Status::ok();
    float x = 1;
    return c.all_reduce_sum(&x, 1, nullptr);
  });
  for (int32_t r : {0, 2}) {
    ASSERT_FALSE(st[size_t(r)].is_ok());
    EXPECT_NE(st[size_t(r)].message().find("for rank(s) 1 (collective deadline)"), std::string::npos)
        << st[size_t(r)].message();
  }
}

TEST(InProcessComm, RanksThatDisagreeAreRefused) {
  auto comms = make_inprocess_group(2, quick());
  auto st = on_ranks(comms, [&](int32_t r, Communicator& c) -> Status {
    std::vector<float> b(8, 1.0f);
    return c.all_reduce_sum(b.data(), r == 0 ? 4 : 8, nullptr);
  });
  for (const Status& s : st) {
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("ranks disagree on the collective"), std::string::npos) << s.message();
  }
  // A device buffer (a stream) in a group made without device access is an error, not a crash.
  auto host_only = make_inprocess_group(1, quick());
  float x = 0;
  int fake_stream = 0;
  EXPECT_NE(host_only[0]->all_reduce_sum(&x, 1, &fake_stream).message().find("host-only"), std::string::npos);
}

// A job that throws becomes its rank's error (the process does not terminate); the failure hook runs once per run,
// with the first failing rank, and run() returns that root cause.
TEST(ShardPool, FailuresAndExceptionsReportTheirRank) {
  dsinfer::parallel::ShardPool pool;
  std::atomic<int> calls{0};
  std::atomic<int> failed_rank{-9};
  pool.set_on_failure([&](int32_t r, const Status&) {
    ++calls;
    failed_rank = r;
  });
  ASSERT_TRUE(pool.start(4, nullptr).is_ok());
  Status s = pool.run([](int32_t r) -> Status {
    if (r == 3) throw std::bad_alloc();
    return Status::ok();
  });
  EXPECT_NE(s.message().find("out of memory"), std::string::npos) << s.message();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(failed_rank.load(), 3);
  s = pool.run([](int32_t r) -> Status {
    if (r == 1) throw std::runtime_error("boom");
    return Status::ok();
  });
  EXPECT_EQ(s.message(), "exception: boom");
  EXPECT_EQ(calls.load(), 2);
  EXPECT_TRUE(pool.run([](int32_t) { return Status::ok(); }).is_ok());
}

// The pool's deadline: a job stuck past it is reported through the hook (rank -1), whose abort releases it.
TEST(ShardPool, DeadlineReportsAStuckStep) {
  dsinfer::parallel::ShardPool pool;
  auto comms = make_inprocess_group(2, quick(600000));
  pool.set_deadline(std::chrono::milliseconds(200));
  std::atomic<int> hook_rank{-9};
  pool.set_on_failure([&](int32_t r, const Status& why) {
    hook_rank = r;
    comms[0]->abort(why);
  });
  ASSERT_TRUE(pool.start(2, nullptr).is_ok());
  const Status s = pool.run([&](int32_t r) -> Status {
    if (r == 1) return Status::ok();  // never joins the collective
    float x = 0;
    return comms[0]->all_reduce_sum(&x, 1, nullptr);
  });
  EXPECT_EQ(hook_rank.load(), -1);
  EXPECT_NE(s.message().find("did not finish within 200 ms"), std::string::npos) << s.message();
}
