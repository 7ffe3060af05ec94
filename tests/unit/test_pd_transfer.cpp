// Prefill/decode disaggregation (docs/fleet.md): the exported prefix-state blob (cache/state_blob.h), the runner's
// region copies (cache/state_copy.h), Engine::export_prefix_state / import_prefix_state on V4 and V4.1 fixtures
// (an engine that imports another's state continues exactly like one engine that computed everything, with the
// imported tokens counted as an exact prefix hit; a bad blob is refused by name and changes nothing), and
// `serve --role prefill|decode` through two servers on loopback ports, with the transfer's faults (truncated,
// corrupted, stalled, the prefill worker gone): each ends in a local prefill with the same tokens.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "cache/state_blob.h"
#include "cache/state_copy.h"
#include "dsinfer/engine.h"
#include "dsinfer/server.h"
#include "prefix_test_util.h"
#include "test_server_util.h"
#include "test_util.h"
#include "v41_tokenizer_util.h"

using namespace dsinfer;
using json = nlohmann::json;

namespace {

std::string sample_blob(int64_t blocks = 3) {
  cache::StateBlobHeader h{0x1234, 4, 24, 40, 4 * blocks};
  std::vector<int32_t> toks(size_t(h.num_tokens));
  std::iota(toks.begin(), toks.end(), 7);
  std::string b;
  auto at = cache::begin_state_blob(h, toks, b);
  test::require(at.is_ok(), "begin_state_blob");
  for (size_t i = at->blocks_offset; i + 4 < b.size(); ++i) b[i] = char(i * 31);
  cache::seal_state_blob(b);
  return b;
}

}  // namespace

TEST(StateBlob, RoundTripsAndRefusesEveryTruncationAndBitFlip) {
  const std::string b = sample_blob();
  cache::StateBlobHeader h{0x1234, 4, 24, 40, 12};
  ASSERT_EQ(int64_t(b.size()), cache::state_blob_bytes(h));
  auto v = cache::parse_state_blob(b);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v->header.identity, 0x1234u);
  EXPECT_EQ(v->tokens.size(), 12u);
  EXPECT_EQ(v->tokens[11], 18);
  EXPECT_EQ(v->blocks.size(), 3u * 24u);
  EXPECT_EQ(v->snapshot.size(), 40u);
  EXPECT_EQ(v->snapshot.data() + 40, b.data() + b.size() - 4);
  for (size_t n = 0; n < b.size(); ++n) EXPECT_FALSE(cache::parse_state_blob(b.substr(0, n)).is_ok()) << n;
  EXPECT_FALSE(cache::parse_state_blob(b + "x").is_ok());
  for (size_t i = 0; i < b.size(); ++i) {
    std::string c = b;
    c[i] = char(c[i] ^ 0x10);
    auto r = cache::parse_state_blob(c);
    ASSERT_FALSE(r.is_ok()) << "byte " << i;
    EXPECT_NE(r.status().message().find("state blob"), std::string::npos);
  }
  std::string future = b;
  future[4] = 2;
  EXPECT_NE(cache::parse_state_blob(future).status().message().find("version 2"), std::string::npos);
  // Headers no blob can have: the size formula refuses them before anything is allocated.
  EXPECT_EQ(cache::state_blob_bytes({1, 4, 24, 40, 10}), -1);  // not whole blocks
  EXPECT_EQ(cache::state_blob_bytes({1, 4, 24, 40, 0}), -1);
  EXPECT_EQ(cache::state_blob_bytes({1, 4, int64_t(1) << 45, 40, int64_t(1) << 20}), -1);
  std::string huge = b;
  const int64_t big = int64_t(1) << 60;
  std::memcpy(huge.data() + 40, &big, 8);
  EXPECT_FALSE(cache::parse_state_blob(huge).is_ok());
}

