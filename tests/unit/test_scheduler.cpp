// Scheduler scenario tables (admission, token budget, chunking, preemption, abort) driven by a fake model
// that checks every plan (contiguous positions per slot, right token ids, block tables covering the new
// tokens, no block in two tables) and whose logits depend only on the tokens fed into a sequence's state —
// so recompute after preemption, chunking and batch composition must not change any request's tokens.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "scheduler/scheduler.h"
#include "scheduler/step_sampling.h"
#include "scheduler_test_util.h"
#include "test_util.h"

using namespace dsinfer;
using namespace dsinfer::scheduler;
using sampling::FinishReason;

namespace {

constexpr int64_t kVocab = 50;
constexpr int64_t kEos = 0;

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

// Stands in for the model forward: per slot a running hash of (position, token), reset at position 0.
struct FakeModel {
  std::map<cache::SlotId, std::pair<int64_t, uint64_t>> state;  // slot -> (length, hash)
  std::vector<float> logits;

  void run(const BatchPlan& plan, const cache::StateCache& cache) {
    logits.assign(size_t(plan.num_logits() * kVocab), 0.0f);
    std::set<cache::SlotId> slots;
    std::set<cache::BlockId> blocks;
    ASSERT_EQ(plan.cu_seqlens.size(), plan.seqs.size() + 1);
    for (const SeqPlan& sp : plan.seqs) {
      ASSERT_TRUE(slots.insert(sp.slot).second) << "slot " << sp.slot << " twice in one plan";
      for (cache::BlockId b : sp.block_table) ASSERT_TRUE(blocks.insert(b).second) << "block " << b << " shared";
      ASSERT_GE(int64_t(sp.block_table.size()) * cache.block_size(), sp.start_pos + sp.num_new_tokens);
      auto& [len, h] = state[sp.slot];
      if (sp.start_pos == 0) { len = 0; h = 1; }
      ASSERT_EQ(len, sp.start_pos) << "seq " << sp.seq_id << " state holds " << len << " tokens";
      const size_t P = sp.prompt_tokens.size();
      for (int32_t i = 0; i < sp.num_new_tokens; ++i) {
        const int64_t pos = sp.start_pos + i;
        const int32_t tok = plan.token_ids[size_t(sp.token_offset + i)];
        const int32_t want = size_t(pos) < P ? sp.prompt_tokens[size_t(pos)] : sp.output_tokens[size_t(pos) - P];
        ASSERT_EQ(tok, want) << "seq " << sp.seq_id << " pos " << pos;
        ASSERT_EQ(plan.positions[size_t(sp.token_offset + i)], pos);
        h = mix(h, uint64_t(pos) << 32 | uint32_t(tok));
        ++len;
      }
      if (sp.needs_logits) {
        ASSERT_EQ(plan.logits_token_index[size_t(sp.logits_row)], sp.token_offset + sp.num_new_tokens - 1);
        for (int64_t v = 0; v < kVocab; ++v)
          logits[size_t(sp.logits_row * kVocab + v)] = float(mix(h, uint64_t(v)) % 1000) / 250.0f;
        logits[size_t(sp.logits_row * kVocab + kEos)] = -5.0f;  // EOS rare, so max_tokens decides length
      }
    }
  }
};

io::ModelConfig small_model() { return test::scheduler_test_model(kVocab); }

struct Rig {
  int32_t max_num_seqs = 8;
  int64_t max_num_batched_tokens = 1000;
  int32_t num_blocks = 1000;   // block_size 4
  int32_t num_slots = 8;
  int64_t max_model_len = 64;
  double watermark = 0.0;
};

struct Harness {
  std::unique_ptr<Scheduler> sched;
  FakeModel model;
  sampling::Sampler sampler;
  std::vector<StepOutput> outs;
  std::map<SeqId, std::vector<int32_t>> tokens;
  std::map<SeqId, FinishReason> reason;
  std::vector<SeqId> preempted;

