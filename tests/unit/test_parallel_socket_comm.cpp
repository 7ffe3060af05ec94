// The socket communicator (parallel/socket_comm.h, docs/multi_gpu.md "Communicators"): one process per rank, as
// torchrun starts them (ranks > 0 are forked children, rank 0 this process). Every collective gives the in-process
// group's bytes bit for bit at 2 and 4 ranks; a rank that aborts, exits or hangs ends every other rank's call with
// an error naming it, by the deadline; garbage at the rendezvous is refused, and garbage or a different collective
// inside the group fails it by name.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <thread>

#include "parallel/bootstrap.h"
#include "parallel/inproc_comm.h"
#include "parallel/socket_comm.h"

namespace {

using namespace dsinfer;
using Clock = std::chrono::steady_clock;
using Fn = std::function<std::vector<uint8_t>(parallel::Communicator&)>;

std::vector<uint8_t> text(const std::string& s) { return {s.begin(), s.end()}; }
std::string str(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

void append(std::vector<uint8_t>& out, const void* p, size_t n) {
  out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
}

// Every collective at several sizes (0 included), inputs from the rank, twice; returns every output back to back,
// or "error: <message>" at the first failure.
std::vector<uint8_t> script(parallel::Communicator& c) {
  const int32_t r = c.rank(), w = c.world();
  std::mt19937 g(1000 + uint32_t(r));
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exp10(-12, 12);
  std::vector<uint8_t> out;
  auto fail = [](const Status& st) { return text("error: " + st.message()); };
  for (int round = 0; round < 2; ++round) {
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(4099), size_t(70000)}) {
      std::vector<float> v(n);
      for (float& x : v) x = normal(g) * std::pow(10.0f, float(exp10(g)));  // the order of the sum matters
      if (Status st = c.all_reduce_sum(v.data(), n, nullptr); !st.is_ok()) return fail(st);
      append(out, v.data(), n * 4);
    }
    for (size_t n : {size_t(0), size_t(5), size_t(12345)}) {
      std::vector<uint8_t> send(n), recv(n * size_t(w), 0xAB);
      for (uint8_t& b : send) b = uint8_t(g());
      if (Status st = c.all_gather(send.data(), recv.data(), n, nullptr); !st.is_ok()) return fail(st);
      append(out, recv.data(), recv.size());
    }
    std::vector<size_t> sb(static_cast<size_t>(w)), rb(static_cast<size_t>(w));
    auto amount = [&](int32_t from, int32_t to) { return size_t((from * 7 + to * 13 + round * 5) % 11) * 37; };
    for (int32_t q = 0; q < w; ++q) {
      sb[size_t(q)] = amount(r, q);
      rb[size_t(q)] = amount(q, r);
    }
    std::vector<uint8_t> send(std::accumulate(sb.begin(), sb.end(), size_t(0))),
        recv(std::accumulate(rb.begin(), rb.end(), size_t(0)));
    for (uint8_t& b : send) b = uint8_t(g());
    if (Status st = c.all_to_all_v(send.data(), sb, recv.data(), rb, nullptr); !st.is_ok()) return fail(st);
    append(out, recv.data(), recv.size());
    for (int32_t root = 0; root < w; ++root) {
      std::vector<uint8_t> b(1000);
      for (uint8_t& x : b) x = uint8_t(g());
      if (Status st = c.broadcast(b.data(), b.size(), root, nullptr); !st.is_ok()) return fail(st);
      append(out, b.data(), b.size());
    }
    if (Status st = c.barrier(); !st.is_ok()) return fail(st);
  }
  return out;
}

// fn on every rank of an in-process group (threads).
std::vector<std::vector<uint8_t>> run_inprocess(int32_t world, const Fn& fn) {
  auto comms = parallel::make_inprocess_group(world, parallel::CommOptions{std::chrono::seconds(20)});
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(world));
  std::vector<std::thread> ts;
  for (int32_t r = 0; r < world; ++r) ts.emplace_back([&, r] { out[size_t(r)] = fn(*comms[size_t(r)]); });
  for (auto& t : ts) t.join();
  return out;
}

