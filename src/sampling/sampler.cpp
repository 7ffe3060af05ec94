// Reference CPU sampler (see sampler.h for the processing order and tie rules). Clarity over speed: full
// softmax in double, explicit masks; scratch buffers are reused so a call does not allocate in steady state.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsinfer::sampling {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr uint32_t kInPrompt = 0x80000000u;  // counts_ high bit: token occurs in the prompt

// (value desc, id asc): the one ordering used for argmax, top-k, top-p and top logprobs.
inline bool better(float va, int32_t a, float vb, int32_t b) { return va > vb || (va == vb && a < b); }

int32_t argmax(std::span<const float> x) {
  int32_t best = 0;
  for (int32_t i = 1; i < int32_t(x.size()); ++i)
    if (x[size_t(i)] > x[size_t(best)]) best = i;  // strict: ties keep the lower id
  return best;
}

}  // namespace

void TokenBitmask::reset(int32_t rows, int64_t vocab) {
  words_per_row = bitmask_words(vocab);
  words.resize(size_t(rows) * size_t(words_per_row));
  active.assign(size_t(rows), 0);
}

bool TokenBitmask::any_active() const {
  return std::any_of(active.begin(), active.end(), [](uint8_t a) { return a != 0; });
}

std::span<const int32_t> TokenBitmask::row_if_active(int32_t r) const {
  if (r < 0 || r >= rows() || !active[size_t(r)]) return {};
  return {words.data() + size_t(r) * size_t(words_per_row), size_t(words_per_row)};
}

void apply_token_bitmask(std::span<float> logits, std::span<const int32_t> mask) {
  const size_t n = logits.size();
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = w < mask.size() ? uint32_t(mask[w]) : 0u;
    if (bits == 0xffffffffu) continue;
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t i = w * 32; i < end; ++i)
      if (!((bits >> (i - w * 32)) & 1u)) logits[i] = kNegInf;
  }
}

void log_softmax_top(std::span<const float> logits, int32_t n, int32_t token, float* token_logprob,
                     std::vector<TokenLogprob>* top) {
  auto val = [&](size_t i) { float v = logits[i]; return std::isnan(v) ? kNegInf : v; };
  float m = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) m = std::max(m, val(i));
  double sum = 0.0;
  if (m != kNegInf)
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(double(val(i)) - double(m));
  // All -inf: every logprob is -inf (no distribution to speak of).
  double log_z = sum > 0.0 ? double(m) + std::log(sum) : std::numeric_limits<double>::infinity();
  auto lp = [&](size_t i) { return float(double(val(i)) - log_z); };
  if (token_logprob && token >= 0) *token_logprob = lp(size_t(token));
  if (!top) return;
  top->clear();
  if (n <= 0) return;
  // Keep a small sorted list: O(V * n) worst case, O(V) typical; n <= 20.
  for (size_t i = 0; i < logits.size(); ++i) {
    float v = val(i);
    if (int32_t(top->size()) == n && !better(v, int32_t(i), top->back().logprob, top->back().token)) continue;
    TokenLogprob e{int32_t(i), v};
    auto pos = std::find_if(top->begin(), top->end(),
                            [&](const TokenLogprob& o) { return better(e.logprob, e.token, o.logprob, o.token); });
    top->insert(pos, e);
    if (int32_t(top->size()) > n) top->pop_back();
  }
  for (auto& e : *top) e.logprob = lp(size_t(e.token));
}

// Penalties (vLLM semantics): repetition over prompt + output, dividing positive logits and multiplying
// negative ones; frequency (x count) and presence (x [count > 0]) over the output only.
void Sampler::apply_penalties(const SamplingParams& p, const SampleInput& in) {
  const size_t vocab = work_.size();
  const bool rep = p.repetition_penalty != 1.0;
  if (rep || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) {
    counts_.resize(vocab, 0);
    touched_.clear();
    auto touch = [&](int32_t t) { if (counts_[size_t(t)] == 0) touched_.push_back(t); };
    if (rep)
      for (int32_t t : in.prompt_tokens)
        if (size_t(t) < vocab) { touch(t); counts_[size_t(t)] |= kInPrompt; }
    for (int32_t t : in.output_tokens)
      if (size_t(t) < vocab) { touch(t); counts_[size_t(t)] += 1; }
    for (int32_t t : touched_) {
      uint32_t c = counts_[size_t(t)] & ~kInPrompt;
      float& x = work_[size_t(t)];
      if (rep) x = x > 0.0f ? float(x / p.repetition_penalty) : float(x * p.repetition_penalty);
      x -= float(p.frequency_penalty * double(c) + p.presence_penalty * (c > 0 ? 1.0 : 0.0));
      counts_[size_t(t)] = 0;  // leave the scratch zeroed for the next call
    }
  }
}

