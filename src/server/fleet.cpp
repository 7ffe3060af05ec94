// fleet.h: the JSON a router reads from a worker.
#include "server/fleet.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace dsinfer::server {

using json = nlohmann::ordered_json;

namespace {

json load_object(const WorkerLoad& l) {
  const EngineStats& s = l.stats;
  // Requests the server accepted that the engine has not queued yet (its inbox) count as waiting.
  const int32_t inbox = std::max(0, l.in_flight - s.running_requests - s.waiting_requests);
  const int32_t waiting = s.waiting_requests + inbox;
  const PrefixCacheMetrics& pc = s.prefix_cache;
  return {{"load", s.running_requests + waiting},
          {"server_load", l.in_flight},
          {"num_reqs", s.running_requests + waiting},
          {"num_running_reqs", s.running_requests},
          {"num_waiting_reqs", waiting},
          {"num_running_seqs", s.running_seqs},
          {"num_waiting_seqs", s.waiting_seqs},
          {"state_bytes_budget", s.state_bytes_budget},
          {"state_bytes_used", s.state_bytes_used},
          {"state_bytes_free", std::max<int64_t>(0, s.state_bytes_budget - s.state_bytes_used)},
          {"state_blocks_free", std::max(0, s.state_blocks - s.state_blocks_used)},
          {"state_slots_free", std::max(0, s.state_slots - s.state_slots_used)},
          {"prefix_cache_hit_tokens", pc.hit_tokens},
          {"prefix_cache_queried_tokens", pc.lookup_tokens},
          {"draining", l.draining}};
}

}  // namespace

std::string load_json(const WorkerLoad& load) { return load_object(load).dump(); }

Result<LoadFormat> parse_load_format(const std::string& name) {
  if (name == "vllm") return LoadFormat::kVllm;
  if (name == "sglang") return LoadFormat::kSglang;
  return Status::errorf("get_load format '{}': expected vllm or sglang", name);
}

std::string sglang_load_json(const WorkerLoad& load, int64_t state_block_size) {
  json o = load_object(load);
  o["dp_rank"] = 0;
  o["num_tokens"] = int64_t(load.stats.state_blocks_used) * state_block_size;
  return json::array({o}).dump();
}

std::string model_info_json(const WorkerInfo& info) {
  return json{{"model_path", info.model_name},
              {"tokenizer_path", info.model_name},
              {"served_model_name", info.model_name},
              {"is_generation", true},
              {"max_model_len", info.max_model_len}}
      .dump();
}

std::string server_info_json(const WorkerInfo& info, const WorkerLoad& load) {
  return json{{"model_path", info.model_name},
              {"served_model_name", info.model_name},
              {"engine", "dsinfer"},
              {"backend", info.backend},
              {"step_mode", info.step_mode},
              {"max_model_len", info.max_model_len},
              {"context_length", info.max_model_len},
              {"max_waiting_requests", info.max_waiting_requests},
              {"disaggregation_mode", info.role},
              {"state_block_size", info.state_block_size},
              {"state_block_bytes", info.state_block_bytes},
              {"state_slot_bytes", info.state_slot_bytes},
              {"dp_size", 1},
              {"tp_size", 1},
              {"load", load_object(load)}}
      .dump();
}

}  // namespace dsinfer::server
