// The torchrun-style bootstrap of one process per GPU (parallel/bootstrap.h, docs/multi_gpu.md "Bootstrap"): the
// variables are checked in one place with errors naming the variable, and rank 0's NCCL unique id (128 bytes; NCCL
// itself needs GPUs, so random bytes stand in) reaches every rank over the TCP rendezvous, with threads and with
// separate processes; a missing rank, a stray or hostile connection, a duplicate RANK and an absent rank 0 end
// with a clear error by the deadline, never a hang.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "parallel/bootstrap.h"
#include "parallel/parallel_plan.h"
#include "rank_test_util.h"

namespace {

using namespace dsinfer;
using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

std::vector<uint8_t> random_id(uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> id(128);
  for (uint8_t& b : id) b = uint8_t(g());
  return id;
}

std::string parse_error(const Env& env, int32_t local_gpus = 8) {
  auto r = parallel::parse_launch_env(env, local_gpus);
  return r.is_ok() ? std::string("ok") : r.status().message();
}

Clock::time_point in(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

}  // namespace

TEST(Bootstrap, TorchrunVariablesAreCheckedByName) {
  const Env full = {{"WORLD_SIZE", "4"}, {"RANK", "3"}, {"LOCAL_RANK", "3"}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", "29500"}};
  auto e = parallel::parse_launch_env(full, 8);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ((*e)->rank, 3);
  EXPECT_EQ((*e)->world, 4);
  EXPECT_EQ((*e)->local_rank, 3);
  EXPECT_EQ((*e)->master_addr, "127.0.0.1");
  EXPECT_EQ((*e)->master_port, 29500);
  // No launcher, or a single process: one process drives every GPU (the default).
  EXPECT_FALSE(parallel::parse_launch_env({}, 8)->has_value());
  EXPECT_FALSE(parallel::parse_launch_env({{"WORLD_SIZE", "1"}, {"RANK", "0"}}, 8)->has_value());
  auto with = [&](const std::string& k, const std::string& v) {
    Env x = full;
    x[k] = v;
    return parse_error(x);
  };
  auto without = [&](const std::string& k) {
    Env x = full;
    x.erase(k);
    return parse_error(x);
  };
  EXPECT_NE(with("WORLD_SIZE", "0").find("WORLD_SIZE='0' is not a positive integer"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "4x").find("WORLD_SIZE='4x'"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "16").find("multi-node"), std::string::npos);
  EXPECT_NE(with("RANK", "4").find("RANK='4' is not an integer in [0, WORLD_SIZE=4)"), std::string::npos);
  EXPECT_NE(with("RANK", "-1").find("RANK='-1'"), std::string::npos);
  EXPECT_NE(with("LOCAL_RANK", "8").find("LOCAL_RANK='8' is not an integer in [0, 8)"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "70000").find("MASTER_PORT='70000'"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "").find("MASTER_PORT=''"), std::string::npos);
  EXPECT_NE(with("MASTER_ADDR", "").find("needs MASTER_ADDR"), std::string::npos);
  for (const char* k : {"RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
    EXPECT_NE(without(k).find(std::string("needs ") + k), std::string::npos) << without(k);
  EXPECT_EQ(parse_error(full, -1), "ok");  // visible GPUs unknown: not checked
}

// Rank 0 and three other ranks (threads; rank 0 starts last, so the others retry their connects): every rank gets
// rank 0's 128 bytes.
TEST(Bootstrap, ThreadsExchangeTheId) {
  auto server = parallel::RendezvousServer::listen("127.0.0.1", 0);
  ASSERT_TRUE(server.is_ok()) << server.status().message();
  const int32_t port = server->port(), world = 4;
  const std::vector<uint8_t> id = random_id(7);
  std::vector<Result<std::vector<uint8_t>>> got(size_t(world), Status::error("not run"));
  std::vector<std::thread> th;
  for (int32_t r = 1; r < world; ++r)
    th.emplace_back([&, r] { got[size_t(r)] = parallel::rendezvous_fetch("127.0.0.1", port, r, world, in(20000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(server->serve(world, id, in(20000)).is_ok());
  for (auto& t : th) t.join();
  for (int32_t r = 1; r < world; ++r) {
    ASSERT_TRUE(got[size_t(r)].is_ok()) << got[size_t(r)].status().message();
    EXPECT_EQ(*got[size_t(r)], id) << "rank " << r;
  }
}

// One process per rank, as torchrun starts them: exchange_id from the parsed variables in 3 child processes and
// this one (rank 0); each child exits 0 only if it read rank 0's bytes.
TEST(Bootstrap, ProcessesExchangeTheIdThroughTheVariables) {
  int32_t port = 0;
  {  // a port free now (the listener below binds it again at once, SO_REUSEADDR)
    auto probe = parallel::RendezvousServer::listen("127.0.0.1", 0);
    ASSERT_TRUE(probe.is_ok()) << probe.status().message();
    port = probe->port();
  }
  const int32_t world = 4;
  const std::vector<uint8_t> id = random_id(11);
  auto env_of = [&](int32_t r) {
    return Env{{"WORLD_SIZE", std::to_string(world)}, {"RANK", std::to_string(r)}, {"LOCAL_RANK", std::to_string(r)},
               {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", std::to_string(port)}};
  };
  std::vector<pid_t> kids;
  for (int32_t r = 1; r < world; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto env = parallel::parse_launch_env(env_of(r), 8);
      if (!env.is_ok() || !env->has_value()) std::_Exit(3);
      auto got = parallel::exchange_id(**env, {}, std::chrono::seconds(20));
      std::_Exit(got.is_ok() && *got == id ? 0 : 4);
    }
    kids.push_back(pid);
  }
  auto env = parallel::parse_launch_env(env_of(0), 8);
  ASSERT_TRUE(env.is_ok() && env->has_value());
  auto mine = parallel::exchange_id(**env, id, std::chrono::seconds(20));
  EXPECT_TRUE(mine.is_ok()) << mine.status().message();
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

// Rank 2 of 3 never comes: rank 0 fails by its deadline naming it. A stray connection that says nothing, one that
// sends garbage, a duplicate RANK and a wrong WORLD_SIZE are refused without counting; rank 1 still gets the id.
TEST(Bootstrap, MissingRanksAndBadHellosEndByTheDeadline) {
  dsinfer::test::within_30s([] {
    auto server = parallel::RendezvousServer::listen("127.0.0.1", 0);
    ASSERT_TRUE(server.is_ok()) << server.status().message();
    const int32_t port = server->port();
    const std::vector<uint8_t> id = random_id(3);
    Status served = Status::ok();
    const auto t0 = Clock::now();
    std::thread srv([&] { served = server->serve(3, id, in(1500)); });
    auto raw = [&](const std::string& bytes) {  // a connection sending `bytes`, then closing
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(uint16_t(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && !bytes.empty())
        (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      ::close(fd);
    };
    raw("");
    raw("GET / HTTP/1.1\r\n\r\n");
    auto one = parallel::rendezvous_fetch("127.0.0.1", port, 1, 3, in(3000));
    ASSERT_TRUE(one.is_ok()) << one.status().message();
    EXPECT_EQ(*one, id);
    auto dup = parallel::rendezvous_fetch("127.0.0.1", port, 1, 3, in(3000));
    ASSERT_FALSE(dup.is_ok());
    EXPECT_NE(dup.status().message().find("RANK=1 already joined"), std::string::npos) << dup.status().message();
    auto wrong = parallel::rendezvous_fetch("127.0.0.1", port, 2, 5, in(3000));
    ASSERT_FALSE(wrong.is_ok());
    EXPECT_NE(wrong.status().message().find("WORLD_SIZE=5 here but 3 at rank 0"), std::string::npos)
        << wrong.status().message();
    srv.join();
    ASSERT_FALSE(served.is_ok());
    EXPECT_NE(served.message().find("rank(s) 2 of WORLD_SIZE=3 did not reach rank 0"), std::string::npos)
        << served.message();
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  });
}

// No rank 0 listening: a rank gives up by its deadline, naming the address.
TEST(Bootstrap, NoRankZeroTimesOut) {
  int32_t port = 0;
  {
    auto probe = parallel::RendezvousServer::listen("127.0.0.1", 0);
    ASSERT_TRUE(probe.is_ok());
    port = probe->port();
  }  // closed: nothing listens there now
  const auto t0 = Clock::now();
  auto r = parallel::rendezvous_fetch("127.0.0.1", port, 1, 2, in(300));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("rank 1 could not connect to rank 0 at MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                                      std::to_string(port)),
            std::string::npos)
      << r.status().message();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}
