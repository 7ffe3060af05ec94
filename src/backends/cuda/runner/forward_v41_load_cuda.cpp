// CudaForwardV41 (forward_v41.h): loading (the family's role checks, weights, RoPE frequencies, the Engram hash
// tables), its checks of the state layout and of a step's token ids, and the numerics it refuses.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/runner/cuda_config.h"
#include "backends/cuda/runner/forward_v41.h"
#include "cuda/cuda_common.h"
#include "model/deepseek_v41_vocab.h"
#include "ops/engram/engram.h"

namespace dsinfer::backends {

namespace {

// Every layer that attends to compressed entries needs a KV source and an index source at or before it.
Status check_roles(const io::ModelConfig& cfg) {
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    if (cfg.ratio(l) == 0) continue;
    if (cfg.kv_source_of(l) < 0 || cfg.index_source_of(l) < 0)
      return Status::errorf("layer {} (compress ratio {}) has no KV source or index source at or before it", l, cfg.ratio(l));
    if (cfg.ratio(cfg.kv_source_of(l)) != cfg.ratio(l))
      return Status::errorf("layer {}: compress ratio {} differs from its KV source's ({})", l, cfg.ratio(l),
                            cfg.ratio(cfg.kv_source_of(l)));
  }
  return Status::ok();
}

}  // namespace

Status CudaForwardV41::load(const runner::RunnerOptions& opts, ExpertSlots slots) {
  const char* dump = std::getenv("DSINFER_V41_DUMP");  // the op dump (forward_v41.h dump); read here only
  dump_path_ = dump ? dump : "";
  if (core_.eplb_.on)
    return Status::error("--eplb: DeepSeek-V4.1 has no expert-slot reloading yet; run it without --eplb");
  if (const std::string why = cuda_numerics_refusal(cfg_, num_, ep_size_); !why.empty()) return Status::error(why);
  DSI_RETURN_IF_ERROR(check_roles(cfg_).with_context(opts.model_dir));
  using model::EngramPlacement;
  if (opts.engram_placement == EngramPlacement::kSharded)
    return Status::error("--engram-placement sharded: the CUDA runner has no device exchange of Engram rows yet "
                         "(the cpu backend's ranks do; use host or device)");
  const bool on_host = opts.engram_placement == EngramPlacement::kHost;
  if (opts.load_format == runner::LoadFormat::kDummy) {
    DSI_RETURN_IF_ERROR(weights_.generate_dummy(cfg_, device_.free_bytes, device_.name, stream_, slots, on_host));
  } else {
    // The checkpoint in its storage formats, validated as the CPU loader validates it, streamed from the mapping.
    DSI_RETURN_IF_ERROR(weights_.load_checkpoint(cfg_, opts.model_dir, slots, on_host));
  }
  fetch_.clear();
  if (on_host) {  // the host placement's side streams, one per Engram layer (created here: never inside a capture)
    fetch_.resize(cfg_.v41.engram_layer_ids.size());
    for (auto& f : fetch_) DSI_RETURN_IF_ERROR(f.create());
  }
  DSI_RETURN_IF_ERROR(init_engram(opts.load_format == runner::LoadFormat::kDummy ? std::string() : opts.model_dir));
  // transformers' frequencies, or the official precompute_freqs_cis (model::v41::Num::inv_freq decides)
  const model::v41::Num num = model::v41::Num::from(num_);
  const std::vector<float> inv_main = num.inv_freq(cfg_.rope_main, cfg_.qk_rope_head_dim);
  const std::vector<float> inv_comp = num.inv_freq(cfg_.rope_compress, cfg_.qk_rope_head_dim);
  DSI_RETURN_IF_ERROR(inv_main_.upload(inv_main.data(), inv_main.size(), "rope inv_freq"));
  DSI_RETURN_IF_ERROR(inv_comp_.upload(inv_comp.data(), inv_comp.size(), "rope inv_freq"));
  return Status::ok();
}

Result<int32_t> CudaForwardV41::reload_expert_slots(int64_t l, const std::vector<int32_t>& slots) {
  (void)slots;
  return Status::errorf("eplb: layer {}: DeepSeek-V4.1 has no expert-slot reloading yet", l);
}

