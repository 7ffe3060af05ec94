// dsinfer public C++ API: build an engine from a model directory, submit typed requests (include/dsinfer/
// request.h: completions with text or token-id prompts, or chat conversations rendered with the DeepSeek-V4
// chat encoding), step it, and collect results or stream tokens. No CUDA and no third-party types here.
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dsinfer/request.h"

namespace dsinfer {

// The one definition of every engine option's default (vLLM names).
struct EngineOptions {
  std::string model_dir;
  std::string backend = "cpu";         // "cpu" (reference) or "cuda"
  std::string numerics = "official";   // "official" or "hf" (transformers semantics)
  std::string load_format = "auto";    // "auto" or "dummy" (random weights, cuda)
  std::string tokenizer_path;          // default: model_dir/tokenizer.json when present
  int32_t max_num_seqs = 64;           // sequences holding state at once
  // Tokens computed per step, prefill + decode: the prefill chunk. 8,192 as SGLang (chunked_prefill_size) and vLLM
  // (its server on GPUs of 70 GB and more) size it for H100 / H200: a longer step for the decodes batched with it,
  // fewer passes over the weights for the prompt (docs/decisions.md 2026-12-03).
  int64_t max_num_batched_tokens = 8192;
  int64_t max_model_len = 0;           // 0: min(max_position_embeddings, 8192)
  uint64_t seed = 0;                   // draws the seeds of requests that give none
  double state_memory_gb = 0;          // 0: room for max_num_seqs full-length sequences, capped at 4 GiB
  // Speculative decoding (docs/engine_core.md): drafter "dspark" (the checkpoint's mtp.* DSpark drafter), "mtp1"
  // (model_dir/mtp1/) or "off"; drafts per sequence per step (0 = the drafter's block: DSpark 5, MTP-1 1); the
  // confidence schedule: at most speculative_budget drafts verified per step over all sequences, ranked by the
  // confidence head's cumulative survival (0 = no limit), and only drafts whose survival >= min_survival.
  std::string speculative = "off";
  int32_t num_speculative_tokens = 0;
  int64_t speculative_budget = 0;
  double speculative_min_survival = 0;
  // The step cost model greedy sequences' drafting and verify lengths are weighed against (docs/engine_core.md
  // "Speculative decoding"): "auto" (cuda: verify steps timed at start-up, a few seconds, cached per model, GPU and
  // numerics under $DSINFER_CACHE_DIR, else $XDG_CACHE_HOME/dsinfer, else ~/.cache/dsinfer; cpu: step time
  // proportional to its tokens), a file PATH (read when it matches this model and GPU, else profiled and written
  // there), or "off" (every draft verified, up to speculative_budget).
  std::string speculative_cost_model = "auto";
  // Prefix caching (docs/architecture.md, "Prefix caching"): "off"; "exact" (a hit resumes from a snapshot of
  // the sequence state taken at a block boundary: outputs bit-identical to no caching); "bounded" (also hits on
  // cached blocks without a snapshot, recomputing the sliding window before the hit: close, not identical).
  // Snapshot memory in GiB (0: a quarter of the state memory), LRU beyond it. Host tier: bytes of host memory
  // (pinned on CUDA) that cached blocks evicted from the state memory spill to and come back from on a hit
  // (0: none, evicted blocks are dropped; LRU beyond it; snapshots stay in device memory).
  std::string enable_prefix_caching = "off";
  double prefix_snapshot_memory_gb = 0;
  int64_t prefix_cache_host_bytes = 0;