TEST(StateBlob, RegionRunsPackBlocksAndSnapshotsAndCheckIds) {
  const int64_t sb = 16, bb = 8, S = 2, B = 6, N = 3;
  std::vector<uint8_t> mem(size_t(S * sb + B * bb + N * sb));
  std::iota(mem.begin(), mem.end(), uint8_t(1));
  uint8_t* p = mem.data();
  const cache::StateMemory m{p, p + S * sb, p + S * sb + B * bb, nullptr, S, B, N, 0, sb, bb};
  using R = cache::StateRegion;
  const std::vector<R> regions = {{R::Kind::kBlock, 2}, {R::Kind::kBlock, 3}, {R::Kind::kBlock, 0}, {R::Kind::kSnapshot, 1}};
  std::vector<uint8_t> out(size_t(3 * bb + sb));
  auto runs = cache::plan_region_runs(regions, m, out.data(), out.size(), cache::CopyRun::Dir::kToHost);
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  EXPECT_EQ(runs->size(), 3u);  // blocks 2 and 3 are one run
  ASSERT_TRUE(cache::regions_on_host(regions, m, out.data(), out.size(), cache::CopyRun::Dir::kToHost, "t").is_ok());
  EXPECT_EQ(0, std::memcmp(out.data(), m.blocks + 2 * bb, size_t(2 * bb)));
  EXPECT_EQ(0, std::memcmp(out.data() + 2 * bb, m.blocks, size_t(bb)));
  EXPECT_EQ(0, std::memcmp(out.data() + 3 * bb, m.snapshots + sb, size_t(sb)));
  // Back into other places: the bytes land where the regions say.
  const std::vector<R> back = {{R::Kind::kBlock, 5}, {R::Kind::kBlock, 4}, {R::Kind::kBlock, 1}, {R::Kind::kSnapshot, 0}};
  ASSERT_TRUE(cache::regions_on_host(back, m, out.data(), out.size(), cache::CopyRun::Dir::kToDevice, "t").is_ok());
  EXPECT_EQ(0, std::memcmp(m.blocks + 5 * bb, m.blocks + 2 * bb, size_t(bb)));
  EXPECT_EQ(0, std::memcmp(m.snapshots, m.snapshots + sb, size_t(sb)));
  for (const R bad : {R{R::Kind::kBlock, 6}, R{R::Kind::kBlock, -1}, R{R::Kind::kSnapshot, 3}}) {
    auto r = cache::plan_region_runs({&bad, 1}, m, out.data(), size_t(bad.kind == R::Kind::kBlock ? bb : sb),
                                     cache::CopyRun::Dir::kToHost);
    EXPECT_FALSE(r.is_ok());
  }
  EXPECT_FALSE(cache::plan_region_runs(regions, m, out.data(), out.size() - 1, cache::CopyRun::Dir::kToHost).is_ok());
  EXPECT_FALSE(cache::plan_region_runs(regions, m, out.data(), out.size() + 1, cache::CopyRun::Dir::kToHost).is_ok());
}

namespace {

struct Outcome {
  std::vector<int32_t> prompt, tokens;
  PrefixCacheMetrics pm;
};

std::unique_ptr<Engine> make_engine(const std::string& model, const std::string& prefix = "exact") {
  EngineOptions o = prefix_test::options(model, prefix);
  if (model.find("v41") != std::string::npos) {  // the fixture's own tokenizer is WordLevel (v41_tokenizer_util.h)
    static const test::ScratchDir dir("pd_v41_tok");
    static const std::string tok = test::byte_tokenizer(dir);
    o.tokenizer_path = tok;
    o.numerics = "hf";
  }
  std::string err;
  auto e = Engine::create(o, &err);
  test::require(e != nullptr, err);
  return e;
}

Outcome run(Engine& e, const json& body) {
  std::string err;
  test::require(e.submit(body.dump(), &err) != 0, err);
  std::vector<RequestResult> out;
  test::require(e.run_until_idle(out, &err), err);
  test::require(out.size() == 1, "one result");
  return {out[0].prompt_token_ids, out[0].completions.at(0).token_ids, e.stats().prefix_cache};
}

json body_of(const std::vector<int32_t>& prompt, int max_tokens, bool sampled) {
  return prefix_test::body(prompt, max_tokens, sampled ? 1 : 0);
}

}  // namespace