  explicit Harness(const Rig& s) {
    cache::StateCacheConfig cc;
    cc.block_size = 4;
    cc.max_model_len = s.max_model_len;
    cc.max_num_seqs = s.num_slots;
    const auto L = test::unwrap(cache::compute_state_layout(small_model(), cc));
    cc.budget_bytes = s.num_slots * L.slot_bytes + int64_t(s.num_blocks) * L.block_bytes;
    auto c = test::unwrap(cache::StateCache::create(small_model(), cc));
    // The cache caps blocks at what its slots could use at max_model_len.
    EXPECT_EQ(c.num_blocks(), std::min<int64_t>(s.num_blocks, s.num_slots * ((s.max_model_len + 3) / 4)));
    SchedulerConfig sc;
    sc.max_num_seqs = s.max_num_seqs;
    sc.max_num_batched_tokens = s.max_num_batched_tokens;
    sc.admission_watermark = s.watermark;
    sc.eos_token_id = kEos;
    sc.vocab_size = kVocab;
    sched = std::make_unique<Scheduler>(sc, std::move(c));
  }

  RequestId add(std::vector<int32_t> prompt, int64_t max_tokens, sampling::SamplingParams p = greedy()) {
    p.max_tokens = max_tokens;
    auto r = sched->add_request({std::move(prompt), p});
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? *r : 0;
  }
  static sampling::SamplingParams greedy() {
    sampling::SamplingParams p;
    p.temperature = 0;
    return p;
  }

  // Runs the model and sampler for a plan and applies the outputs.
  void finish_step(const BatchPlan& plan) {
    model.run(plan, sched->cache());
    std::vector<int32_t> nonfinite;
    ASSERT_TRUE(sample_step(plan, model.logits, kVocab, kEos, sampler, outs, nonfinite).is_ok());
    ASSERT_TRUE(nonfinite.empty());
    ASSERT_TRUE(sched->update(outs).is_ok());
    for (const SeqUpdate& u : sched->updates()) {
      auto& t = tokens[u.seq_id];
      t.insert(t.end(), u.tokens.begin(), u.tokens.end());
      if (u.finished) reason[u.seq_id] = u.finish_reason;
    }
  }
  const BatchPlan& step() {
    const BatchPlan& plan = sched->schedule();
    preempted.insert(preempted.end(), plan.preempted.begin(), plan.preempted.end());
    finish_step(plan);
    return plan;
  }
  void run_all() {
    for (int i = 0; i < 10000 && sched->has_unfinished(); ++i) step();
    EXPECT_FALSE(sched->has_unfinished());
  }
};

std::vector<int32_t> prompt_of(int len, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(int32_t(1 + (i * 7 + salt * 13) % (kVocab - 1)));
  return p;
}

// One row of an expected plan: (request index, start_pos, num_new_tokens, needs_logits).
struct Row {
  int req;
  int64_t start;
  int32_t n;
  bool logits;
  bool operator==(const Row&) const = default;
};

struct Scenario {
  const char* name;
  Rig setup;
  std::vector<std::pair<int, int64_t>> requests;  // (prompt length, max_tokens)
  std::vector<std::vector<Row>> steps;            // expected plans, in order, until everything finished
  std::vector<std::vector<int>> preempted;        // per step: request indices preempted (optional)
};

void run_scenario(const Scenario& sc) {
  SCOPED_TRACE(sc.name);
  Harness h(sc.setup);
  std::map<RequestId, int> index;
  for (size_t i = 0; i < sc.requests.size(); ++i)
    index[h.add(prompt_of(sc.requests[i].first, int(i)), sc.requests[i].second)] = int(i);
  for (size_t k = 0; k < sc.steps.size(); ++k) {
    const BatchPlan& plan = h.sched->schedule();
    std::vector<Row> got;
    for (const SeqPlan& sp : plan.seqs) got.push_back({index.at(sp.request_id), sp.start_pos, sp.num_new_tokens, sp.needs_logits});
    ASSERT_EQ(got, sc.steps[k]) << "step " << k + 1;
    if (k < sc.preempted.size()) {
      std::vector<int> pre;
      for (SeqId id : plan.preempted) pre.push_back(index.at(RequestId(id)));  // n = 1: seq id == request id here
      EXPECT_EQ(pre, sc.preempted[k]) << "step " << k + 1;
    }
    h.finish_step(plan);
  }
  EXPECT_FALSE(h.sched->has_unfinished());
  EXPECT_TRUE(h.sched->schedule().empty());
  for (size_t i = 0; i < sc.requests.size(); ++i) {
    SeqId id = SeqId(i + 1);
    EXPECT_EQ(int64_t(h.tokens[id].size()), sc.requests[i].second) << "request " << i;
    EXPECT_EQ(h.reason[id], FinishReason::Length);
  }
  auto st = h.sched->cache().stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);  // everything returned
  EXPECT_EQ(st.free_slots, st.num_slots);
}

}  // namespace