  // Batch-invariant inference (docs/kernels.md "Batch invariance"): on cuda every kernel's reduction order is
  // independent of the batch, so a request's tokens and logprobs are bit-identical alone or in any batch, with or
  // without CUDA graphs and preemption; costs some speed. The cpu backend is always batch-invariant (a no-op).
  bool batch_invariant = false;
  // The state's storage format (docs/decisions.md, issue 31): "auto" keeps DeepSeek's storage format where the
  // backend has it (cuda, DeepSeek-V4 with 512-wide rows, `official` numerics outside exact GEMMs: FP8 KV rows and
  // indexer keys, 3.6x fewer bytes a token than fp32 rows) and fp32 rows elsewhere; "fp32" keeps fp32 rows (the
  // numerics simulation's state) everywhere.
  std::string state_format = "auto";
  // Where tokens are sampled: "device" (the backend samples on the GPU when it can: cuda, except steps with
  // speculative decoding, whose verification needs the full logits rows; same tokens as the host sampler for the
  // same seed) or "host" (the reference CPU sampler, always used by the cpu backend).
  std::string sampling = "device";
  // Several GPUs of one node (docs/multi_gpu.md), cuda: the GPUs to use (devices 0 .. gpus-1, one process);
  // routed experts split over them (expert_parallel_size: 0 = gpus, must equal gpus for now), everything else
  // replicated. data_parallel_size = gpus (> 1): DP attention, each rank its own sequences and their state, the
  // routed tokens dispatched to the experts' ranks (cpu backend so far; docs/multi_gpu.md "DP attention + EP").
  // tensor_parallel_size = gpus (> 1): TP attention, each rank 1/N of the query heads, the state replicated, the
  // attention output all-reduced (cpu backend so far; docs/multi_gpu.md "TP attention"). Not both DP and TP.
  int32_t gpus = 1;
  int32_t expert_parallel_size = 0;
  int32_t data_parallel_size = 1;
  int32_t tensor_parallel_size = 1;
  // Expert-parallel load balancing (docs/multi_gpu.md "EPLB"), gpus > 1: num_redundant_experts extra expert slots
  // (a multiple of gpus) hold replicas of the busiest experts; the placement is recomputed from measured per-expert
  // loads every eplb_interval steps, without a restart. Results stay exact (each token's expert computed once).
  bool eplb = false;
  int32_t num_redundant_experts = 0;
  int64_t eplb_interval = 1000;
  // gpus > 1 (docs/multi_gpu.md "Communicators"): "auto", "nccl" or "in-process" (several ranks sharing one GPU;
  // the cpu backend's ranks); every blocking wait of the ranks ends within collective_timeout_ms (a failure naming
  // the rank, never a hang). fault_injection: TEST ONLY, a planted rank failure ("1:step:3",
  // parallel/fault_injection.h).
  std::string communicator = "auto";
  int64_t collective_timeout_ms = 300000;
  std::string fault_injection;
  // Asynchronous scheduling (docs/engine_core.md "Asynchronous steps"): "on" = the host plans and launches step
  // t+1 while the device runs step t (the sampled ids stay on the device; stop conditions are seen one step late
  // and a finished sequence's surplus token is discarded, so outputs are identical to "off"). Applies where the
  // runner samples on the device (sampling "device" on cuda), without speculative decoding or prefix caching;
  // steps of structured outputs and of requests with presence / frequency / repetition penalties wait for the
  // step before. "off": every step waits for its sampled tokens before the next is planned.
  std::string async_scheduling = "on";
  // CUDA graphs captured at start-up (docs/engine_core.md "Graph warm-up"): "on" = before the first request the
  // engine runs, on state no sequence holds yet, one prompt step of max_num_batched_tokens tokens ending at
  // max_model_len (the scratch buffers grown to what any later step needs: a buffer that grows later drops every
  // graph) and then the decode step and each verify length of every graph bucket up to max_num_seqs, so no graph is
  // captured while requests wait (a run's first steps of each batch size otherwise pay 5-40 ms each). Start-up
  // takes longer by those steps. "off": graphs are captured by the first step of each shape.
  std::string graph_warmup = "on";
  // DeepSeek-V4.1's Engram tables (188.8 GiB in the release; docs/decisions.md 2026-12-02 "Engram placements"):
  // "device" (a full copy on every GPU), "host" (in pinned host memory; each step's rows are fetched while the
  // layers before the Engram layers run; cpu and cuda), or "sharded" (each rank 1/N of the rows, one gather per
  // Engram layer). `dsinfer plan` shows what each leaves for state. A model without Engram tables takes "device".
  std::string engram_placement = "device";
};

// Counters of prefix caching since the engine was created (gauges marked "now").
struct PrefixCacheMetrics {
  std::string mode = "off";
  int64_t lookups = 0;           // admissions that looked up a prefix
  int64_t lookup_tokens = 0;     // tokens those admissions had to compute without a cache
  int64_t hit_tokens = 0;        // tokens whose prefill a hit skipped
  int64_t exact_hits = 0, bounded_hits = 0;
  int64_t replayed_tokens = 0;   // tokens recomputed to rebuild sliding windows (bounded hits)
  int64_t evictions = 0, snapshot_evictions = 0;
  int64_t deferred = 0;          // admission steps held back while a running sequence computed the same prefix
  int64_t cached_blocks = 0;     // now
  int64_t snapshots = 0, snapshot_bytes = 0, snapshot_budget_bytes = 0;  // now
  // Host tier: blocks (and their tokens) that hits restored from it, blocks spilled to it, host blocks dropped
  // (LRU), bytes copied device -> host and host -> device.
  int64_t host_hit_blocks = 0, host_hit_tokens = 0, host_spills = 0, host_evictions = 0;
  int64_t bytes_to_host = 0, bytes_to_device = 0;
  int64_t host_blocks = 0, host_bytes = 0, host_budget_bytes = 0;  // now
};

// Structured outputs since the engine was created: grammar compiles (cache misses) and their wall time, cache
// hits, and what the compiled-grammar cache holds now.
struct GrammarMetrics {
  int64_t compiles = 0, cache_hits = 0, cache_entries = 0, cache_bytes = 0;
  double compile_seconds = 0;
};

// Counters of speculative decoding since the engine was created.
struct SpeculativeMetrics {
  std::string method = "off";
  int64_t steps = 0;             // engine steps
  int64_t rounds = 0;            // decode rounds: one decoding sequence in one step
  int64_t emitted_tokens = 0;    // tokens those rounds produced (accepted drafts + correction / bonus token)
  int64_t verified_tokens = 0;   // tokens those rounds computed (anchor + verified drafts)
  int64_t drafted_tokens = 0;    // drafts proposed
  int64_t accepted_tokens = 0;   // drafts accepted
  std::vector<int64_t> trials_per_position;    // draft k verified with drafts 0..k-1 accepted
  std::vector<int64_t> accepted_per_position;  // ... and accepted
  // Calibration of the confidence head (bench/spec_calibration.cpp): per draft position k, the rounds that verified
  // draft k, the sum of their predicted survival a_k (drafts 1..k all accepted) and how many of them did survive;
  // the reliability curve: each verified draft reached (its predecessors accepted) binned by its predicted
  // conditional acceptance a_k / a_{k-1} in 10 bins of width 0.1: count, accepted, sum of predictions.
  std::vector<int64_t> verified_per_position, survived_per_position;
  std::vector<double> predicted_survival_per_position;
  std::vector<int64_t> calibration_trials, calibration_accepted;
  std::vector<double> calibration_predicted;
  // Steps whose greedy verify length the step cost model chose (speculative_cost_model), and the sum of the lengths.
  int64_t scheduled_rounds = 0, scheduled_verify_length = 0;
  double draft_seconds = 0, step_seconds = 0;  // drafter time, whole step time
  // The gate (speculative/spec_gate.h): probes taken after rest, plain steps taken at rest; the runner's step graphs
  // captured over the run (switching between rest and drafting must not recapture them).
  int64_t gate_probes = 0, rest_steps = 0, graphs_captured = 0;
  // One-wait rounds (verify, acceptance and the next proposal with one host wait), and how many of their proposals
  // were used (the others were proposed again after the host's bookkeeping).
  int64_t one_wait_rounds = 0, one_wait_proposals = 0;
  // Chained verify steps (speculative/chained_step.h): launched before the host read the round before them, and
  // adopted as the next step, or wasted (the host's next plan was another).
  int64_t chained_steps = 0, chained_wasted = 0;
  double mean_accepted_length() const { return rounds ? double(emitted_tokens) / double(rounds) : 0.0; }
};

struct ToolCallResult {
  std::string id, name, arguments;     // arguments: JSON object text
};

struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;  // top_logprobs alternatives
};