// fn on every rank of a socket group: ranks 1.. in forked children (their result comes back through a pipe), rank 0
// here. A child that cannot join returns "join: <message>".
std::vector<std::vector<uint8_t>> run_processes(int32_t world, std::chrono::milliseconds timeout, const Fn& fn) {
  auto server = parallel::RendezvousServer::listen("127.0.0.1", 0);
  EXPECT_TRUE(server.is_ok()) << server.status().message();
  if (!server.is_ok()) return {};
  const parallel::CommOptions opts{timeout};
  std::vector<std::pair<pid_t, int>> kids;
  for (int32_t r = 1; r < world; ++r) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      auto c = parallel::join_socket_group("127.0.0.1", server->port(), r, world, opts);
      const std::vector<uint8_t> res = c.is_ok() ? fn(**c) : text("join: " + c.status().message());
      for (size_t off = 0; off < res.size();) {
        const ssize_t n = ::write(p[1], res.data() + off, res.size() - off);
        if (n <= 0) std::_Exit(5);
        off += size_t(n);
      }
      std::_Exit(0);
    }
    ::close(p[1]);
    kids.emplace_back(pid, p[0]);
  }
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(world));
  auto c = parallel::accept_socket_group(*server, world, opts);
  out[0] = c.is_ok() ? fn(**c) : text("accept: " + c.status().message());
  c = Status::error("closed");  // rank 0's sockets close before the children are waited for
  for (size_t k = 0; k < kids.size(); ++k) {
    uint8_t buf[65536];
    ssize_t n;
    while ((n = ::read(kids[k].second, buf, sizeof buf)) > 0) append(out[k + 1], buf, size_t(n));
    ::close(kids[k].second);
    int status = 0;
    EXPECT_EQ(::waitpid(kids[k].first, &status, 0), kids[k].first);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << k + 1 << " status " << status;
  }
  return out;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

TEST(SocketComm, EveryCollectiveGivesTheInProcessGroupsBits) {
  for (int32_t world : {2, 4}) {
    const auto want = run_inprocess(world, script);
    const auto got = run_processes(world, std::chrono::seconds(20), script);
    ASSERT_EQ(got.size(), size_t(world));
    for (int32_t r = 0; r < world; ++r) {
      ASSERT_GT(want[size_t(r)].size(), 600000u) << str(want[size_t(r)]).substr(0, 200);
      EXPECT_TRUE(got[size_t(r)] == want[size_t(r)])
          << "world " << world << " rank " << r << ": " << got[size_t(r)].size() << " bytes vs "
          << want[size_t(r)].size() << "; " << str(got[size_t(r)]).substr(0, 300);
    }
  }
}

// Rank 2 of 3 aborts (with a reason) or exits after one all-reduce, or rank 0 aborts: the second all-reduce of the
// other ranks fails at once (long before the 20 s deadline) naming that rank (and the reason, when it gave one).
TEST(SocketComm, ARankThatAbortsOrExitsEndsEveryRanksCall) {
  struct Case {
    int32_t who;
    bool exits;
  };
  for (const Case k : {Case{2, false}, Case{2, true}, Case{0, false}}) {
    const auto t0 = Clock::now();
    const auto got = run_processes(3, std::chrono::seconds(20), [k](parallel::Communicator& c) {
      float x = float(c.rank());
      if (Status st = c.all_reduce_sum(&x, 1, nullptr); !st.is_ok() || x != 3.0f) return text("first: " + st.message());
      if (c.rank() == k.who) {
        if (k.exits) std::_Exit(0);  // its connection closes with the process
        c.abort(Status::error("boom"));
        return text(c.health().message());
      }
      const Status st = c.all_reduce_sum(&x, 1, nullptr);
      return text(st.is_ok() ? "ok" : st.message() + " | health: " + c.health().message());
    });
    ASSERT_EQ(got.size(), 3u);
    EXPECT_LT(seconds_since(t0), 20.0);
    for (int32_t r = 0; r < 3; ++r) {
      const std::string m = str(got[size_t(r)]);
      if (r == k.who) {
        EXPECT_EQ(m, k.exits ? "" : "boom");
        continue;
      }
      EXPECT_NE(m.find(fmt::format("rank {}: all_reduce_sum failed", r)), std::string::npos) << m;
      const std::string cause = k.exits ? fmt::format("rank {} closed its connection", k.who)
                                        : fmt::format("rank {} ended the group: boom", k.who);
      EXPECT_NE(m.find(cause), std::string::npos) << "rank " << r << ": " << m;
    }
  }
}

// Rank 2 of 3 never comes to the second all-reduce (a hang): rank 0 fails at its 2 s deadline naming rank 2, and
// passes that on to rank 1 (which waits 2 s longer for rank 0 by design).
TEST(SocketComm, ARankThatHangsFailsTheOthersByTheDeadline) {
  const auto t0 = Clock::now();
  const auto got = run_processes(3, std::chrono::milliseconds(2000), [](parallel::Communicator& c) {
    float x = 1.0f;
    if (Status st = c.all_reduce_sum(&x, 1, nullptr); !st.is_ok()) return text("first: " + st.message());
    if (c.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      return text("slept");
    }
    const Status st = c.all_reduce_sum(&x, 1, nullptr);
    return text(st.is_ok() ? "ok" : st.message());
  });
  ASSERT_EQ(got.size(), 3u);
  for (int32_t r : {0, 1}) {
    const std::string m = str(got[size_t(r)]);
    EXPECT_NE(m.find("rank 0 waited 2000 ms in all_reduce_sum for rank(s) 2 (collective deadline)"), std::string::npos)
        << "rank " << r << ": " << m;
  }
  EXPECT_LT(seconds_since(t0), 20.0);
}

