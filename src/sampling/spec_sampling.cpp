// Speculative sampling (see spec_sampling.h). target_distribution follows Sampler::sample step by step; the test
// tests/unit/test_spec_sampling.cpp checks that both agree draw for draw.
#include "sampling/spec_sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsinfer::sampling {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t argmax(const std::vector<float>& x) {
  int32_t best = 0;
  for (int32_t i = 1; i < int32_t(x.size()); ++i)
    if (x[size_t(i)] > x[size_t(best)]) best = i;
  return best;
}

// Steps 1-4 of Sampler::sample: working logits after the structured-output mask, logit_bias, min_tokens and
// penalties.
void processed_logits(const SampleInput& in, std::vector<float>& w) {
  const SamplingParams& p = *in.params;
  const size_t V = in.logits.size();
  w.resize(V);
  for (size_t i = 0; i < V; ++i) w[i] = std::isnan(in.logits[i]) ? kNegInf : in.logits[i];
  if (!in.token_bitmask.empty()) apply_token_bitmask(w, in.token_bitmask);
  for (const auto& [tok, bias] : p.logit_bias)
    if (size_t(tok) < V) w[size_t(tok)] += float(bias);
  if (int64_t(in.output_tokens.size()) < p.min_tokens) {
    for (int32_t t : p.stop_token_ids)
      if (size_t(t) < V) w[size_t(t)] = kNegInf;
    if (!p.ignore_eos && in.eos_token_id >= 0 && size_t(in.eos_token_id) < V) w[size_t(in.eos_token_id)] = kNegInf;
  }
  const bool rep = p.repetition_penalty != 1.0;
  if (!rep && p.frequency_penalty == 0.0 && p.presence_penalty == 0.0) return;
  std::vector<uint32_t> count(V, 0);
  std::vector<uint8_t> in_prompt(V, 0);
  if (rep)
    for (int32_t t : in.prompt_tokens)
      if (size_t(t) < V) in_prompt[size_t(t)] = 1;
  for (int32_t t : in.output_tokens)
    if (size_t(t) < V) ++count[size_t(t)];
  for (size_t t = 0; t < V; ++t) {
    if (!in_prompt[t] && !count[t]) continue;
    float& x = w[t];
    if (rep) x = x > 0.0f ? float(x / p.repetition_penalty) : float(x * p.repetition_penalty);
    x -= float(p.frequency_penalty * double(count[t]) + p.presence_penalty * (count[t] > 0 ? 1.0 : 0.0));
  }
}

void one_hot(size_t V, int32_t t, std::vector<double>& probs) {
  probs.assign(V, 0.0);
  probs[size_t(t)] = 1.0;
}

void logprobs_for(const SampleInput& in, LogprobsMode mode, const std::vector<double>& p, SampleResult& r) {
  if (!in.params->logprobs) return;
  if (mode == LogprobsMode::Raw) {
    std::vector<float> masked;  // as Sampler::sample: raw logprobs of a masked row describe the masked logits
    if (!in.token_bitmask.empty()) {
      masked.assign(in.logits.begin(), in.logits.end());
      apply_token_bitmask(masked, in.token_bitmask);
    }
    const std::span<const float> raw = in.token_bitmask.empty() ? in.logits : std::span<const float>(masked);
    log_softmax_top(raw, in.params->top_logprobs, r.token, &r.logprob, &r.top);
    return;
  }
  // Processed: Sampler::sample's row (kept tokens: temperature-scaled working logits, else -inf).
  std::vector<float> w;
  processed_logits(in, w);
  if (!in.params->greedy()) {
    const float inv_t = float(1.0 / in.params->temperature);
    for (size_t i = 0; i < w.size(); ++i) w[i] = p[i] > 0.0 ? w[i] * inv_t : kNegInf;
  }
  log_softmax_top(w, in.params->top_logprobs, r.token, &r.logprob, &r.top);
}

}  // namespace

