// The DeepSeek-V4.1 forward pass, CPU reference (research/dsv41-architecture.md §2): same step interface and
// per-sequence state discipline as DeepseekV4Cpu (model/deepseek_v4.h) -- stateless work over all tokens of a
// step, the stateful part (window rings, KV-source compressors, indexers, sparse attention, Engram n-gram
// history) token by token in sequence order -- so any chunking, batching or preemption gives the same logits as
// one full forward. What differs from V4: CSA2 (KV / index / candidate sources shared across layers), Engram
// before layers, the delayed-`pre` mHC with no hc_head, the MoE's second bias and renorm epsilon, no per-head q
// norm, and FP8/FP4 QAT quantizers on the stored state.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v41_numerics.h"
#include "model/deepseek_v41_vocab.h"
#include "model/engram_rows.h"
#include "model/numerics.h"
#include "model/weights_v41.h"
#include "ops/engram/engram.h"

namespace dsinfer::model {

class DeepseekV41Cpu {
 public:
  DeepseekV41Cpu(io::ModelConfig cfg, WeightsV41 w, Numerics num, EngramVocab vocab);
  // Reads model_dir/config.json, the safetensors checkpoint and (with Engram layers) model_dir/tokenizer.json.
  // placement kHost keeps the Engram tables in their checkpoint format in host memory (model/engram_rows.h);
  // kSharded loads them whole, for set_engram_shard.
  static Result<std::unique_ptr<DeepseekV41Cpu>> load(const std::string& model_dir, const Numerics& num,
                                                      EngramPlacement placement = EngramPlacement::kDevice);

  const io::ModelConfig& config() const { return cfg_; }
  const Numerics& numerics() const { return numerics_; }
  const WeightsV41& weights() const { return w_; }
  const ops::EngramHashLayout& engram_layout() const { return hash_; }
  void set_tap(TapFn tap) { tap_ = std::move(tap); }
  // Several ranks: this one keeps 1/world of every Engram table's rows and gathers each layer's rows through
  // shard.gather (a collective: every rank runs every step, parallel/engram_exchange.h).
  Status set_engram_shard(EngramShard shard) { return engram_rows_->shard(std::move(shard)); }
  const EngramRows& engram_rows() const { return *engram_rows_; }
  // Expert parallelism over several ranks (model::ExpertShard: the routed experts [lo, hi), the shared expert when
  // `shared`, `reduce` summing the partial MoE outputs, official numerics rounding to bf16 after the sum; or
  // `exchange`, the pair outputs combined here in the one-rank order: DP attention, and EP / TP under
  // --batch-invariant).
  Status set_expert_shard(ExpertShard shard) {
    shard_ = std::move(shard);
    return Status::ok();
  }
  // Tensor-parallel attention (model::HeadShard): this rank's query heads. V4.1 always finishes the output
  // projection the exact way (`gather`, whatever `exact` says): its official numerics round wo_b's output to bf16,
  // so partial sums would be rounded once per rank.
  void set_head_shard(HeadShard heads) { heads_ = std::move(heads); }

  // Same contract as DeepseekV4Cpu::forward (the state pool must be laid out for this config).
  Status forward(const StatePool& state, std::span<const SeqChunk> chunks, std::vector<float>& logits);

  struct Step;  // one step's tokens and the per-token results shared across layers (deepseek_v41.cpp)

 private:
  Status begin_step(const StatePool& state, std::span<const SeqChunk> chunks, Step& s) const;
  void engram_hashes(Step& s) const;
  Status engram(int64_t l, const Step& s, std::vector<float>& X) const;
  Status attention(int64_t l, Step& s, const std::vector<float>& x, std::vector<float>& out) const;
  Status output_projection(int64_t l, const std::vector<float>& o, int64_t T, std::vector<float>& out) const;
  struct IndexQueries;  // an index source's queries and head weights for the step (deepseek_v41_attention.cpp)
  void index_queries(int64_t l, const Step& s, const std::vector<float>& x, const std::vector<float>& cq, IndexQueries& q) const;
  void index_select(int64_t l, Step& s, int64_t t, const IndexQueries& q) const;
  void emit_entry(int64_t l, const Step& s, int64_t t, const float* ckv, const float* cg) const;
  Status moe(int64_t l, const Step& s, const std::vector<float>& x, std::vector<float>& out) const;
  void combine(int64_t l, const float* x, const int32_t* idx, const float* wt, const float* y, float* out) const;
  void tap(std::string_view name, int64_t layer, const std::vector<float>& v, int64_t rows) const;

  io::ModelConfig cfg_;
  WeightsV41 w_;
  Numerics numerics_;
  v41::Num num_;
  EngramVocab vocab_;
  ops::EngramHashLayout hash_;
  std::unique_ptr<EngramRows> engram_rows_;  // the tables, wherever they are placed
  std::vector<float> inv_freq_main_, inv_freq_compress_;
  TapFn tap_;
  ExpertShard shard_;
  HeadShard heads_;
};

}  // namespace dsinfer::model