// A stray connection with a wrong hello at the rendezvous is refused without counting (the group still forms and
// works); a rank that then sends garbage, or calls another collective, fails every rank's call naming it.
TEST(SocketComm, GarbageAndDisagreementAreRefusedByName) {
  auto server = parallel::RendezvousServer::listen("127.0.0.1", 0);
  ASSERT_TRUE(server.is_ok()) << server.status().message();
  const int32_t port = server->port();
  const parallel::CommOptions opts{std::chrono::seconds(20)};
  for (int mode = 0; mode < 3; ++mode) {  // 0: works; 1: rank 1 sends garbage; 2: rank 1 calls all_gather
    // Both children are forked before rank 0's thread starts; rank 1 joins only once the stray was answered.
    const pid_t stray = ::fork();
    if (stray == 0) {  // a stray client with a wrong hello (RANK 0 of WORLD_SIZE 0), then it waits for the answer
      auto fd = parallel::rendezvous_connect("127.0.0.1", port, 0, 0, Clock::now() + std::chrono::seconds(10));
      std::_Exit(!fd.is_ok() && fd.status().message().find("WORLD_SIZE=0 here but 2") != std::string::npos ? 0 : 1);
    }
    int p[2], go[2];
    ASSERT_EQ(::pipe(p), 0);
    ASSERT_EQ(::pipe(go), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      ::close(go[1]);
      char g = 0;
      if (::read(go[0], &g, 1) != 1) std::_Exit(6);
      std::string res;
      if (mode == 1) {
        auto fd = parallel::rendezvous_connect("127.0.0.1", port, 1, 2, Clock::now() + std::chrono::seconds(10));
        if (fd.is_ok()) {
          const char junk[40] = "GET / HTTP/1.0\r\n\r\nthis is not a frame";
          (void)::send(*fd, junk, sizeof junk, MSG_NOSIGNAL);
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
        res = fd.is_ok() ? "sent" : fd.status().message();
      } else {
        auto c = parallel::join_socket_group("127.0.0.1", port, 1, 2, opts);
        if (!c.is_ok()) {
          res = "join: " + c.status().message();
        } else if (mode == 0) {
          float x = 2.5f;
          const Status st = (*c)->all_reduce_sum(&x, 1, nullptr);
          res = st.is_ok() ? fmt::format("{}", x) : st.message();
        } else {
          uint8_t b[4] = {1, 2, 3, 4}, r[8];
          const Status st = (*c)->all_gather(b, r, 4, nullptr);
          res = st.is_ok() ? "ok" : st.message();
        }
      }
      (void)!::write(p[1], res.data(), res.size());
      std::_Exit(0);
    }
    ::close(p[1]);
    ::close(go[0]);
    std::string mine;
    std::thread rank0([&] {
      auto c = parallel::accept_socket_group(*server, 2, opts);
      if (!c.is_ok()) {
        mine = "accept: " + c.status().message();
        return;
      }
      float x = 1.0f;
      const Status st = (*c)->all_reduce_sum(&x, 1, nullptr);
      mine = st.is_ok() ? fmt::format("{}", x) : st.message();
    });
    int status = 0;
    EXPECT_EQ(::waitpid(stray, &status, 0), stray);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the stray connection was not refused";
    EXPECT_EQ(::write(go[1], "g", 1), 1);
    ::close(go[1]);
    rank0.join();
    std::string theirs;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(p[0], buf, sizeof buf)) > 0) theirs.append(buf, size_t(n));
    ::close(p[0]);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (mode == 0) {
      EXPECT_EQ(mine, "3.5");
      EXPECT_EQ(theirs, "3.5");
    } else if (mode == 1) {
      EXPECT_NE(mine.find("rank 1 sent a frame that is not a dsinfer collective in all_reduce_sum"), std::string::npos)
          << mine;
    } else {
      EXPECT_NE(mine.find("ranks disagree on the collective: rank 0 called all_reduce_sum #0, rank 1 all_gather #0"),
                std::string::npos) << mine;
      EXPECT_NE(theirs.find("rank 1: all_gather failed, the parallel group has ended: ranks disagree"),
                std::string::npos) << theirs;
    }
  }
}