void target_distribution(const SampleInput& in, std::vector<double>& probs) {
  const SamplingParams& p = *in.params;
  std::vector<float> w;
  processed_logits(in, w);
  const size_t V = w.size();
  if (p.greedy()) return one_hot(V, argmax(w), probs);
  float m = kNegInf;
  for (float x : w) m = std::max(m, x);
  if (m == kNegInf) return one_hot(V, argmax(w), probs);
  const double inv_t = 1.0 / p.temperature;
  std::vector<double> e(V, 0.0);
  std::vector<int32_t> order;
  for (size_t i = 0; i < V; ++i) {
    e[i] = std::exp((double(w[i]) - double(m)) * inv_t);
    if (e[i] > 0.0 && e[i] >= p.min_p) order.push_back(int32_t(i));
  }
  if (order.empty()) return one_hot(V, argmax(w), probs);
  auto by_prob = [&](int32_t a, int32_t b) { return e[size_t(a)] > e[size_t(b)] || (e[size_t(a)] == e[size_t(b)] && a < b); };
  if (p.top_k_enabled() && size_t(p.top_k) < order.size()) {
    std::nth_element(order.begin(), order.begin() + p.top_k, order.end(), by_prob);
    order.resize(size_t(p.top_k));
  }
  if (p.top_p < 1.0) {
    std::sort(order.begin(), order.end(), by_prob);
    double total = 0.0;
    for (int32_t t : order) total += e[size_t(t)];
    double cum = 0.0;
    size_t keep = 0;
    while (keep < order.size()) {
      cum += e[size_t(order[keep])];
      ++keep;
      if (cum >= p.top_p * total) break;
    }
    order.resize(keep);
  }
  std::sort(order.begin(), order.end());
  double total = 0.0;
  for (int32_t t : order) total += e[size_t(t)];
  probs.assign(V, 0.0);
  for (int32_t t : order) probs[size_t(t)] = e[size_t(t)] / total;
}

int32_t draw_inverse_cdf(std::span<const double> probs, double u) {
  double cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0) continue;
    last = int32_t(i);
    cum += probs[i];
    if (cum > u) return int32_t(i);
  }
  return last < 0 ? 0 : last;  // rounding only: u beyond the accumulated mass
}

int32_t draw_draft(const SampleInput& in, uint64_t anchor_index, int32_t k, std::vector<double>* q) {
  std::vector<double> local;
  std::vector<double>& probs = q ? *q : local;
  target_distribution(in, probs);
  if (in.params->greedy()) return int32_t(std::max_element(probs.begin(), probs.end()) - probs.begin());
  return draw_inverse_cdf(probs, philox_uniform(in.rng, anchor_index, kLaneDraftBase + uint32_t(k)));
}

void verify_drafts(const VerifyInput& in, Sampler& sampler, LogprobsMode mode, std::vector<SampleResult>& out) {
  out.clear();
  const size_t L = in.drafts.size(), V = in.logits.size() / (L + 1);
  std::vector<int32_t> hist(in.output_tokens.begin(), in.output_tokens.end());
  std::vector<double> p, res;
  for (size_t k = 0; k <= L; ++k) {
    SampleInput s;
    s.logits = in.logits.subspan(k * V, V);
    s.params = in.params;
    s.prompt_tokens = in.prompt_tokens;
    s.output_tokens = hist;
    s.rng = in.rng;
    s.eos_token_id = in.eos_token_id;
    if (in.row_mask) s.token_bitmask = in.row_mask(k);  // drafts[0..k) are accepted by now
    if (in.params->greedy() || k == L) {  // the Sampler's own token: greedy match, or the bonus draw
      out.push_back(sampler.sample(s));
      if (k == L || out.back().token != in.drafts[k]) return;
      hist.push_back(in.drafts[k]);
      continue;
    }
    target_distribution(s, p);
    const std::span<const double> q = in.draft_probs.subspan(k * V, V);
    const int32_t d = in.drafts[k];
    const double u = philox_uniform(in.rng, hist.size(), kLaneAccept);
    SampleResult r;
    if (q[size_t(d)] > 0.0 && u * q[size_t(d)] < p[size_t(d)]) {
      r.token = d;
      logprobs_for(s, mode, p, r);
      out.push_back(std::move(r));
      hist.push_back(d);
      continue;
    }
    res.assign(V, 0.0);
    double mass = 0.0;
    for (size_t v = 0; v < V; ++v) mass += (res[v] = std::max(0.0, p[v] - q[v]));
    if (mass > 0.0)
      for (double& x : res) x /= mass;
    r.token = draw_inverse_cdf(mass > 0.0 ? res : p, philox_uniform(in.rng, hist.size(), 0));
    logprobs_for(s, mode, p, r);
    out.push_back(std::move(r));
    return;
  }
}

}  // namespace dsinfer::sampling