struct Completion {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;                    // completions text, or chat content
  std::string reasoning;               // chat reasoning_content
  std::vector<ToolCallResult> tool_calls;
  std::vector<TokenLogprob> logprobs;  // when the request asked for logprobs
  std::string finish_reason;           // "stop", "length", "tool_calls", "abort", "error"
};

struct RequestResult {
  uint64_t id = 0;
  std::vector<Completion> completions;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::vector<int32_t> prompt_token_ids;  // the prompt as the engine tokenized it (chat: rendered, then tokenized)
  double arrival_s = 0, first_token_s = -1, finish_s = 0;  // seconds since the engine was created
  std::string response_id;             // the response object's "id" ("chatcmpl-<id>" / "cmpl-<id>")
  std::string response_json;           // the OpenAI response object (chat.completion / text_completion)
  std::string error;                   // non-empty: the request failed mid-run (e.g. the model produced
                                       // non-finite logits); unfinished completions end with "error"
};

// A streamed piece of a chat tool call: a call's first piece carries its id and name, later ones the next part
// of its arguments (JSON text, streamed as it is parsed); concatenated they give ToolCallResult::arguments.
struct ToolCallDelta {
  int32_t index = 0;                   // the call's position in the choice's tool_calls
  std::string id, name;                // first piece only
  std::string arguments;
};