SampleResult Sampler::sample(const SampleInput& in) {
  const SamplingParams& p = *in.params;
  const size_t vocab = in.logits.size();
  SampleResult res;

  // 1. Working copy; NaN -> -inf so comparisons below are total; then the structured-output mask.
  work_.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) work_[i] = std::isnan(in.logits[i]) ? kNegInf : in.logits[i];
  std::span<const float> raw = in.logits;
  if (!in.token_bitmask.empty()) {
    apply_token_bitmask(work_, in.token_bitmask);
    if (p.logprobs && mode_ == LogprobsMode::Raw) {
      masked_.assign(in.logits.begin(), in.logits.end());
      apply_token_bitmask(masked_, in.token_bitmask);
      raw = masked_;
    }
  }

  // 2. logit_bias (ids were validated against the vocabulary at admission; out-of-range ones are skipped).
  for (const auto& [tok, bias] : p.logit_bias)
    if (size_t(tok) < vocab) work_[size_t(tok)] += float(bias);

  // 3. min_tokens: forbid the tokens that would end the sequence before it is long enough.
  if (int64_t(in.output_tokens.size()) < p.min_tokens) {
    for (int32_t t : p.stop_token_ids)
      if (size_t(t) < vocab) work_[size_t(t)] = kNegInf;
    if (!p.ignore_eos && in.eos_token_id >= 0 && size_t(in.eos_token_id) < vocab)
      work_[size_t(in.eos_token_id)] = kNegInf;
  }

  // 4. Penalties.
  apply_penalties(p, in);

  if (p.greedy()) {
    res.token = argmax(work_);
  } else {
    // 5. Temperature, then probabilities relative to the max (unnormalised, max = 1).
    const double inv_t = 1.0 / p.temperature;
    float m = kNegInf;
    for (float x : work_) m = std::max(m, x);
    probs_.assign(vocab, 0.0);
    order_.clear();
    if (m != kNegInf) {
      for (size_t i = 0; i < vocab; ++i) {
        double e = std::exp((double(work_[i]) - double(m)) * inv_t);
        probs_[i] = e;
        // 6. min_p: p_i >= min_p * p_max  <=>  e_i >= min_p, since e_max = 1.
        if (e > 0.0 && e >= p.min_p) order_.push_back(int32_t(i));
      }
    }
    if (order_.empty()) {
      res.token = argmax(work_);  // everything masked: fall back to the deterministic argmax
    } else {
      auto by_prob = [&](int32_t a, int32_t b) {
        return probs_[size_t(a)] > probs_[size_t(b)] || (probs_[size_t(a)] == probs_[size_t(b)] && a < b);
      };
      // 7. top_k: exactly k survivors under the (prob desc, id asc) order.
      if (p.top_k_enabled() && size_t(p.top_k) < order_.size()) {
        std::nth_element(order_.begin(), order_.begin() + p.top_k, order_.end(), by_prob);
        order_.resize(size_t(p.top_k));
      }
      // 8. top_p over the renormalised survivors: shortest prefix (prob desc) with mass >= top_p.
      if (p.top_p < 1.0) {
        std::sort(order_.begin(), order_.end(), by_prob);
        double total = 0.0;
        for (int32_t t : order_) total += probs_[size_t(t)];
        double cum = 0.0;
        size_t keep = 0;
        while (keep < order_.size()) {
          cum += probs_[size_t(order_[keep])];
          ++keep;
          if (cum >= p.top_p * total) break;
        }
        order_.resize(keep);
      }
      // 9. Inverse-CDF draw over survivors in ascending id order.
      std::sort(order_.begin(), order_.end());
      double total = 0.0;
      for (int32_t t : order_) total += probs_[size_t(t)];
      const double target = philox_uniform(in.rng, uint64_t(in.output_tokens.size())) * total;
      double cum = 0.0;
      res.token = order_.back();  // guards the (rounding-only) case where cum never exceeds target
      for (int32_t t : order_) {
        cum += probs_[size_t(t)];
        if (cum > target) { res.token = t; break; }
      }
    }
  }

  if (p.logprobs) {
    const int32_t n = p.top_logprobs;
    if (mode_ == LogprobsMode::Raw) {
      log_softmax_top(raw, n, res.token, &res.logprob, &res.top);
    } else {
      // Processed: the sampled-from distribution, expressed as logits (masked = -inf).
      if (!p.greedy()) {
        const float inv_t = float(1.0 / p.temperature);
        std::vector<float>& row = work_;  // reuse: work_ is not needed any more
        std::vector<uint8_t> kept(vocab, 0);
        for (int32_t t : order_) kept[size_t(t)] = 1;
        for (size_t i = 0; i < vocab; ++i) row[i] = kept[i] ? row[i] * inv_t : kNegInf;
      }
      log_softmax_top(work_, n, res.token, &res.logprob, &res.top);
    }
  }
  return res;
}

}  // namespace dsinfer::sampling