TEST(Scheduler, ScenarioTable) {
  const std::vector<Scenario> scenarios = {
      {"token budget splits the second prompt, decode first",
       {.max_num_batched_tokens = 10},
       {{8, 3}, {8, 3}},
       {{{0, 0, 8, true}, {1, 0, 2, false}},
        {{0, 8, 1, true}, {1, 2, 6, true}},
        {{0, 9, 1, true}, {1, 8, 1, true}},
        {{1, 9, 1, true}}},
       {}},
      {"max_num_seqs caps admission, FCFS",
       {.max_num_seqs = 2},
       {{4, 2}, {4, 2}, {4, 2}},
       {{{0, 0, 4, true}, {1, 0, 4, true}},
        {{0, 4, 1, true}, {1, 4, 1, true}},
        {{2, 0, 4, true}},
        {{2, 4, 1, true}}},
       {}},
      {"long prompt chunked across steps alongside decodes",
       {.max_num_batched_tokens = 6},
       {{2, 5}, {13, 1}},
       {{{0, 0, 2, true}, {1, 0, 4, false}},
        {{0, 2, 1, true}, {1, 4, 5, false}},
        {{0, 3, 1, true}, {1, 9, 4, true}},
        {{0, 4, 1, true}},
        {{0, 5, 1, true}}},
       {}},
      {"slots cap admission like max_num_seqs",
       {.num_slots = 1},
       {{3, 1}, {3, 1}},
       {{{0, 0, 3, true}}, {{1, 0, 3, true}}},
       {}},
      // 6 blocks of 4 tokens, two sequences of prompt 8 growing to 8 + 11 computed tokens: at position 12 the
      // older one needs a 4th block while the pool is empty -> the newer is preempted, waits until the older
      // finishes, then recomputes its prompt + 4 generated tokens in one chunk.
      {"newest sequence preempted when blocks run out, then recomputed",
       {.num_blocks = 6, .max_model_len = 24},
       {{8, 12}, {8, 12}},
       {{{0, 0, 8, true}, {1, 0, 8, true}},
        {{0, 8, 1, true}, {1, 8, 1, true}},
        {{0, 9, 1, true}, {1, 9, 1, true}},
        {{0, 10, 1, true}, {1, 10, 1, true}},
        {{0, 11, 1, true}, {1, 11, 1, true}},
        {{0, 12, 1, true}},
        {{0, 13, 1, true}}, {{0, 14, 1, true}}, {{0, 15, 1, true}}, {{0, 16, 1, true}}, {{0, 17, 1, true}},
        {{0, 18, 1, true}},
        {{1, 0, 13, true}},
        {{1, 13, 1, true}}, {{1, 14, 1, true}}, {{1, 15, 1, true}}, {{1, 16, 1, true}}, {{1, 17, 1, true}},
        {{1, 18, 1, true}}},
       {{}, {}, {}, {}, {}, {1}, {}, {}, {}, {}, {}, {}, {}}},
  };
  for (const auto& sc : scenarios) run_scenario(sc);
}

TEST(Scheduler, PreemptedSequenceProducesSameTokensAsUnpressured) {
  // Same requests with ample blocks and with a pool that forces preemptions: identical greedy outputs.
  auto run = [](int32_t blocks) {
    Rig s;
    s.num_blocks = blocks;
    s.max_model_len = 40;
    s.max_num_batched_tokens = 16;
    Harness h(s);
    for (int i = 0; i < 5; ++i) h.add(prompt_of(6 + 3 * i, i), 20 - i);
    h.run_all();
    return std::make_pair(h.tokens, h.preempted.size());
  };
  auto [calm, calm_pre] = run(100);
  auto [tight, tight_pre] = run(12);
  EXPECT_EQ(calm_pre, 0u);
  EXPECT_GT(tight_pre, 0u);
  EXPECT_EQ(calm, tight);
}

TEST(Scheduler, WatermarkHoldsBackAdmissionButNotALoneSequence) {
  Rig s;
  s.num_blocks = 10;
  s.max_model_len = 40;
  s.watermark = 0.5;  // keep 5 blocks free when admitting next to others
  Harness h(s);
  h.add(prompt_of(16, 0), 2);  // 4 blocks, alone: admitted although 10 - 4 < 5 would fail with others
  h.add(prompt_of(8, 1), 2);   // 2 more blocks would leave 4 < 5 free: waits
  const BatchPlan& p1 = h.step();
  ASSERT_EQ(p1.num_seqs(), 1);
  EXPECT_EQ(h.sched->stats().waiting, 1);
  h.run_all();
  EXPECT_EQ(h.tokens.size(), 2u);
}