struct TokenEvent {
  uint64_t request_id = 0;
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text, reasoning;
  bool finished = false;
  std::string finish_reason;           // "stop", "length", "tool_calls", "abort"
  std::vector<ToolCallDelta> tool_calls;  // chat: tool-call pieces parsed with these tokens
  std::vector<TokenLogprob> logprobs;  // one per token in token_ids, when the request asked for logprobs
  std::string parse_error;             // chat: output that did not parse (kept as content); with finished
};

// What prepare() concluded: ok, or the reason and the top-level request field it is about.
struct PrepareResult {
  bool ok = true;
  std::string error, error_param;
};

// A snapshot of the engine's load (for monitoring).
struct EngineStats {
  int32_t running_requests = 0, waiting_requests = 0;  // running: some sequence holds state
  int32_t running_seqs = 0, waiting_seqs = 0;
  int64_t num_preemptions = 0;         // since the engine was created
  int32_t state_slots = 0, state_slots_used = 0;
  int32_t state_blocks = 0, state_blocks_used = 0;
  int64_t state_bytes_used = 0, state_bytes_budget = 0;
  int64_t state_block_size = 0, state_block_bytes = 0, state_slot_bytes = 0;  // the state layout (tokens / bytes)
  PrefixCacheMetrics prefix_cache;
  SpeculativeMetrics speculative;
  GrammarMetrics grammar;
  // CUDA step graphs (EngineOptions::graph_warmup): captured while the engine was created, captured since (each
  // while requests waited), the same for the speculative drafter's graphs, and the graph warm-up's wall time in
  // seconds.
  int64_t graphs_at_start = 0, graphs_in_run = 0;
  int64_t drafter_graphs_at_start = 0, drafter_graphs_in_run = 0;
  double graph_warmup_seconds = 0;
};

class Engine {
 public:
  // nullptr on failure, with the reason in *error.
  static std::unique_ptr<Engine> create(const EngineOptions& options, std::string* error);
  ~Engine();

  // Queues a parsed request. Returns the request id, or 0 with the reason (naming the field and value) in
  // *error and the top-level field it is about in *error_param ("" when none); nothing is queued then.
  uint64_t submit(const Request& request, std::string* error, std::string* error_param = nullptr);
  // Compiles the request's structured-output grammar (if any) into the engine's cache, so that submit() finds it
  // there. Thread-safe: may run on any thread while another steps the engine (the server compiles each request's
  // grammar on its connection thread, so a slow compile delays only its own request). False with the reason and
  // field as for submit().
  bool prepare(const Request& request, std::string* error, std::string* error_param = nullptr) const;
  // prepare() on the engine's grammar compile pool (a few worker threads, structured/compile_pool.h): returns at
  // once, the future becomes ready when the grammar is compiled (a request without a constraint: at once). `dsinfer
  // generate` queues a constrained request when its future is ready and steps the others meanwhile; the server's
  // connections wait on theirs. The engine must outlive the future's wait.
  std::shared_future<PrepareResult> prepare_async(const Request& request) const;
  // Parses an OpenAI body (chat when it has "messages", else completions) and queues it.
  uint64_t submit(const std::string& body_json, std::string* error, std::string* error_param = nullptr);
  // Ends a queued or running request now and frees its state: its unfinished completions finish with
  // "abort" (the token callback reports it) and the request comes back from the next take_finished().
  // False (with *error) for an unknown or already finished id.
  bool abort(uint64_t request_id, std::string* error);
  // Runs one step; false (with *error) if the model step failed.
  bool step(std::string* error);
  bool has_unfinished() const;
  std::vector<RequestResult> take_finished();
  // Steps until every submitted request has finished.
  bool run_until_idle(std::vector<RequestResult>& results, std::string* error);
  // Called for every sequence that produced tokens in a step (streaming).
  void set_token_callback(std::function<void(const TokenEvent&)> cb);

