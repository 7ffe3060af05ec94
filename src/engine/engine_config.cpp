// EngineOptions -> EngineConfig (see engine_config.h).
#include "engine/engine_config.h"

#include <algorithm>
#include <filesystem>

#include "core/env_switch.h"

namespace dsinfer::engine {

namespace {

// The options checked without a model; every message names the option as the public API spells it.
Status check_options(const EngineOptions& o) {
  if (o.max_num_seqs < 1) return Status::errorf("max_num_seqs must be >= 1, found {}", o.max_num_seqs);
  if (o.max_num_batched_tokens < 1)
    return Status::errorf("max_num_batched_tokens must be >= 1, found {}", o.max_num_batched_tokens);
  if (o.max_model_len < 0) return Status::errorf("max_model_len must be >= 0 (0 = the model's), found {}", o.max_model_len);
  if (!(o.state_memory_gb >= 0)) return Status::errorf("state_memory_gb must be >= 0, found {}", o.state_memory_gb);
  if (o.sampling != "device" && o.sampling != "host")
    return Status::errorf("sampling must be 'device' or 'host', found '{}'", o.sampling);
  if (o.async_scheduling != "on" && o.async_scheduling != "off")
    return Status::errorf("async_scheduling must be 'on' or 'off', found '{}'", o.async_scheduling);
  if (o.graph_warmup != "on" && o.graph_warmup != "off")
    return Status::errorf("graph_warmup must be 'on' or 'off', found '{}'", o.graph_warmup);
  DSI_RETURN_IF_ERROR(model::parse_engram_placement(o.engram_placement).status());
  if (o.state_format != "auto" && o.state_format != "fp32")
    return Status::errorf("state_format must be 'auto' or 'fp32', found '{}'", o.state_format);
  return Status::ok();
}

}  // namespace

Result<runner::RunnerOptions> resolve_runner_options(const EngineOptions& o) {
  DSI_RETURN_IF_ERROR(check_options(o));
  DSI_ASSIGN_OR_RETURN(const runner::RunnerOptions named,
                       runner::runner_options(o.model_dir, o.backend, o.numerics, o.load_format));
  return runner::RunnerOptions{.model_dir = named.model_dir, .backend = named.backend, .numerics = named.numerics,
                               .load_format = named.load_format, .batch_invariant = o.batch_invariant,
                               .fp8_state = o.state_format == "auto", .gpus = o.gpus,
                               .expert_parallel_size = o.expert_parallel_size,
                               .data_parallel_size = o.data_parallel_size,
                               .tensor_parallel_size = o.tensor_parallel_size, .eplb = o.eplb,
                               .num_redundant_experts = o.num_redundant_experts, .eplb_interval = o.eplb_interval,
                               .communicator = o.communicator, .collective_timeout_ms = o.collective_timeout_ms,
                               .fault_injection = o.fault_injection,
                               .engram_placement = model::parse_engram_placement(o.engram_placement).value()};
}

Result<EngineConfig> resolve_engine_config(const EngineOptions& o, const io::ModelConfig& mc, int32_t kv_elem_bytes) {
  DSI_RETURN_IF_ERROR(check_options(o));
  EngineConfig c;
  c.device_sampling = o.sampling == "device";
  c.async_scheduling = o.async_scheduling == "on";
  c.graph_warmup = o.graph_warmup == "on";
  c.tokenizer_path = o.tokenizer_path;
  const std::filesystem::path model_tokenizer = std::filesystem::path(o.model_dir) / "tokenizer.json";
  if (c.tokenizer_path.empty() && std::filesystem::exists(model_tokenizer)) c.tokenizer_path = model_tokenizer.string();

  const int64_t pos_limit = mc.max_position_embeddings > 0 ? mc.max_position_embeddings : (int64_t(1) << 20);
  c.max_model_len = o.max_model_len > 0 ? o.max_model_len : std::min<int64_t>(pos_limit, 8192);
  if (c.max_model_len > pos_limit)
    return Status::errorf("max_model_len {} exceeds the model's max_position_embeddings {}", c.max_model_len, pos_limit);

  DSI_ASSIGN_OR_RETURN(c.speculative,
                       speculative::resolve_speculative_config(o.speculative, o.num_speculative_tokens,
                                                               o.speculative_budget, o.speculative_min_survival,
                                                               o.speculative_cost_model, o.model_dir));
  c.cache.max_num_seqs = o.max_num_seqs;
  c.cache.max_model_len = c.max_model_len;
  c.cache.kv_elem_bytes = kv_elem_bytes;
  c.cache.num_speculative_tokens = c.speculative.num_speculative_tokens;
  // The state budget: the option, else room for max_num_seqs full-length sequences capped at 4 GiB (at least one;
  // DP attention: at least one per rank, each rank holding 1/N of it).
  c.cache.budget_bytes = int64_t(o.state_memory_gb * double(int64_t(1) << 30));
  if (c.cache.budget_bytes <= 0) {
    DSI_ASSIGN_OR_RETURN(const cache::StateLayout layout, cache::compute_state_layout(mc, c.cache));
    const int64_t per_seq = layout.bytes_per_sequence(c.max_model_len);
    const int64_t ranks = o.gpus > 1 && o.data_parallel_size == o.gpus ? o.gpus : 1;
    c.cache.budget_bytes =
        std::max<int64_t>(std::min<int64_t>(per_seq * o.max_num_seqs, int64_t(4) << 30), per_seq * ranks);
  }

  c.scheduler.max_num_seqs = o.max_num_seqs;
  c.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  c.scheduler.eos_token_id = mc.eos_token_id;
  c.scheduler.vocab_size = mc.vocab_size;
  c.scheduler.seed = o.seed;
  c.scheduler.spec_budget = c.speculative.budget;
  c.scheduler.spec_min_survival = c.speculative.min_survival;
  // Prompts apart from verify steps, admitted in groups of an eighth of the slots (docs/decisions.md 2026-12-07).
  const std::string apart = env_switch("DSINFER_SPEC_PROMPTS_APART", {"0", "1"});
  c.scheduler.spec_prompts_apart = c.speculative.enabled() && apart != "0";
  c.scheduler.spec_admit_group = apart == "1" ? 1 : std::max(1, o.max_num_seqs / 8);
  // The gate's drain rule (speculative/spec_gate.h SpecGate::drain_pays), opt-in until measured.
  c.speculative.drain_gate = env_switch("DSINFER_SPEC_DRAIN_GATE", {"0", "1"}) == "1";
  return c;
}

}  // namespace dsinfer::engine
