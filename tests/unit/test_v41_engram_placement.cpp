// DeepSeek-V4.1's Engram tables placed off the replicated weights (issue 26; model/engram_rows.h): in host memory in
// their checkpoint format with each step's rows fetched on a worker behind the layers before them, or with their
// rows sharded over ranks and gathered through the communicator (parallel/engram_exchange.h). Every placement must
// give the logits of the full tables bit for bit, through the model, the exchange and the CLI.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "cli_test_util.h"
#include "model/deepseek_v41.h"
#include "model/export_v41.h"
#include "model/host_state.h"
#include "parallel/engram_exchange.h"
#include "parallel/inproc_comm.h"
#include "test_util.h"

using namespace dsinfer;
using namespace dsinfer::model;

namespace {

std::unique_ptr<DeepseekV41Cpu> load(const std::string& dir, EngramPlacement p = EngramPlacement::kDevice) {
  return test::unwrap(DeepseekV41Cpu::load(dir, Numerics::hf(), p));
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

// Logits of every position, `toks` fed in chunks of the given sizes (cycled): prefill chunks, then decode steps.
Result<std::vector<float>> run_chunked(DeepseekV41Cpu& m, const std::vector<int32_t>& toks, const std::vector<int>& sizes) {
  DSI_ASSIGN_OR_RETURN(auto state, HostState::create(m.config(), 1, int64_t(toks.size())));
  SoloSequence seq(*state);
  std::vector<float> all, part;
  size_t i = 0, k = 0;
  while (i < toks.size()) {
    const size_t n = std::min(toks.size() - i, size_t(sizes[k++ % sizes.size()]));
    DSI_ASSIGN_OR_RETURN(SeqChunk c, seq.next_chunk({toks.data() + i, n}, true));
    DSI_RETURN_IF_ERROR(m.forward(state->pool(), {&c, 1}, part));
    seq.advance(int64_t(n));
    all.insert(all.end(), part.begin(), part.end());
    i += n;
  }
  return all;
}

double table_bytes(const io::ModelConfig& cfg) {
  double b = 0;
  for (int64_t rows : cfg.v41.engram_num_embeddings) b += double(rows * cfg.v41.engram_head_dim) * sizeof(float);
  return b;
}

}  // namespace

// The float fixtures and the same fixture converted to the release's formats (FP8 Engram rows with E8M0 scales): the
// host placement decodes only the looked-up rows, the same values the full decode holds, so logits are identical for
// a prefill in one chunk and for chunked prefill + decode. Its tables stay in the checkpoint (no fp32 copy).
TEST(V41EngramPlacement, HostTablesGiveTheDeviceLogitsBitForBit) {
  const test::ScratchDir dir("engram_host");
  ASSERT_TRUE(convert_checkpoint_v41(test::own_fixture("tiny-v41-a"), dir.str(), int64_t(256) << 10, 2).is_ok());
  for (const std::string& fx : {test::own_fixture("tiny-v41-a"), test::own_fixture("tiny-v41-b"), dir.str()}) {
    SCOPED_TRACE(fx);
    auto dev = load(fx);
    auto host = load(fx, EngramPlacement::kHost);
    EXPECT_EQ(dev->engram_rows().placement(), EngramPlacement::kDevice);
    EXPECT_EQ(host->engram_rows().placement(), EngramPlacement::kHost);
    EXPECT_DOUBLE_EQ(dev->engram_rows().bytes(), table_bytes(dev->config()));
    const double stored = host->engram_rows().bytes();  // the checkpoint's bytes: fp32, bf16 or FP8 + scales
    EXPECT_GT(stored, 0.0);
    EXPECT_LE(stored, table_bytes(dev->config()));
    const auto toks = random_tokens(60, int(dev->config().vocab_size), 5);
    for (const std::vector<int>& split : std::vector<std::vector<int>>{{60}, {7, 1, 13}, {1}}) {
      const auto want = test::unwrap(run_chunked(*dev, toks, split));
      const auto got = test::unwrap(run_chunked(*host, toks, split));
      EXPECT_EQ(got, want) << "split starting " << split[0];
    }
    EXPECT_GE(host->engram_rows().last_fetch_ms(), 0.0);
  }
}

// The exchange alone: each of 3 ranks asks for its own ids (repeats, ids of every owner, one rank none at all) and
// gets exactly the rows of the whole table; each distinct id crosses once.
TEST(EngramExchange, GathersEveryRowFromItsOwner) {
  constexpr int32_t kRanks = 3;
  constexpr int64_t kHd = 8;
  auto value = [](int64_t id, int64_t c) { return float(id) * 16.0f + float(c); };
  auto comms = parallel::make_inprocess_group(kRanks, parallel::CommOptions{});
  std::vector<std::vector<int64_t>> ids = {{5, 7, 5, 100, 0, 7, 42}, {}, {99, 3, 3, 3, 64}};
  std::vector<std::vector<float>> out(kRanks);
  std::vector<Status> st(kRanks, Status::ok());
  std::vector<parallel::EngramTraffic> traffic(kRanks);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      const EngramServe serve = [&, r](std::span<const int64_t> want, float* dst) -> Status {
        for (size_t i = 0; i < want.size(); ++i) {
          if (want[i] % kRanks != r) return Status::errorf("rank {} asked for {}", r, want[i]);
          for (int64_t c = 0; c < kHd; ++c) dst[i * kHd + size_t(c)] = value(want[i], c);
        }
        return Status::ok();
      };
      out[size_t(r)].assign(ids[size_t(r)].size() * kHd, -1.0f);
      st[size_t(r)] = parallel::gather_engram_rows(*comms[size_t(r)], ids[size_t(r)], kHd, serve, out[size_t(r)].data(),
                                                   &traffic[size_t(r)]);
    });
  for (auto& t : threads) t.join();
  for (int32_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[size_t(r)].is_ok()) << st[size_t(r)].message();
    for (size_t i = 0; i < ids[size_t(r)].size(); ++i)
      for (int64_t c = 0; c < kHd; ++c) EXPECT_EQ(out[size_t(r)][i * kHd + size_t(c)], value(ids[size_t(r)][i], c));
  }
  EXPECT_EQ(traffic[0].rows_asked, 5);  // 5, 7, 100, 0, 42
  EXPECT_EQ(traffic[1].rows_asked, 0);
  EXPECT_EQ(traffic[2].rows_asked, 3);  // 99, 3, 64
  EXPECT_EQ(traffic[0].rows_served + traffic[1].rows_served + traffic[2].rows_served, 8);
  // A negative id is refused before any collective, naming it.
  const Status bad = parallel::gather_engram_rows(*comms[0], std::vector<int64_t>{3, -2}, kHd, {}, out[0].data());
  EXPECT_NE(bad.message().find("-2"), std::string::npos) << bad.message();
}