  // Prefill/decode disaggregation (docs/fleet.md; needs enable_prefix_caching with snapshots). Call between steps,
  // on the thread that steps. export_prefix_state: the state of the deepest prefix of `prompt_token_ids` that a
  // request with this prompt resumes exactly from the prefix cache (whole blocks, at most prompt - 1 tokens; a
  // request that just ran the prompt leaves it there), as a versioned, checksummed blob (format: src/cache/
  // state_blob.h); false with the reason when there is none. import_prefix_state: checks a blob (format, checksum,
  // model identity, state layout, token ids) and puts it into the prefix cache, so that a request whose prompt
  // starts with its tokens resumes there, bit-identically; returns its token count, or -1 with the reason (nothing
  // changed then).
  bool export_prefix_state(const std::vector<int32_t>& prompt_token_ids, std::string* blob, std::string* error);
  int64_t import_prefix_state(std::string_view blob, std::string* error);

  // The server's /tokenize and /detokenize (vLLM's shapes). Thread-safe: they read the tokenizer only, so a
  // connection thread may call them while another thread steps the engine. tokenize: the prompt token ids that
  // submit() would run for this request (chat: the conversation with the model's chat defaults, rendered, then
  // tokenized; token-id prompts as given); false with the reason and field as for submit(). detokenize: the text
  // of `ids`, special tokens included; false with the reason (no tokenizer, an id outside the vocabulary).
  bool tokenize(const Request& request, std::vector<int32_t>* ids, std::string* error,
                std::string* error_param = nullptr) const;
  bool detokenize(const std::vector<int32_t>& ids, std::string* text, std::string* error) const;
  // Drops every prefix-cache entry (device blocks, host tier, snapshots; the counters stay). Call between steps,
  // on the thread that steps. Refused while requests are queued or running (their sequences hold cached blocks),
  // and when prefix caching is off. Returns the number of cached blocks dropped, or -1 with the reason.
  int64_t flush_prefix_cache(std::string* error);

  SpeculativeMetrics speculative_metrics() const;
  std::string backend_name() const;    // e.g. "cpu (official numerics)"
  std::string step_mode() const;       // "async" or "sync (<why>)": EngineOptions::async_scheduling in effect
  int64_t max_model_len() const;
  bool has_tokenizer() const;
  // "" while the engine can run; else why it cannot (a rank of a multi-rank runner failed: every step fails with
  // this reason; the server answers 503 with it).
  std::string unavailable_reason() const;
  double now_s() const;                // seconds since the engine was created
  std::string model_name() const;      // the "model" of response objects: the model directory's name
  EngineStats stats() const;

 private:
  friend class StreamFormatter;
  Engine();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// OpenAI streaming format of one request ("stream": true): chat.completion.chunk / text_completion chunk
// objects as JSON text, one per server-sent-event "data:" line. Concatenating a request's chunks gives its
// non-streaming response (content, reasoning_content, tool_calls, logprobs, finish_reason). A formatter only
// reads the engine's tokenizer, so it may be used on another thread than the one stepping the engine, while
// the engine lives.
class StreamFormatter {
 public:
  StreamFormatter(const Engine& engine, const Request& request, uint64_t request_id);
  ~StreamFormatter();
  // Chat: the first chunk of every choice (role "assistant", content ""); completions: none.
  std::vector<std::string> start() const;
  // The chunk for one token event; "" when it carries nothing to send.
  std::string chunk(const TokenEvent& event);
  // stream_options.include_usage: the last chunk (no choices, the request's usage); "" when not asked for.
  std::string usage_chunk(const RequestResult& result) const;
  const std::string& response_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One process per rank (torchrun's WORLD_SIZE > 1 with RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
// docs/multi_gpu.md "Bootstrap"): *rank = RANK and *world = WORLD_SIZE, or 0 and 1 without them. Every process runs
// the same command; rank 0 alone writes its results. False (with the reason naming the variable) when they are invalid.
bool process_rank(int32_t* rank, int32_t* world, std::string* error);

}  // namespace dsinfer
