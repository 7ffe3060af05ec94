// What a router in front of a fleet of `dsinfer serve` replicas reads from each of them (docs/fleet.md): the load
// (requests running and waiting, free state memory; GET /get_load, /load), the model and server descriptions that
// SGLang's model gateway asks for when it registers a worker (GET /get_model_info, /get_server_info and their
// newer names /model_info, /server_info), and readiness (GET /health answers 503 while the server drains or the
// engine cannot run; GET /live answers 200 while the process serves HTTP). JSON bodies only; no HTTP here.
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"
#include "dsinfer/engine.h"

namespace dsinfer::server {

struct WorkerLoad {
  int32_t in_flight = 0;  // requests the server holds (its inbox and the engine)
  bool draining = false;
  EngineStats stats;      // the engine's last published stats
};

// {"load": running + waiting, "num_reqs", "num_waiting_reqs", ..., "state_bytes_free", ...}: "load" is the field
// vllm-router's power_of_two policy reads; "server_load" is vLLM's GET /load field (requests in flight).
std::string load_json(const WorkerLoad& load);

// serve --get-load-format: which router's GET /get_load shape the server answers (both routers ask the same path).
enum class LoadFormat { kVllm, kSglang };
Result<LoadFormat> parse_load_format(const std::string& name);  // "vllm", "sglang"
// SGLang's shape: [{"dp_rank": 0, "num_reqs", "num_waiting_reqs", "num_tokens", ...}], one entry (one DP rank);
// num_tokens: the tokens whose state the requests hold (state blocks in use x block size; a cached block that only
// the prefix cache holds counts as free, as in state_blocks_free).
std::string sglang_load_json(const WorkerLoad& load, int64_t state_block_size);

struct WorkerInfo {
  std::string model_name, backend, step_mode;
  int64_t max_model_len = 0;
  int32_t max_waiting_requests = 0;
  std::string role = "both";  // serve --role (P/D disaggregation)
  int64_t state_block_size = 0, state_block_bytes = 0, state_slot_bytes = 0;  // what a prefix state's bytes are made of
};

std::string model_info_json(const WorkerInfo& info);
std::string server_info_json(const WorkerInfo& info, const WorkerLoad& load);

}  // namespace dsinfer::server