// The decode side continues exactly as one engine that computed the whole prompt: greedy and seeded, V4 and V4.1.
TEST(PdEngine, ImportedStateContinuesExactlyLikeOneEngine) {
  for (const char* name : {"tiny-v4-a", "tiny-v4-b", "tiny-v41-a"}) {
    SCOPED_TRACE(name);
    const std::string model = test::own_fixture(name);
    auto prefill = make_engine(model);
    auto decode = make_engine(model);
    auto single = make_engine(model, "off");
    const int64_t bs = prefill->stats().state_block_size;
    for (int k = 0; k < 2; ++k) {
      const std::vector<int32_t> prompt = prefix_test::seq_tokens(int(3 * bs + 5 + k * 7), 40 + k);
      const Outcome p = run(*prefill, body_of(prompt, 1, k == 1));
      std::string blob, err;
      ASSERT_TRUE(prefill->export_prefix_state(p.prompt, &blob, &err)) << err;
      const int64_t want_tokens = (int64_t(prompt.size()) - 1) / bs * bs;
      const EngineStats st = prefill->stats();
      const cache::StateBlobHeader h{0, bs, st.state_block_bytes, st.state_slot_bytes, want_tokens};
      EXPECT_EQ(int64_t(blob.size()), cache::state_blob_bytes(h));  // the layout's prediction, to the byte
      const PrefixCacheMetrics before = decode->stats().prefix_cache;
      ASSERT_EQ(decode->import_prefix_state(blob, &err), want_tokens) << err;
      const Outcome d = run(*decode, body_of(prompt, 12, k == 1));
      const Outcome s = run(*single, body_of(prompt, 12, k == 1));
      EXPECT_EQ(d.tokens, s.tokens);
      EXPECT_EQ(d.pm.exact_hits - before.exact_hits, 1);
      EXPECT_EQ(d.pm.hit_tokens - before.hit_tokens, want_tokens);
    }
  }
}

TEST(PdEngine, BadBlobsAreRefusedByNameAndTheRequestPrefillsLocally) {
  const std::string model = test::own_fixture("tiny-v4-a");
  auto prefill = make_engine(model);
  auto other = make_engine(test::own_fixture("tiny-v4-b"));
  auto decode = make_engine(model);
  auto single = make_engine(model, "off");
  const int64_t bs = prefill->stats().state_block_size;
  const std::vector<int32_t> prompt = prefix_test::seq_tokens(int(2 * bs + 3), 7);
  std::string blob, foreign, err;
  run(*prefill, body_of(prompt, 1, false));
  ASSERT_TRUE(prefill->export_prefix_state(prompt, &blob, &err)) << err;
  run(*other, body_of(prompt, 1, false));
  ASSERT_TRUE(other->export_prefix_state(prompt, &foreign, &err)) << err;

  EXPECT_EQ(decode->import_prefix_state(foreign, &err), -1);
  EXPECT_NE(err.find("another model"), std::string::npos) << err;
  std::string flipped = blob;
  flipped[blob.size() / 2] ^= 1;
  EXPECT_EQ(decode->import_prefix_state(flipped, &err), -1);
  EXPECT_NE(err.find("checksum"), std::string::npos) << err;
  EXPECT_EQ(decode->import_prefix_state(blob.substr(0, blob.size() - 100), &err), -1);
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  EXPECT_EQ(decode->import_prefix_state("", &err), -1);
  // Nothing was imported: the request computes its prompt and still gives one engine's tokens.
  const Outcome d = run(*decode, body_of(prompt, 10, false));
  EXPECT_EQ(d.pm.hit_tokens, 0);
  EXPECT_EQ(d.tokens, run(*single, body_of(prompt, 10, false)).tokens);

  // No state to export: a prompt of one block or less, a prompt never run, an engine without prefix caching.
  EXPECT_FALSE(prefill->export_prefix_state(prefix_test::seq_tokens(int(bs), 3), &blob, &err));
  EXPECT_FALSE(prefill->export_prefix_state(prefix_test::seq_tokens(int(3 * bs), 99), &blob, &err));
  EXPECT_NE(err.find("no exact prefix state"), std::string::npos) << err;
  EXPECT_FALSE(single->export_prefix_state(prompt, &blob, &err));
  EXPECT_NE(err.find("prefix caching"), std::string::npos) << err;
  EXPECT_EQ(single->import_prefix_state(foreign, &err), -1);
}

// Importing a prefix the engine already holds changes nothing; a second request on it hits again.
TEST(PdEngine, ImportingAHeldPrefixTwiceIsHarmless) {
  const std::string model = test::own_fixture("tiny-v4-b");
  auto prefill = make_engine(model);
  auto decode = make_engine(model);
  const int64_t bs = prefill->stats().state_block_size;
  const std::vector<int32_t> prompt = prefix_test::seq_tokens(int(2 * bs + 9), 12);
  std::string blob, err;
  run(*prefill, body_of(prompt, 1, false));
  ASSERT_TRUE(prefill->export_prefix_state(prompt, &blob, &err)) << err;
  ASSERT_EQ(decode->import_prefix_state(blob, &err), 2 * bs) << err;
  ASSERT_EQ(decode->import_prefix_state(blob, &err), 2 * bs) << err;
  const Outcome a = run(*decode, body_of(prompt, 6, false));
  const Outcome b = run(*decode, body_of(prompt, 6, false));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(b.pm.exact_hits, 2);
}

