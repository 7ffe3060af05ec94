// The DeepSeek-V4 forward pass, CPU reference (fp32 storage, fp32/fp64 math): the specification every other
// backend is checked against. One step runs many sequences, each with any number of new tokens (prefill chunk,
// one decode token, or 1 + k verify tokens), on top of per-sequence incremental state, so any split of a prompt
// into chunks followed by token-by-token decoding gives the same logits as one full forward.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/config.h"
#include "cache/state_layout.h"
#include "model/numerics.h"
#include "model/state_pool.h"
#include "model/weights.h"
#include "ops/state_view.h"

namespace dsinfer::ops {
struct RouterParams;
}

namespace dsinfer::model {

// One sequence's share of a step: tokens at positions [start_pos, start_pos + tokens.size()), its slot, and a
// block table covering at least start_pos + tokens.size() tokens. The state of positions < start_pos must be
// the one this forward wrote (any earlier split of the sequence into steps gives the same state).
struct SeqChunk {
  int32_t slot = -1;
  int64_t start_pos = 0;
  std::span<const int32_t> block_table;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token (else only the last one)
};

// A step's tokens in chunk order, token t: id, absolute position, index of its chunk (both CPU forwards' steps).
struct StepTokens {
  const StatePool* state = nullptr;
  std::span<const SeqChunk> chunks;
  std::vector<int32_t> tok;
  std::vector<int64_t> pos;
  std::vector<size_t> seq;
  int64_t T = 0;
};
// Fills `out` from the chunks after the checks every CPU forward makes: a state pool with an fp32 layout of the
// model's layers, each chunk's slot, start position and block table, and every id inside the vocabulary.
Status flatten_step(const io::ModelConfig& cfg, const StatePool& state, std::span<const SeqChunk> chunks,
                    StepTokens& out);

// Expert parallelism of the reference forward (backends/cpu/cpu_parallel_runner.h): this rank computes the routed
// experts [lo, hi) of every MoE layer (and the shared expert when `shared`), and `reduce` turns its partial MoE
// output [T, D] into the sum over every rank (a collective: every rank calls it once per MoE layer, in order).
// The default (hi < 0, no reduce) is one rank computing everything.
// With `exchange` set, moe() routes its tokens and hands every (token, top-k slot) pair to it instead:
// exchange(layer, x [T, D], idx [T, k], wt [T, k], compute, y) returns y [T * k, D], pair (t, j)'s expert output
// (compute(e, w, x, y) on the rank owning expert e: what the combine adds for that pair); moe() then combines them
// in the one-rank order (the shared expert computed here) with no reduction after. DP attention: this rank's tokens
// are its own and the pairs travel to the experts' ranks (parallel::dispatch_combine; called with T = 0 on a rank
// without tokens, a forward of no chunks). EP and TP under --batch-invariant: every rank has every token and the
// pair outputs are gathered exactly (parallel::gather_pair_outputs), so N ranks give one rank's bits.
using ExpertCompute = std::function<void(int32_t expert, float weight, const float* x, float* y)>;
struct ExpertShard {
  int64_t lo = 0, hi = -1;
  bool shared = true;
  std::function<Status(std::vector<float>& partial)> reduce;
  std::function<Status(int64_t layer, std::span<const float> x, std::span<const int32_t> idx,
                       std::span<const float> wt, const ExpertCompute& compute, std::vector<float>& y)> exchange;
};

// Tensor-parallel attention (backends/cpu/cpu_parallel_runner.h, docs/multi_gpu.md "TP attention"): this rank
// computes the query heads [lo, hi) (their wq_b rows, attention and wo_a / wo_b columns). The shared K=V latent,
// compressors and indexer (the state) are computed on every rank. A rank may hold no heads (more ranks than heads).
// The default (hi < 0) is one rank with every head. Two ways to finish the output projection (collectives: every
// rank calls one once per layer):
// - partial sums (`exact` false): the rank multiplies its heads' wo_a columns and its groups' wo_b columns, and
//   `reduce` sums the [T, D] partials over the ranks (each rank rounds its partial: close to one rank, not equal);
// - exact (`exact` true, --batch-invariant): the rank writes its part of the projection's input into a buffer that
//   is zero elsewhere and `gather` sums that buffer over the ranks (one rank's value plus zeros: exact), then runs
//   the reduction that crosses ranks in the one rank's order. The part is its groups' wo_a outputs [T, G * r] when
//   every rank holds whole output groups (`whole_groups`), else its heads' attention outputs [T, H * hd] (a group
//   split between ranks: every rank then runs all of wo_a as well as wo_b).
struct HeadShard {
  int64_t lo = 0, hi = -1;
  bool exact = false;
  bool whole_groups = true;
  std::function<Status(std::vector<float>& partial)> reduce;
  std::function<Status(std::vector<float>& slices)> gather;
};

// Observes named intermediates ("layer.attn.q", ...) for CPU/GPU diffing. rows x cols floats.
using TapFn = std::function<void(std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols)>;

class DeepseekV4Cpu {
 public:
  DeepseekV4Cpu(io::ModelConfig cfg, Weights w, Numerics num);
  // Reads model_dir/config.json and the safetensors checkpoint (single file or sharded).
  static Result<std::unique_ptr<DeepseekV4Cpu>> load(const std::string& model_dir, const Numerics& num);

  const io::ModelConfig& config() const { return cfg_; }
  const Numerics& numerics() const { return num_; }
  const Weights& weights() const { return w_; }
  void set_tap(TapFn tap) { tap_ = std::move(tap); }
  Status set_expert_shard(ExpertShard shard) {
    shard_ = std::move(shard);
    return Status::ok();
  }
  void set_head_shard(HeadShard heads) { heads_ = std::move(heads); }

  // Runs one step. `logits` receives [rows, vocab] in chunk order: every token of an all_logits chunk, else its
  // last token. Fails (changing no state) on an out-of-range token id, a missing slot or a short block table.
  Status forward(const StatePool& state, std::span<const SeqChunk> chunks, std::vector<float>& logits);

 private:
  struct Step;
  void group_outputs(const LayerWeights& L, const float* o, int64_t T, int64_t h0, int64_t h1, int64_t base,
                     int64_t width, float* mid) const;
  Status output_projection(const LayerWeights& L, const std::vector<float>& o, int64_t T, int64_t h0, int64_t h1,
                           std::vector<float>& out) const;
  Status attention(int64_t l, const Step& s, const std::vector<float>& x, std::vector<float>& out) const;
  ops::RouterParams router_params(int64_t l) const;
  Status moe(int64_t l, const Step& s, const std::vector<float>& x, std::vector<float>& out) const;
  Status moe_exchange(int64_t l, const Step& s, const std::vector<float>& x, std::vector<float>& out) const;
  void tap(std::string_view name, int64_t layer, const std::vector<float>& v, int64_t rows) const;

  io::ModelConfig cfg_;
  Weights w_;
  Numerics num_;
  std::vector<float> inv_freq_main_, inv_freq_compress_;
  TapFn tap_;
  ExpertShard shard_;
  HeadShard heads_;
};

}  // namespace dsinfer::model
