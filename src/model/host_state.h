// Host memory for the CPU backend's per-sequence state, laid out and accounted by a cache::StateCache
// (fp32 rows). SoloSequence runs one sequence outside the scheduler (check-reference, tests): it holds a slot,
// tracks the position and grows the block table before each step.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "cache/state_cache.h"
#include "core/status.h"
#include "model/deepseek_v4.h"

namespace dsinfer::model {

class HostState {
 public:
  // Room for `num_seqs` sequences of up to `max_len` tokens each.
  static Result<std::unique_ptr<HostState>> create(const io::ModelConfig& cfg, int32_t num_seqs, int64_t max_len);
  static Result<std::unique_ptr<HostState>> create(const io::ModelConfig& cfg, const cache::StateCacheConfig& cc);
  cache::StateCache& cache() { return cache_; }
  StatePool pool() { return {&cache_.layout(), slots_.data(), blocks_.data()}; }

 private:
  explicit HostState(cache::StateCache c) : cache_(std::move(c)) {}
  cache::StateCache cache_;
  std::vector<float> slots_, blocks_;
};

class SoloSequence {
 public:
  explicit SoloSequence(HostState& st) : st_(&st) {}
  SoloSequence(const SoloSequence&) = delete;
  SoloSequence& operator=(const SoloSequence&) = delete;
  ~SoloSequence();

  // The chunk for the next `tokens` (allocating the slot and blocks it needs); call advance() after the
  // forward that consumed it.
  Result<SeqChunk> next_chunk(std::span<const int32_t> tokens, bool all_logits);
  void advance(int64_t n) { pos_ += n; }
  // next_chunk + forward + advance.
  Status step(DeepseekV4Cpu& m, std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits);
  int64_t pos() const { return pos_; }

 private:
  HostState* st_;
  cache::SlotId slot_ = -1;
  int64_t pos_ = 0;
};

}  // namespace dsinfer::model