TEST(Scheduler, AbortWaitingRunningAndInFlight) {
  Rig s;
  s.max_num_seqs = 2;
  Harness h(s);
  RequestId a = h.add(prompt_of(5, 0), 10);
  RequestId b = h.add(prompt_of(5, 1), 10);
  RequestId c = h.add(prompt_of(5, 2), 10);
  h.step();
  const int32_t free_before = h.sched->cache().free_blocks();
  // c is waiting: aborting it removes it from the queue.
  ASSERT_TRUE(h.sched->abort(c).is_ok());
  EXPECT_EQ(h.sched->stats().waiting, 0);
  // b is aborted while its step is in flight: its output is dropped; its state is freed once the step is done
  // (the device may still write it until then, so it cannot be handed to another sequence earlier).
  const BatchPlan& plan = h.sched->schedule();
  ASSERT_EQ(plan.num_seqs(), 2);
  ASSERT_TRUE(h.sched->abort(b).is_ok());
  EXPECT_EQ(h.sched->cache().free_blocks(), free_before);
  h.finish_step(plan);
  EXPECT_GT(h.sched->cache().free_blocks(), free_before);
  EXPECT_EQ(h.tokens[SeqId(b)].size(), 1u);  // only the token from before the abort
  EXPECT_FALSE(h.reason.count(SeqId(b)));
  auto st = h.sched->stats();
  EXPECT_EQ(st.num_aborted, 2);
  EXPECT_EQ(st.running, 1);
  EXPECT_FALSE(h.sched->abort(b).is_ok());  // already finished
  auto unknown = h.sched->abort(999);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.message().find("unknown request id 999"), std::string::npos);
  h.run_all();
  EXPECT_EQ(h.tokens[SeqId(a)].size(), 10u);
  EXPECT_EQ(h.sched->cache().free_blocks(), h.sched->cache().num_blocks());
}

TEST(Scheduler, RejectsBadRequestsNamingTheProblem) {
  Harness h(Rig{});
  struct Case {
    std::vector<int32_t> prompt;
    int64_t max_tokens;
    const char* must_contain;
  };
  const std::vector<Case> cases = {
      {{}, 4, "prompt is empty"},
      {prompt_of(64, 0), 1, "prompt has 64 tokens, but max_model_len is 64"},
      {prompt_of(60, 0), 5, "max_tokens 5 + prompt 60 tokens exceeds max_model_len 64"},
      {{1, 2, 50}, 4, "prompt token 50 (index 2) is outside the vocabulary [0, 50)"},
  };
  for (const auto& c : cases) {
    sampling::SamplingParams p;
    p.max_tokens = c.max_tokens;
    auto r = h.sched->add_request({c.prompt, p});
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find(c.must_contain), std::string::npos) << r.status().message();
  }
  sampling::SamplingParams bad;
  bad.top_p = 2;
  auto r = h.sched->add_request({{1, 2}, bad});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("top_p"), std::string::npos);
  EXPECT_FALSE(h.sched->has_unfinished());
}

TEST(Scheduler, UpdateRejectsInconsistentOutputsWithoutChangingState) {
  Harness h(Rig{});
  h.add(prompt_of(4, 0), 3);
  const BatchPlan& plan = h.sched->schedule();
  ASSERT_EQ(plan.num_seqs(), 1);
  StepOutput o;
  o.plan_index = 0;
  o.seq_id = plan.seqs[0].seq_id + 1;
  o.samples.push_back({7, 0.f, {}});
  EXPECT_FALSE(h.sched->update(std::vector<StepOutput>{o}).is_ok());
  EXPECT_FALSE(h.sched->update(std::vector<StepOutput>{}).is_ok());  // a logits row without output
  EXPECT_EQ(h.sched->num_computed(plan.seqs[0].seq_id), 0);
  o.seq_id = plan.seqs[0].seq_id;
  EXPECT_TRUE(h.sched->update(std::vector<StepOutput>{o}).is_ok());
  EXPECT_EQ(h.sched->num_computed(plan.seqs[0].seq_id), 4);
  EXPECT_EQ(*h.sched->output_tokens(plan.seqs[0].seq_id), std::vector<int32_t>{7});
  EXPECT_EQ(h.sched->seq_state(plan.seqs[0].seq_id), SeqState::Decoding);
}