// N ranks (2, 3: uneven rows, 4), each a full model whose Engram tables keep only rows id % N == rank, gathered
// through the in-process communicator: with every rank running the same sequence (replicated tokens) and with each
// rank its own sequence (DP), every rank's logits are the one-rank logits bit for bit, holding ~1/N of the rows.
TEST(V41EngramPlacement, ShardedRowsOverRanksGiveTheOneRankLogits) {
  const std::string fx = test::own_fixture("tiny-v41-a");
  auto one = load(fx);
  const int V = int(one->config().vocab_size);
  const std::vector<int> split = {7, 1, 13, 1};
  for (const int32_t n : {2, 3, 4}) {
    SCOPED_TRACE(n);
    auto comms = parallel::make_inprocess_group(n, parallel::CommOptions{std::chrono::seconds(60)});
    std::vector<std::unique_ptr<DeepseekV41Cpu>> ranks;
    for (int32_t r = 0; r < n; ++r) {
      ranks.push_back(load(fx));
      parallel::Communicator* comm = comms[size_t(r)].get();
      EngramShard s{r, n, [comm](std::span<const int64_t> ids, int64_t hd, const EngramServe& serve, float* out) {
                      return parallel::gather_engram_rows(*comm, ids, hd, serve, out);
                    }};
      ASSERT_TRUE(ranks.back()->set_engram_shard(std::move(s)).is_ok());
      EXPECT_EQ(ranks.back()->engram_rows().placement(), EngramPlacement::kSharded);
      EXPECT_LE(ranks.back()->engram_rows().bytes(), table_bytes(one->config()) / n + 2 * 32 * sizeof(float));
    }
    for (const bool dp : {false, true}) {
      SCOPED_TRACE(dp ? "each rank its own sequence" : "replicated tokens");
      std::vector<std::vector<int32_t>> toks;
      for (int32_t r = 0; r < n; ++r) toks.push_back(random_tokens(44, V, dp ? 100 + uint32_t(r) : 100));
      std::vector<Result<std::vector<float>>> got(size_t(n), Status::error("not run"));
      std::vector<std::thread> threads;
      for (int32_t r = 0; r < n; ++r)
        threads.emplace_back([&, r] { got[size_t(r)] = run_chunked(*ranks[size_t(r)], toks[size_t(r)], split); });
      for (auto& t : threads) t.join();
      for (int32_t r = 0; r < n; ++r) {
        ASSERT_TRUE(got[size_t(r)].is_ok()) << got[size_t(r)].status().message();
        EXPECT_EQ(got[size_t(r)].value(), test::unwrap(run_chunked(*one, toks[size_t(r)], split))) << "rank " << r;
      }
    }
  }
  // Sharding is for full tables only.
  auto host = load(fx, EngramPlacement::kHost);
  const Status again = host->set_engram_shard(EngramShard{0, 2, [](auto, auto, auto&, auto) { return Status::ok(); }});
  EXPECT_NE(again.message().find("already placed (host)"), std::string::npos) << again.message();
}