namespace {

std::unique_ptr<server::Server> start_server(const std::string& role, const std::string& fault = "",
                                             double timeout_s = 30) {
  EngineOptions o = prefix_test::options(test::source_dir() + "/models/dsv4-small", role == "both" ? "off" : "exact");
  o.max_model_len = 512;
  std::string err;
  auto e = Engine::create(o, &err);
  test::require(e != nullptr, err);
  server::ServerOptions so;
  so.port = 0;
  so.role = role;
  so.kv_transfer_fault = fault;
  so.kv_transfer_timeout_s = timeout_s;
  auto srv = std::make_unique<server::Server>(std::move(e), so);
  test::require(srv->start(&err), err);
  return srv;
}

json post(int port, const json& body) {
  const test::HttpResponse r = test::request(port, "POST", "/v1/completions", body.dump());
  test::require(r.status == 200, "HTTP " + std::to_string(r.status) + ": " + r.body);
  return json::parse(r.body);
}

// vllm-router's two legs (docs/fleet.md: what it sends, read from its traffic): the prefill leg with max_tokens 1 and
// do_remote_decode, then the original request with the prefill answer's kv_transfer_params on the decode worker.
json pd_round_trip(int prefill_port, int decode_port, json body) {
  json first = body;
  first["max_tokens"] = 1;
  first["min_tokens"] = 1;
  first["kv_transfer_params"] = {{"do_remote_decode", true}, {"do_remote_prefill", false}, {"remote_engine_id", nullptr},
                                 {"remote_block_ids", nullptr}, {"remote_host", nullptr}, {"remote_port", nullptr}};
  const json p = post(prefill_port, first);
  body["kv_transfer_params"] = p.at("kv_transfer_params");
  return post(decode_port, body);
}

std::string text_prompt() {
  std::string t;
  for (int i = 0; i < 12; ++i) t += "The decode worker resumes where the prefill worker stopped, sentence " + std::to_string(i) + ". ";
  return t;
}

}  // namespace

TEST(PdServer, PrefillThenDecodeEqualsOneServerAndFaultsFallBackToLocalPrefill) {
  auto single = start_server("both");
  auto decode = start_server("decode", "", 3);
  const json body = {{"prompt", text_prompt()}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string want = post(single->port(), body)["choices"][0]["text"];
  struct Case {
    std::string fault;
    bool resumes;
  };
  for (const Case& c : {Case{"", true}, Case{"truncate:1000", false}, Case{"corrupt:70000", false}, Case{"stall", false}}) {
    SCOPED_TRACE(c.fault);
    auto prefill = start_server("prefill", c.fault);
    ASSERT_GT(prefill->kv_transfer_port(), 0);
    const json d = pd_round_trip(prefill->port(), decode->port(), body);
    EXPECT_EQ(d["choices"][0]["text"], want);
    const json& pd = d.at("dsinfer_pd");
    EXPECT_EQ(pd["resumed"], c.resumes) << pd.dump();
    if (c.resumes) {
      EXPECT_GT(pd["state_tokens"].get<int64_t>(), 0);
      EXPECT_GT(pd["wire_bytes"].get<int64_t>(), pd["state_bytes"].get<int64_t>());  // framing on top
      EXPECT_GE(pd["prefill_s"].get<double>(), 0);
    } else {
      EXPECT_TRUE(pd["fallback"].is_string()) << pd.dump();
    }
  }
  // The prefill worker is gone before the pull: the decoder prefills locally.
  json dead = body;
  dead["kv_transfer_params"] = {{"do_remote_prefill", true}, {"remote_host", "127.0.0.1"}, {"remote_port", 1},
                                {"remote_request_id", "gone"}};
  const json d = post(decode->port(), dead);
  EXPECT_EQ(d["choices"][0]["text"], want);
  EXPECT_NE(d["dsinfer_pd"]["fallback"].get<std::string>().find("connect"), std::string::npos);
  // The decode worker's metrics count every outcome.
  const std::string m = test::request(decode->port(), "GET", "/metrics").body;
  EXPECT_NE(m.find("dsinfer_kv_transfer_pulls_total{result=\"ok\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("dsinfer_kv_transfer_pulls_total{result=\"failed\"} 4"), std::string::npos) << m;
}
