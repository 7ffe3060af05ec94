// Teacher-forced fidelity of a fast runner against an exact one (see fidelity_check.h).
#include "check/fidelity_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "check/solo_sequence.h"

namespace dsinfer::check {

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A token from softmax(logits) (temperature 1), by inverse CDF in double; a non-finite row takes its argmax.
int32_t sample(const float* logits, int64_t V, uint64_t& rng) {
  const float mx = *std::max_element(logits, logits + V);
  if (!std::isfinite(mx)) return int32_t(std::max_element(logits, logits + V) - logits);
  double total = 0;
  for (int64_t i = 0; i < V; ++i) total += std::exp(double(logits[i]) - double(mx));
  const double u = double(splitmix64(rng) >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (int64_t i = 0; i < V; ++i) {
    acc += std::exp(double(logits[i]) - double(mx));
    if (u < acc) return int32_t(i);
  }
  return int32_t(V - 1);
}

// Sequence i: its seed (cut to len) continued by sampling from the exact runner.
Result<std::vector<int32_t>> make_sequence(runner::ModelRunner& exact, cache::StateCache& cache,
                                           const std::vector<int32_t>& seed, int64_t len, uint64_t rng) {
  std::vector<int32_t> toks(seed.begin(), seed.begin() + std::min<int64_t>(len, int64_t(seed.size())));
  if (int64_t(toks.size()) >= len) return toks;
  const int64_t V = exact.config().vocab_size;
  SoloSequence seq(exact, cache);
  std::vector<float> logits;
  DSI_RETURN_IF_ERROR(seq.step(toks, false, logits));
  while (true) {
    toks.push_back(sample(logits.data() + logits.size() - size_t(V), V, rng));
    if (int64_t(toks.size()) >= len) return toks;
    DSI_RETURN_IF_ERROR(seq.step({&toks.back(), 1}, false, logits));
  }
}

}  // namespace

Result<std::vector<std::vector<int32_t>>> fidelity_seeds(const io::SafetensorsFile& ids) {
  const auto& ts = ids.tensors();
  std::set<size_t> idx;
  for (const auto& [name, t] : ts) {
    size_t i = 0, end = 0;
    if (std::sscanf(name.c_str(), "prompt.%zu.%zn", &i, &end) == 1 && name.substr(end) == "input_ids") idx.insert(i);
  }
  std::vector<std::vector<int32_t>> out;
  for (size_t i : idx) {
    std::vector<int32_t> s;
    for (const char* key : {"input_ids", "greedy_ids"}) {
      auto it = ts.find("prompt." + std::to_string(i) + "." + key);
      if (it == ts.end()) continue;
      const io::TensorView& t = it->second;
      if ((t.dtype != DType::I64 && t.dtype != DType::I32) || t.shape.size() != 1)
        return Status::errorf("{}: '{}' must be a 1-D I64 or I32 tensor", ids.path(), t.name);
      for (int64_t k = 0; k < t.numel(); ++k) s.push_back(int32_t(t.int_at(k)));
    }
    if (!s.empty()) out.push_back(std::move(s));
  }
  if (out.empty()) return Status::errorf("{}: no prompt.N.input_ids to seed the fidelity stream", ids.path());
  return out;
}

double kl_from_logits(const float* a, const float* b, int64_t n) {
  double ma = -INFINITY, mb = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return std::numeric_limits<double>::infinity();
    ma = std::max(ma, double(a[i]));
    mb = std::max(mb, double(b[i]));
  }
  double sa = 0, sb = 0;
  for (int64_t i = 0; i < n; ++i) {
    sa += std::exp(double(a[i]) - ma);
    sb += std::exp(double(b[i]) - mb);
  }
  const double lse_a = ma + std::log(sa), lse_b = mb + std::log(sb);
  double kl = 0;  // sum p_i (log p_i - log q_i) = sum p_i (a_i - b_i) - lse_a + lse_b
  for (int64_t i = 0; i < n; ++i) kl += std::exp(double(a[i]) - lse_a) * (double(a[i]) - double(b[i]));
  return std::max(0.0, kl - lse_a + lse_b);
}

Result<Fidelity> check_fidelity(runner::ModelRunner& exact, runner::ModelRunner& fast,
                                const std::vector<std::vector<int32_t>>& seeds, const FidelityOptions& o) {
  const int64_t V = exact.config().vocab_size, max_pos = exact.config().max_position_embeddings;
  if (fast.config().vocab_size != V) return Status::error("fidelity: the two runners have different vocabularies");
  if (o.positions < 1 || o.seq_len < 1 || o.chunk < 1 || seeds.empty())
    return Status::errorf("fidelity: positions {}, seq_len {} and chunk {} must be >= 1", o.positions, o.seq_len, o.chunk);
  if (max_pos > 0 && o.seq_len > max_pos)
    return Status::errorf("fidelity: seq_len {} exceeds the model's max_position_embeddings {}", o.seq_len, max_pos);
  DSI_ASSIGN_OR_RETURN(cache::StateCache ce, bind_single_sequence_cache(exact, o.seq_len));
  DSI_ASSIGN_OR_RETURN(cache::StateCache cf, bind_single_sequence_cache(fast, o.seq_len));
  Fidelity f;
  double sum_kl = 0;
  for (int64_t i = 0; f.positions < o.positions; ++i) {
    const int64_t len = std::min(o.seq_len, o.positions - f.positions);
    uint64_t rng = o.seed * 0x100000001B3ull + uint64_t(i);
    DSI_ASSIGN_OR_RETURN(std::vector<int32_t> toks, make_sequence(exact, ce, seeds[size_t(i) % seeds.size()], len, rng));
    SoloSequence se(exact, ce), sf(fast, cf);
    std::vector<float> le, lf;
    for (int64_t c0 = 0; c0 < int64_t(toks.size()); c0 += o.chunk) {
      const std::span<const int32_t> part(toks.data() + c0, size_t(std::min<int64_t>(o.chunk, int64_t(toks.size()) - c0)));
      DSI_RETURN_IF_ERROR(se.step(part, true, le).with_context(fmt::format("fidelity sequence {} (exact)", i)));
      DSI_RETURN_IF_ERROR(sf.step(part, true, lf).with_context(fmt::format("fidelity sequence {} (fast)", i)));
      for (size_t r = 0; r < part.size(); ++r) {
        const float *a = le.data() + r * size_t(V), *b = lf.data() + r * size_t(V);
        for (int64_t k = 0; k < V; ++k) {
          const double d = std::fabs(double(a[k]) - double(b[k]));
          f.max_logit_diff = std::isnan(d) ? INFINITY : std::max(f.max_logit_diff, d);
        }
        const double kl = kl_from_logits(a, b, V);
        sum_kl += kl;
        f.max_kl = std::max(f.max_kl, kl);
        f.top1_matches += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
        ++f.positions;
      }
    }
    ++f.sequences;
  }
  f.mean_kl = sum_kl / double(f.positions);
  return f;
}

}  // namespace dsinfer::check