// The user's path: `dsinfer check-reference --engram-placement host` prints exactly what the default placement does
// (the same logits: errors, greedy steps) and passes the fixture's hf-noqat gate; the placements a model or backend
// cannot take are refused naming the option.
TEST(V41EngramPlacement, CliHostPlacementChecksOutIdentically) {
  const test::ScratchDir dir("engram_cli");
  const std::string fx = test::own_fixture("tiny-v41-a");
  const std::string args = "check-reference --model " + fx + " --numerics hf-noqat --reference " + fx +
                           "/reference_noqat.safetensors --tolerance 1e-5";
  const test::CliResult dev = test::run_cli(dir, args);
  ASSERT_EQ(dev.rc, 0) << dev.out << dev.err;
  const test::CliResult host = test::run_cli(dir, args + " --engram-placement host");
  ASSERT_EQ(host.rc, 0) << host.out << host.err;
  EXPECT_EQ(host.out, dev.out);
  const test::CliResult sharded = test::run_cli(dir, args + " --engram-placement sharded");
  EXPECT_NE(sharded.rc, 0);
  EXPECT_NE(sharded.err.find("--engram-placement sharded"), std::string::npos) << sharded.err;
  const test::CliResult v4 = test::run_cli(
      dir, "generate --model " + test::own_fixture("tiny-v4-a") + " --prompt hi --engram-placement host");
  EXPECT_NE(v4.rc, 0);
  EXPECT_NE(v4.err.find("no Engram tables"), std::string::npos) << v4.err;
  const test::CliResult bogus = test::run_cli(dir, "generate --model " + fx + " --prompt hi --engram-placement disk");
  EXPECT_EQ(bogus.rc, 2);
  EXPECT_NE(bogus.err.find("--engram-placement expects device|sharded|host"), std::string::npos) << bogus.err;
}