TEST(Scheduler, NSamplesFanOutWithDistinctStreams) {
  sampling::SamplingParams p;
  p.temperature = 1.0;
  p.seed = 1234;
  p.n = 4;
  Harness h(Rig{});
  RequestId r = h.add(prompt_of(5, 0), 12, p);
  std::vector<SeqId> ids = h.sched->seq_ids(r);
  ASSERT_EQ(ids.size(), 4u);
  h.run_all();
  std::set<std::vector<int32_t>> distinct;
  for (SeqId id : ids) distinct.insert(h.tokens[id]);
  EXPECT_EQ(distinct.size(), 4u);
  // Sample 0 of the n = 4 request equals an n = 1 request with the same seed.
  Harness single(Rig{});
  p.n = 1;
  RequestId r1 = single.add(prompt_of(5, 0), 12, p);
  single.run_all();
  EXPECT_EQ(single.tokens[single.sched->seq_ids(r1).empty() ? SeqId(1) : single.sched->seq_ids(r1)[0]],
            h.tokens[ids[0]]);
}

TEST(Scheduler, SeededRequestIsBatchInvariant) {
  // One seeded, non-greedy request with penalties: alone with a big budget, versus among other requests
  // with a tiny budget (chunked prefill) and a small block pool (preemptions). Same tokens.
  sampling::SamplingParams p;
  p.temperature = 0.9;
  p.top_p = 0.95;
  p.top_k = 20;
  p.repetition_penalty = 1.2;
  p.frequency_penalty = 0.3;
  p.seed = 99;
  auto alone = [&] {
    Harness h(Rig{});
    h.add(prompt_of(17, 3), 15, p);
    h.run_all();
    return h.tokens[1];
  }();
  Rig crowded;
  crowded.max_num_batched_tokens = 5;
  crowded.num_blocks = 18;
  Harness h(crowded);
  sampling::SamplingParams other;
  other.temperature = 1.3;
  h.add(prompt_of(9, 1), 14, other);
  h.add(prompt_of(21, 2), 8, other);
  h.add(prompt_of(17, 3), 15, p);  // seq id 3
  h.add(prompt_of(4, 4), 20, other);
  h.run_all();
  EXPECT_GT(h.preempted.size(), 0u);
  EXPECT_EQ(h.tokens[3], alone);
}

TEST(Scheduler, StopStringsAndEosThroughUpdate) {
  Harness h(Rig{});
  sampling::SamplingParams p;
  p.stop = {"c"};
  p.max_tokens = 10;
  auto r = h.sched->add_request({{1, 2, 3}, p});
  ASSERT_TRUE(r.is_ok());
  sampling::SamplingParams q;
  q.max_tokens = 10;
  auto r2 = h.sched->add_request({{4, 5}, q});
  ASSERT_TRUE(r2.is_ok());
  // Hand-made outputs: seq 1 emits "a", "bc..." (stop), seq 2 emits token 9 then EOS.
  const std::vector<std::pair<int32_t, std::string>> s1 = {{10, "a"}, {11, "bcd"}};
  const std::vector<int32_t> s2 = {9, int32_t(kEos)};
  std::string text1;
  for (int step = 0; step < 2; ++step) {
    const BatchPlan& plan = h.sched->schedule();
    ASSERT_EQ(plan.num_seqs(), 2);
    std::vector<StepOutput> outs(2);
    for (int i = 0; i < 2; ++i) {
      outs[size_t(i)].plan_index = i;
      outs[size_t(i)].seq_id = plan.seqs[size_t(i)].seq_id;
    }
    outs[0].samples.push_back({s1[size_t(step)].first, 0.f, {}});
    outs[0].text.push_back(s1[size_t(step)].second);
    outs[1].samples.push_back({s2[size_t(step)], 0.f, {}});
    ASSERT_TRUE(h.sched->update(outs).is_ok());
    for (const SeqUpdate& u : h.sched->updates()) {
      if (u.seq_id == 1) text1 += u.text;
      if (step == 1) {
        EXPECT_TRUE(u.finished);
        EXPECT_EQ(u.finish_reason, FinishReason::Stop);
        EXPECT_TRUE(u.request_finished);
        if (u.seq_id == 1) {
          EXPECT_EQ(u.stop_string, "c");
        } else {
          EXPECT_EQ(u.stop_token, kEos);
        }
      }
    }
  }
  EXPECT_EQ(text1, "ab");
  EXPECT_FALSE(h.sched->has_unfinished());
}
