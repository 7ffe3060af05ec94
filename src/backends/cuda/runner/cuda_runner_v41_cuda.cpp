// The CUDA backend of DeepSeek-V4.1 (see cuda_runner_v41.h): creation (config, numerics and layer-subset checks,
// weights, RoPE frequencies, the Engram hash tables), state binding and the step (plan upload, forward, logits).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/runner/cuda_runner_v41.h"
#include "cuda/cuda_common.h"
#include "model/deepseek_v41.h"
#include "model/deepseek_v41_vocab.h"
#include "ops/dummy_fill/dummy_fill_cuda.h"
#include "ops/engram/engram.h"
#include "ops/rope/rope.h"

namespace dsinfer::backends {

namespace {

// The first n layers of a V4.1 config (benchmarks with dummy weights): per-layer lists cut, layer-id lists filtered.
void keep_layers(io::ModelConfig& cfg, int64_t n) {
  cfg.num_hidden_layers = n;
  cfg.layer_types.resize(size_t(n));
  cfg.mlp_layer_types.resize(size_t(n));
  cfg.compress_ratios.resize(size_t(n));
  auto cut = [n](std::vector<int64_t>& ids) { std::erase_if(ids, [n](int64_t l) { return l >= n; }); };
  auto& v = cfg.v41;
  cut(v.kv_source_layer_ids);
  cut(v.index_source_layer_ids);
  if (v.candidate_source_layer_id >= n) v.candidate_source_layer_id = -1;
  std::vector<int64_t> ids, rows;
  for (size_t e = 0; e < v.engram_layer_ids.size(); ++e)
    if (v.engram_layer_ids[e] < n) {
      ids.push_back(v.engram_layer_ids[e]);
      if (e < v.engram_num_embeddings.size()) rows.push_back(v.engram_num_embeddings[e]);
    }
  v.engram_layer_ids = ids;
  v.engram_num_embeddings = rows;
}

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

Result<std::unique_ptr<runner::ModelRunner>> create_cuda_runner_v41(const runner::RunnerOptions& opts) {
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(opts.model_dir));
  if (!cfg.is_v41()) return Status::errorf("{}: not a DeepSeek-V4.1 config", opts.model_dir);
  // Only transformers numerics have kernels. Dummy weights (benchmarks) time the same kernels under any name (the
  // official rounding points would not change the cost); a checkpoint with official numerics is refused.
  model::Numerics num = opts.numerics;
  if (num.bf16_activations) {
    if (opts.load_format != runner::LoadFormat::kDummy)
      return Status::errorf("the cuda backend runs DeepSeek-V4.1 with transformers numerics (--numerics hf or hf-noqat); "
                            "'{}' numerics are CPU-only for now", num.name);
    num = model::Numerics::hf();
    num.name = "hf (official requested; dummy weights)";
  }
  if (opts.num_layers > 0) {
    if (opts.load_format != runner::LoadFormat::kDummy) return Status::error("a layer subset needs dummy weights (a checkpoint has all its layers)");
    if (opts.num_layers > cfg.num_hidden_layers)
      return Status::errorf("{} layers requested, but the model has only {}", opts.num_layers, cfg.num_hidden_layers);
    keep_layers(cfg, opts.num_layers);
  }
  DSI_RETURN_IF_ERROR(check_roles(cfg).with_context(opts.model_dir));
  std::unique_ptr<CudaRunnerV41> r(new CudaRunnerV41(cfg, num));
  DSI_RETURN_IF_ERROR(r->init(opts));
  return std::unique_ptr<runner::ModelRunner>(std::move(r));
}

Status CudaRunnerV41::init(const runner::RunnerOptions& opts) {
  exact_ = opts.exact_gemm;
  DSI_ASSIGN_OR_RETURN(device_, cuda::query_device(0));
  DSI_CUDA_TRY(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(&stream_), cudaStreamNonBlocking));
  if (opts.load_format == runner::LoadFormat::kDummy) {
    DSI_RETURN_IF_ERROR(weights_.generate_dummy(cfg_, device_.free_bytes, device_.name, stream_));
  } else {
    // The CPU loader validates the checkpoint and the Engram vocabulary against the config; its fp32 weights are
    // uploaded as they are (the exact path) and the host copy is dropped.
    DSI_ASSIGN_OR_RETURN(std::unique_ptr<model::DeepseekV41Cpu> m, model::DeepseekV41Cpu::load(opts.model_dir, num_));
    DSI_RETURN_IF_ERROR(weights_.upload(cfg_, m->weights()));
  }
  DSI_RETURN_IF_ERROR(init_engram(opts.load_format == runner::LoadFormat::kDummy ? std::string() : opts.model_dir));
  // transformers' frequencies (the official precompute differs; official numerics are refused above)
  const std::vector<float> inv_main = ops::rope_inv_freq(cfg_.rope_main, cfg_.qk_rope_head_dim);
  const std::vector<float> inv_comp = ops::rope_inv_freq(cfg_.rope_compress, cfg_.qk_rope_head_dim);
  DSI_RETURN_IF_ERROR(inv_main_.upload(inv_main.data(), inv_main.size(), "rope inv_freq"));
  DSI_RETURN_IF_ERROR(inv_comp_.upload(inv_comp.data(), inv_comp.size(), "rope inv_freq"));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

// The Engram hash layout on the device. model_dir empty (dummy weights): the identity map over the vocabulary
// folded into the compressed size stands in for the tokenizer's normalisation.
Status CudaRunnerV41::init_engram(const std::string& model_dir) {
  const auto& v = cfg_.v41;
  if (v.engram_layer_ids.empty()) return Status::ok();
  token_map_host_.assign(size_t(cfg_.vocab_size), -1);
  if (!model_dir.empty()) {
    DSI_ASSIGN_OR_RETURN(model::EngramVocab vocab, model::build_engram_vocab(model_dir + "/tokenizer.json"));
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

CudaRunnerV41::~CudaRunnerV41() {
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

std::string CudaRunnerV41::name() const {
  return fmt::format("cuda-v4.1 ({}, {} numerics, {:.2f} GiB weights)", device_.name, num_.name,
                     double(weights_.bytes()) / double(1 << 30));
}

Status CudaRunnerV41::randomize_state(uint64_t seed) {
  const ops::cuda::DummySpec unit{ops::cuda::DummyFill::Uniform, false, 0.0f, 1.0f};
  DSI_RETURN_IF_ERROR(ops::cuda::fill_dummy_cuda(slots_.data(), slots_.bytes() / 4, unit, seed, stream_));
  DSI_RETURN_IF_ERROR(ops::cuda::fill_dummy_cuda(blocks_.data(), blocks_.bytes() / 4, unit, seed + 1, stream_));
  if (layout_.ngram_offset >= 0 && slots_.bytes() > 0) {  // the n-gram history holds compressed ids: zero is valid
    for (size_t s = 0; s < slots_.bytes() / size_t(layout_.slot_bytes); ++s)
      DSI_CUDA_TRY(cudaMemsetAsync(slots_.data() + s * size_t(layout_.slot_bytes) + size_t(layout_.ngram_offset), 0,
                                   size_t(layout_.ngram_rows) * 4, static_cast<cudaStream_t>(stream_)));
  }
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

Status CudaRunnerV41::bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) {
  max_model_len_ = max_model_len;
  if (layout.kv_elem_bytes != 4) return Status::error("cuda runner: state layout must use fp32 rows");
  if (layout.layers.size() < size_t(cfg_.num_hidden_layers)) return Status::error("cuda runner: state layout of another model");
  if (!cfg_.v41.engram_layer_ids.empty() && layout.ngram_rows < cfg_.v41.engram_max_ngram_size)
    return Status::error("cuda runner: the state layout has no Engram n-gram history (laid out for another model?)");
  layout_ = layout;
  DSI_RETURN_IF_ERROR(slots_.alloc(size_t(num_slots) * size_t(layout.slot_bytes), "state slots"));
  DSI_RETURN_IF_ERROR(blocks_.alloc(size_t(num_blocks) * size_t(layout.block_bytes), "state blocks"));
  // A fresh slot's n-gram history is never read before it is written (positions < 0 are -1), but keep it defined.
  DSI_CUDA_TRY(cudaMemset(slots_.data(), 0, slots_.bytes()));
  hash_.slots = slots_.as<float>();
  hash_.slot_stride = layout.slot_bytes / 4;
  hash_.ngram_offset = layout.ngram_offset / 4;
  hash_.ngram_rows = layout.ngram_rows;
  return Status::ok();
}

Status CudaRunnerV41::step(const scheduler::BatchPlan& plan, std::vector<float>& logits) {
  if (!slots_.data()) return Status::error("cuda runner: bind_state was not called");
  timer_.begin_step();
  const int64_t T = plan.num_tokens(), R = plan.num_logits(), V = cfg_.vocab_size;
  if (T == 0) return Status::ok();
  if (!token_map_host_.empty())
    for (size_t i = 0; i < plan.token_ids.size(); ++i) {
      const int32_t t = plan.token_ids[i];
      if (t >= 0 && t < V && token_map_host_[size_t(t)] < 0)
        return Status::errorf("token {} of the step: id {} is not in the tokenizer's Engram vocabulary", i, t);
    }
  DSI_ASSIGN_OR_RETURN(const StepPlanLayout layout, layout_step_plan(plan, layout_, V, false, max_model_len_));
  max_pos_ = layout.max_pos;
  DSI_RETURN_IF_ERROR(ensure_scratch(T, std::max<int64_t>(R, 1), layout.max_pos));
  cudaStream_t cs = static_cast<cudaStream_t>(stream_);
  DSI_RETURN_IF_ERROR(plan_.upload(plan, layout, stream_));
  DSI_RETURN_IF_ERROR(run_forward(step_device(layout, plan_.device()), logits_rows(layout, plan_.device()), R));
  logits.resize(size_t(R) * size_t(V));
  if (R > 0) DSI_CUDA_TRY(cudaMemcpyAsync(logits.data(), s_.logits.data(), size_t(R * V) * 4, cudaMemcpyDeviceToHost, cs));
  DSI_CUDA_TRY(cudaStreamSynchronize(cs));
  return Status::ok();
}

}  // namespace dsinfer::backends