// The Engram hash layout on the device. model_dir empty (dummy weights): the identity map over the vocabulary
// folded into the compressed size stands in for the tokenizer's normalisation.
Status CudaForwardV41::init_engram(const std::string& model_dir) {
  const auto& v = cfg_.v41;
  if (v.engram_layer_ids.empty()) return Status::ok();
  token_map_host_.assign(size_t(cfg_.vocab_size), -1);
  if (!model_dir.empty()) {
    DSI_ASSIGN_OR_RETURN(model::EngramVocab vocab, model::load_engram_vocab(cfg_, model_dir));
    for (size_t i = 0; i < token_map_host_.size() && i < vocab.token_map.size(); ++i) token_map_host_[i] = int32_t(vocab.token_map[i]);
  } else {
    for (size_t i = 0; i < token_map_host_.size(); ++i) token_map_host_[i] = int32_t(int64_t(i) % v.engram_compressed_vocab_size);
  }
  const int64_t pad = v.engram_pad_id < cfg_.vocab_size ? token_map_host_[size_t(v.engram_pad_id)] : 0;
  const ops::EngramHashLayout L = ops::make_engram_hash_layout(v.engram_layer_ids, v.engram_max_ngram_size, v.engram_n_heads,
                                                               v.engram_vocab_size, v.engram_compressed_vocab_size, std::max<int64_t>(pad, 0));
  std::vector<int64_t> mult, primes, offsets;
  for (size_t e = 0; e < L.primes.size(); ++e) {
    mult.insert(mult.end(), L.multipliers[e].begin(), L.multipliers[e].end());
    primes.insert(primes.end(), L.primes[e].begin(), L.primes[e].end());
    offsets.insert(offsets.end(), L.offsets[e].begin(), L.offsets[e].end());
    int64_t rows = 0;
    for (int64_t p : L.primes[e]) rows += p;
    const ops::cuda::EngramTableDevice& tb = weights_.layer(v.engram_layer_ids[e]).engram_table;
    if (rows > tb.rows && !tb.wrap)
      return Status::errorf("engram layer {} hashes into {} rows but its table has {}", v.engram_layer_ids[e], rows, tb.rows);
  }
  DSI_RETURN_IF_ERROR(eh_mult_.upload(mult.data(), mult.size(), "engram multipliers"));
  DSI_RETURN_IF_ERROR(eh_primes_.upload(primes.data(), primes.size(), "engram primes"));
  DSI_RETURN_IF_ERROR(eh_offsets_.upload(offsets.data(), offsets.size(), "engram offsets"));
  DSI_RETURN_IF_ERROR(token_map_.upload(token_map_host_.data(), token_map_host_.size(), "engram token map"));
  hash_.max_ngram = L.max_ngram;
  hash_.heads = L.heads;
  hash_.layers = int64_t(L.primes.size());
  hash_.pad_id = L.pad_id;
  hash_.multipliers = eh_mult_.data();
  hash_.primes = eh_primes_.data();
  hash_.offsets = eh_offsets_.data();
  hash_.token_map = token_map_.data();
  return Status::ok();
}

// The n-gram history holds compressed ids: random floats there would be invalid ids (zero is valid).
Status CudaForwardV41::reset_invalid_state() {
  if (layout_.ngram_offset < 0 || slots_.bytes() == 0) return Status::ok();
  for (size_t s = 0; s < slots_.bytes() / size_t(layout_.slot_bytes); ++s)
    DSI_CUDA_TRY(cudaMemsetAsync(slots_.data() + s * size_t(layout_.slot_bytes) + size_t(layout_.ngram_offset), 0,
                                 size_t(layout_.ngram_rows) * 4, static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

Status CudaForwardV41::bind_state() {
  if (layout_.layers.size() < size_t(cfg_.num_hidden_layers)) return Status::error("cuda runner: state layout of another model");
  if (!cfg_.v41.engram_layer_ids.empty() && layout_.ngram_rows < cfg_.v41.engram_max_ngram_size)
    return Status::error("cuda runner: the state layout has no Engram n-gram history (laid out for another model?)");
  // A fresh slot's n-gram history is never read before it is written (positions < 0 are -1), but keep it defined.
  DSI_CUDA_TRY(cudaMemset(slots_.data(), 0, slots_.bytes()));
  hash_.slots = slots_.as<float>();
  hash_.slot_stride = layout_.slot_bytes / 4;
  hash_.ngram_offset = layout_.ngram_offset / 4;
  hash_.ngram_rows = layout_.ngram_rows;
  return Status::ok();
}

int32_t CudaForwardV41::padding_token() const {
  for (size_t t = 0; t < token_map_host_.size(); ++t)
    if (token_map_host_[t] >= 0) return int32_t(t);
  return 0;
}

Status CudaForwardV41::check_plan(const scheduler::BatchPlan& plan) const {
  if (token_map_host_.empty()) return Status::ok();
  const int64_t V = cfg_.vocab_size;
  for (size_t i = 0; i < plan.token_ids.size(); ++i) {
    const int32_t t = plan.token_ids[i];
    if (t >= 0 && t < V && token_map_host_[size_t(t)] < 0)
      return Status::errorf("token {} of the step: id {} is not in the tokenizer's Engram vocabulary", i, t);
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
