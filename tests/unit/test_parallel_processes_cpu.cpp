// One process per rank through the user's path (docs/multi_gpu.md "Bootstrap"): N `dsinfer generate --backend cpu
// --gpus N` processes started as torchrun starts them (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a
// free MASTER_PORT), each holding its own rank and talking to the others over the socket communicator. Rank 0's
// output equals one process driving the N ranks (the same JSON, logprobs as written) and one rank's tokens; a rank
// fault or a plan that differs ends every process within 30 s with an error naming the rank; what one process per
// rank cannot do is refused by name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.h"
#include "parallel/bootstrap.h"
#include "rank_test_util.h"
#include "test_util.h"

namespace {

using dsinfer::test::ScratchDir;
using Clock = std::chrono::steady_clock;

struct Proc {
  int rc = -1;  // 128 + signal when killed; -2 when still running at the deadline (then killed)
  std::string err;
  double seconds = 0;
};

int32_t free_port() {
  auto probe = dsinfer::parallel::RendezvousServer::listen("127.0.0.1", 0);
  EXPECT_TRUE(probe.is_ok()) << probe.status().message();
  return probe.is_ok() ? probe->port() : 0;
}

// `dsinfer <args>` in `world` processes with the torchrun variables (a free MASTER_PORT on 127.0.0.1), each
// waited for at most 60 s.
std::vector<Proc> launch(const ScratchDir& d, int32_t world, const std::string& args) {
  const int32_t port = free_port();
  const auto t0 = Clock::now();
  std::vector<pid_t> pids;
  for (int32_t r = 0; r < world; ++r) {
    const std::string cmd = fmt::format(
        "WORLD_SIZE={} RANK={} LOCAL_RANK={} MASTER_ADDR=127.0.0.1 MASTER_PORT={} exec {} {} >{}/r{}.out 2>{}/r{}.err",
        world, r, r, port, dsinfer::test::binary(), args, d.str(), r, d.str(), r);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<Proc> out(pids.size());
  size_t left = pids.size();
  while (left > 0) {
    for (size_t r = 0; r < pids.size(); ++r) {
      int st = 0;
      if (out[r].rc != -1 || ::waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      out[r].rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      out[r].seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      --left;
    }
    if (left > 0 && Clock::now() - t0 > std::chrono::seconds(60)) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (out[r].rc == -1) {
          ::kill(pids[r], SIGKILL);
          ::waitpid(pids[r], nullptr, 0);
          out[r].rc = -2;
          out[r].seconds = 60;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (size_t r = 0; r < out.size(); ++r) out[r].err = dsinfer::test::slurp(fmt::format("{}/r{}.err", d.str(), r));
  return out;
}

nlohmann::json choices(const std::vector<nlohmann::json>& lines, size_t i) {
  return lines[i]["response"]["body"]["choices"];
}

}  // namespace

TEST(CpuProcesses, GenerateEqualsOneProcessDrivingTheRanks) {
  struct Case {
    std::string model, flags;
    int32_t world;
  };
  const std::string small = dsinfer::test::source_dir() + "/models/dsv4-small";
  const std::vector<Case> cases = {{dsinfer::test::own_fixture("tiny-v4-a"), "", 2},
                                   {dsinfer::test::own_fixture("tiny-v4-a"), "", 4},
                                   {small, "", 2},
                                   {small, "--tensor-parallel-size 4", 4}};
  for (const Case& c : cases) {
    const std::string what = c.model + " " + std::to_string(c.world) + " " + c.flags;
    ScratchDir d("processes");
    const std::string in = d.str() + "/in.jsonl";
    dsinfer::test::write_rank_requests(in);
    const std::string base = "generate --backend cpu --model " + c.model + " --input " + in;
    const auto one = dsinfer::test::run_cli(d, base + " --output " + d.str() + "/one.jsonl");
    ASSERT_EQ(one.rc, 0) << one.err;
    const std::string ranks = fmt::format(" --gpus {} {}", c.world, c.flags);
    const auto driver = dsinfer::test::run_cli(d, base + ranks + " --output " + d.str() + "/driver.jsonl");
    ASSERT_EQ(driver.rc, 0) << driver.err;
    // Every process runs the same command line (the same output path: rank 0 alone writes it).
    const auto procs = launch(d, c.world, base + ranks + " --output " + d.str() + "/procs.jsonl");
    for (size_t r = 0; r < procs.size(); ++r) {
      ASSERT_EQ(procs[r].rc, 0) << what << " rank " << r << ": " << procs[r].err;
      EXPECT_NE(procs[r].err.find(fmt::format("({} ranks, rank {} in this process", c.world, r)), std::string::npos)
          << procs[r].err;
      EXPECT_NE(procs[r].err.find("socket (one process per rank"), std::string::npos) << procs[r].err;
    }
    const auto a = dsinfer::test::read_jsonl(d.str() + "/one.jsonl");
    const auto b = dsinfer::test::read_jsonl(d.str() + "/driver.jsonl");
    const auto p = dsinfer::test::read_jsonl(d.str() + "/procs.jsonl");
    ASSERT_EQ(a.size(), 5u);
    ASSERT_EQ(b.size(), 5u);
    ASSERT_EQ(p.size(), 5u) << what;
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_EQ(choices(p, i), choices(b, i)) << what << " line " << i;  // logprobs bit for bit, as written
      EXPECT_EQ(choices(p, i)[0]["logprobs"]["tokens"], choices(a, i)[0]["logprobs"]["tokens"]) << what << " " << i;
    }
  }
}

// Rank 1 fails in its step 2 (or its plan of step 3 differs): every process exits with an error naming rank 1 and
// the cause, within 30 s (no process waits for the collective deadline).
TEST(CpuProcesses, ARankFaultEndsEveryProcessNamingIt) {
  const std::string model = dsinfer::test::source_dir() + "/models/dsv4-small";
  for (const auto& [fault, cause] : {std::pair<std::string, std::string>{"1:step:2", "injected fault in step 2"},
                                     {"1:plan:3", "step 3: rank 1's plan differs from rank 0's"}}) {
    ScratchDir d("processes_fault");
    const std::string in = d.str() + "/in.jsonl";
    dsinfer::test::write_rank_requests(in);
    const auto procs = launch(d, 2, "generate --backend cpu --gpus 2 --model " + model + " --input " + in +
                                        " --inject-fault " + fault + " --output " + d.str() + "/out.jsonl");
    for (size_t r = 0; r < procs.size(); ++r) {
      EXPECT_NE(procs[r].rc, 0) << fault << " rank " << r << ": " << procs[r].err;
      EXPECT_NE(procs[r].rc, -2) << fault << " rank " << r << " hung";
      EXPECT_LT(procs[r].seconds, 30.0) << fault << " rank " << r;
      EXPECT_NE(procs[r].err.find("rank 1"), std::string::npos) << fault << " rank " << r << ": " << procs[r].err;
      EXPECT_NE(procs[r].err.find(cause), std::string::npos) << fault << " rank " << r << ": " << procs[r].err;
    }
  }
}

// What one process per rank cannot do, refused by name before any rendezvous: serve (its requests reach one
// process), DP attention, --gpus other than WORLD_SIZE, a plan fault without the variables.
TEST(CpuProcesses, WhatOneProcessPerRankCannotDoIsRefusedByName) {
  ScratchDir d("processes_refused");
  const std::string model = dsinfer::test::own_fixture("tiny-v4-a"), in = d.str() + "/in.jsonl";
  dsinfer::test::write_rank_requests(in);
  const std::string env = "WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 ";
  const std::string gen = "generate --backend cpu --model " + model + " --input " + in + " --output " + d.str() +
                          "/x.jsonl";
  auto run = [&](const std::string& args) {
    const std::string cmd = env + dsinfer::test::binary() + " " + args + " >" + d.str() + "/o 2>" + d.str() + "/e";
    const int st = std::system(cmd.c_str());
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, dsinfer::test::slurp(d.str() + "/e"));
  };
  const auto serve = run("serve --backend cpu --gpus 2 --model " + model);
  EXPECT_EQ(serve.first, 2);
  EXPECT_NE(serve.second.find("use one process driving N ranks: dsinfer serve --gpus N"), std::string::npos)
      << serve.second;
  const auto dp = run(gen + " --gpus 2 --data-parallel-size 2");
  EXPECT_NE(dp.first, 0);
  EXPECT_NE(dp.second.find("DP attention (--data-parallel-size 2) is not implemented with one process per rank"),
            std::string::npos) << dp.second;
  const auto gpus = run(gen + " --gpus 4");
  EXPECT_NE(gpus.first, 0);
  EXPECT_NE(gpus.second.find("WORLD_SIZE=2 RANK=1 but --gpus 4"), std::string::npos) << gpus.second;
  const auto plain = dsinfer::test::run_cli(d, gen + " --gpus 2 --inject-fault 1:plan:0");
  EXPECT_NE(plain.rc, 0);
  EXPECT_NE(plain.err.find("a plan fault needs one process per rank"), std::string::npos) << plain.err;
}
