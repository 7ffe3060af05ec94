// dsinfer public diagnostics API: compare a backend with reference logits (check_reference) and time a
// forward step per op next to its roofline floor (run_bench). Both build the model runner themselves from a
// model directory; no CUDA and no third-party types here. Errors come back in *error (like engine.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dsinfer/engine.h"  // EngineOptions: the default step of the memory plan

namespace dsinfer {

// ---- check_reference ----------------------------------------------------------------------------------------
// The reference file is in the fixture format (tests/fixtures): per prompt i, prompt.{i}.input_ids [L],
// prompt.{i}.logits F32 [L, V], optional prompt.{i}.greedy_ids [n] and prompt.{i}.greedy_logits F32 [n, V];
// or in the official format (DeepSeek-V4.1 official.safetensors: prompt.{i}.last_logits / greedy_prefill_logits),
// whose ids come from model_dir/reference.safetensors.
// Each prompt runs one full forward, then its greedy continuation token by token on the incremental state
// (feeding the reference's tokens, so later steps stay comparable after a miss).
struct CheckReferenceOptions {
  std::string model_dir;
  std::string reference_path;    // empty: model_dir/reference.safetensors
  std::string backend = "cpu";   // "cpu" (reference) or "cuda"
  // "official" or "hf"; empty: the numerics that produced the reference (its safetensors metadata "numerics",
  // else reference.json next to it, else hf: the fixture format is transformers' output).
  std::string numerics;
  bool exact_gemm = true;        // cuda: fp32 CUDA-core GEMMs; false checks the tensor-core (bf16) path
  int32_t gpus = 1;              // cuda: GPUs of this node, routed experts split over them (docs/multi_gpu.md)
  std::string communicator = "auto";  // gpus > 1: "auto", "nccl" or "in-process" (ranks may share a GPU)
  int32_t data_parallel_size = 1;     // = gpus: DP attention (each prompt on one rank, experts dispatched)
  int32_t tensor_parallel_size = 1;   // = gpus: TP attention (each rank the query heads of its output groups)
  std::string engram_placement = "device";  // EngineOptions::engram_placement (DeepSeek-V4.1)
  double tolerance = -1;         // max allowed max|err| / max|ref|; < 0: the default for the backend and weights
  std::string dump_logits_path;  // non-empty: write our logits there as safetensors with the reference's keys
  // Pass when at least this fraction of all greedy steps match (1: every step of every prompt); each prompt
  // must still be within tolerance. For references whose greedy path has bf16 ties (DeepSeek-V4.1 official).
  double min_greedy_match = 1.0;
  // Fidelity mode (issue 10; reference logits are not used): the fast path (cuda: tensor-core GEMMs) against
  // the exact path (fp32 GEMMs; exact_gemm above is ignored), teacher-forced over fidelity_positions positions
  // of a deterministic stream: sequences of fidelity_seq_len tokens, each the ids of a reference prompt
  // (input_ids + greedy_ids) continued with tokens sampled (temperature 1, fixed seed) from the exact path.
  // Passes when top-1 agreement >= min_top1 and mean KL(exact || fast) <= max_kl. On the cpu backend both
  // paths are the same computation (100 % / 0).
  bool fidelity = false;
  int64_t fidelity_positions = 2048;
  int64_t fidelity_seq_len = 512;
  // Tokens per teacher-forced step. The default keeps every step at decode-class sizes; a chunk above 1,024 runs
  // the fast path's prefill kernels (the grouped FP8 MoE, the shared expert through cuBLASLt: ops/moe/moe_plan.h).
  int64_t fidelity_chunk = 256;
  double min_top1 = 0.995;
  double max_kl = 1e-3;
};

struct FidelityResult {
  std::string exact_runner, fast_runner;  // runner names
  int64_t positions = 0, sequences = 0, top1_matches = 0;
  double top1 = 0;                        // top1_matches / positions
  double mean_kl = 0, max_kl = 0;         // KL(exact || fast) per position, nats (+inf: non-finite fast logits)
  double max_logit_diff = 0;              // max |exact - fast| over every logit
  double min_top1 = 0, max_kl_allowed = 0;  // the thresholds applied
};

struct PromptCheckResult {
  int64_t index = 0;             // N of the reference's prompt.N.* (a reference may hold a subset)
  int64_t len = 0;               // prompt tokens
  double rel_err = 0;            // max |ours - ref| / max |ref| over every compared logit of the prompt
  double p99_rel_err = 0;        // the 99th percentile of |ours - ref| over those logits, / max |ref|
  int64_t greedy_matched = 0, greedy_total = 0;  // greedy tokens equal to the reference's
  bool logits_ok = false;        // rel_err <= tolerance
  bool ok = false;               // logits_ok and every greedy token matched
};

struct CheckReferenceReport {
  std::string model_dir, reference_path;
  std::string runner_name;       // e.g. "cpu (hf numerics)"
  std::string numerics;          // the numerics used: "official", "hf" or "hf-noqat"
  std::string numerics_source;   // "given", "reference metadata", "reference.json" or "assumed (transformers)"
  double tolerance = 0;          // the tolerance applied
  std::vector<PromptCheckResult> prompts;
  double min_greedy_match = 1.0;
  int64_t greedy_matched = 0, greedy_total = 0;  // over all prompts
  bool ok = false;               // every prompt ok (or, with min_greedy_match < 1: every prompt's logits ok and
                                 // enough greedy steps matched); fidelity mode: both thresholds met
  FidelityResult fidelity;       // fidelity mode only (prompts then stays empty)
};

// Runs the check. false (with the reason in *error) when it could not run: unreadable model or reference,
// bad option values, a failed step, an unwritable dump file. true otherwise; report->ok says pass or fail.
bool check_reference(const CheckReferenceOptions& options, CheckReferenceReport* report, std::string* error);

// ---- run_bench ----------------------------------------------------------------------------------------------
// Decode step time at each batch size and context, and prefill time of N tokens, per op and end to end, each
// next to its roofline floor. Decode runs on randomized state (no prefill of the context needed); the weights
// are usually load_format "dummy" at real V4-Flash / V4-Pro shapes, with num_layers when the model does not
// fit one GPU. Needs a backend with per-op timing (cuda); the cpu backend reports that it has none.
struct BenchReport;

struct BenchOptions {
  std::string model_dir;
  std::string backend = "cuda";       // "cuda" or "cpu"
  std::string load_format = "dummy";  // "dummy" (random weights in the storage formats) or "auto"
  std::string numerics = "official";  // "official" or "hf"
  int64_t num_layers = 0;             // > 0: run only the first N layers
  int32_t gpus = 1;                   // GPUs of this node, routed experts split over them (docs/multi_gpu.md)
  std::string communicator = "auto";  // gpus > 1: "auto", "nccl" or "in-process" (ranks may share a GPU)
  int32_t data_parallel_size = 1;     // = gpus: DP attention (the sequences spread over the ranks)
  int32_t tensor_parallel_size = 1;   // = gpus: TP attention (the query heads split over the ranks)
  std::vector<int64_t> batches = {1, 64, 256};  // one decode case per batch size
  int64_t context = 4096;             // decode: positions already in each sequence's state
  int64_t prefill = 4096;             // prefill case: tokens of one sequence from position 0; 0 = none
  int64_t prefill_chunk = 0;          // > 0: the prefill runs in steps of this many tokens (chunked prefill:
                                      // activations bounded by the chunk), one timed pass after a one-chunk warm-up
  int64_t iters = 5;                  // timed iterations per case (after one warm-up), medians reported
  // The ceilings the floors divide by: "measured" (device copy bandwidth, BF16 and FP8 cuBLASLt GEMMs at 8192^3 on
  // random data, measured at start in this process) or "nominal" (H200 datasheet: 4.8 TB/s, 989 / 1,979 TFLOP/s).
  std::string ceilings = "measured";
  // The state storage format the floors count: "fp8" (official: 584-byte KV rows, 132-byte indexer keys), "bf16"
  // or "fp32" (the runners' rows today).
  std::string state_profile = "fp8";
  bool batch_invariant = false;       // time the batch-invariant mode (EngineOptions::batch_invariant)
  std::string engram_placement = "device";  // EngineOptions::engram_placement (DeepSeek-V4.1)
  std::string state_format = "auto";  // the runner's state: "auto" or "fp32" (EngineOptions::state_format)
  // Speculative verify steps: per K a case per batch size of 1 + K tokens per sequence at `context`, logits for
  // every token (what a verify step of K drafts costs); empty = none.
  std::vector<int64_t> verify_tokens;
  // Called after each case is added to the report (streaming output); may be empty.
  std::function<void(const BenchReport& report)> on_case;
};

struct BenchOp {
  std::string name;                   // op name, summed over layers
  double measured_ms = 0;             // sum over layers of the per-layer medians
  double floor_ms = 0;                // roofline floor: max(bytes / HBM bandwidth, flops / peak)
  double bytes = 0, flops = 0;        // from the cost model
  double ratio() const { return floor_ms > 0 ? measured_ms / floor_ms : 0.0; }
};

struct BenchCeilings {
  double hbm_bytes_per_s = 0;         // device-to-device copy, bytes read + written
  double bf16_flops = 0, fp8_flops = 0;  // dense GEMM rates
  std::string source;                 // "measured" or "nominal"
  std::string state_profile;          // BenchOptions::state_profile
};

struct BenchCase {
  std::string title;                  // "decode", "prefill" or "verify"
  int64_t seqs = 0, new_tokens = 0, context = 0;
  int64_t logits_rows = 0;            // LM-head rows (verify: every token)
  std::vector<BenchOp> ops;           // by name
  double ops_ms = 0;                  // sum of measured op times
  double floor_ms = 0;                // sum of every op's floor
  double step_ms = 0;                 // median host wall time of a step (incl. plan upload, logits download)
  double graph_step_ms = -1;          // decode: median step without per-op events (CUDA graph replay); -1 none
  // The step as a user runs it, without per-op events: decode = graph_step_ms; prefill = the whole prompt in
  // chunks of user_chunk tokens (the engine's max_num_batched_tokens unless --prefill-chunk), median of iters;
  // user_floor_ms = the sum of those chunks' floors. -1: not measured.
  double user_ms = -1, user_floor_ms = -1;
  int64_t user_chunk = 0;
  // Prefill: the device's busy time within user_ms (the runner's step events, from each chunk's plan upload to its
  // logits download, summed; median of iters), so user_ms - user_device_ms is the host's part (the plan before the
  // first upload, the final synchronisation). -1: the backend has no step events.
  double user_device_ms = -1;
  // Per-layer ops (layer >= 0) and the rest (embed, hc_head, lm_head) apart: sums of measured times and floors.
  double layers_ms = 0, layers_floor_ms = 0, head_ms = 0, head_floor_ms = 0;
  int64_t chunk = 0;                  // chunked prefill: tokens per step (step_ms is then the whole prompt: TTFT)
  double peak_device_bytes = -1;      // CUDA: largest device memory in use seen after a step (cudaMemGetInfo); -1 n/a
  // Several ranks: collective payload bytes sent per step (all ranks, ModelRunner CommTraffic), collectives per
  // step (all ranks), and rank 0's time in its collective ops per step (moe_allreduce, or moe_dispatch +
  // moe_combine with DP attention; waits for the other ranks included). -1: one rank.
  double comm_bytes_per_step = -1, comm_calls_per_step = -1, comm_ms = -1;
  std::string error;                  // non-empty: the case failed (what was measured before stays filled in)
  double tokens_per_s() const { return step_ms > 0 ? double(seqs * new_tokens) / (step_ms / 1e3) : 0.0; }
  double graph_tokens_per_s() const { return graph_step_ms > 0 ? double(seqs) / (graph_step_ms / 1e3) : 0.0; }
};

struct BenchReport {
  std::string model_dir, runner_name;
  int64_t num_layers = 0;             // layers of the model run
  std::vector<BenchCase> cases;
  BenchCeilings ceilings;             // what the floors of every case divide by
  bool ok = false;                    // every case ran
};

// false (with *error) when the bench could not start: bad options, unloadable model, a backend without
// per-op timing or random state. A case that fails records its error in the report (report->ok false).
bool run_bench(const BenchOptions& options, BenchReport* report, std::string* error);

// `dsinfer bench --engine-decode`: decode steps through the whole Engine (scheduler, device sampling, stop checks,
// detokenization), synchronous or asynchronous (EngineOptions::async_scheduling), at batch B: B requests of
// prompt_tokens random ids are prefilled, then decode_steps steps are measured. With the runner's step events
// (cuda) it reports the device's busy and idle time between steps: idle fraction = sum of the gaps between the end
// of a step's device work and the start of the next / (busy + idle).
struct EngineDecodeOptions {
  std::string model_dir, backend = "cuda", load_format = "dummy", numerics = "official";
  int64_t num_layers = 0;       // > 0: only the first N layers
  int64_t batch = 64;
  int64_t prompt_tokens = 128;
  int64_t decode_steps = 64;    // measured steps (after the prefill and 2 warm-up steps)
  std::string async_scheduling = "on";
  // Several ranks (docs/multi_gpu.md): --gpus, --communicator, --tensor-parallel-size, --data-parallel-size.
  int32_t gpus = 1, tensor_parallel_size = 1, data_parallel_size = 1;
  std::string communicator = "auto";
};
struct EngineDecodeReport {
  std::string runner_name, step_mode;  // step_mode: Engine::step_mode() ("async" / "sync (...)")
  int64_t steps = 0;                   // measured
  double wall_ms_per_step = 0;         // host wall
  bool device_events = false;          // the runner timed its steps (else busy / idle are 0)
  double busy_ms_per_step = 0, idle_ms_per_step = 0;
  double idle_fraction() const { return busy_ms_per_step + idle_ms_per_step > 0 ? idle_ms_per_step / (busy_ms_per_step + idle_ms_per_step) : 0; }
};
bool run_engine_decode_bench(const EngineDecodeOptions& options, EngineDecodeReport* report, std::string* error);

// `dsinfer plan`: what a model needs per GPU, from its config.json alone (no weights read): the weights in the
// official checkpoint formats under expert parallelism over N GPUs (dense weights replicated, routed experts
// split, EPLB's redundant slots counted), the per-sequence state as the runners keep it (fp32 rows; with
// expert parallelism every GPU holds every sequence's state), and how many sequences of `context` tokens fit in
// what the weights leave of the runner's 92 % share of a GPU.
struct MemoryPlanOptions {
  std::string model_dir;
  std::vector<int32_t> gpus = {1, 2, 4, 8};
  double gpu_memory_gib = 139.0;  // H200 (cudaMemGetInfo total); H100: 79
  int64_t context = 0;            // tokens per sequence (prompt + output); 0 = the model's max_position_embeddings
  int32_t redundant_experts = 0;  // EPLB (--num-redundant-experts), a multiple of every N
  std::vector<int64_t> batches = {1, 64, 256};  // decode batches the layout choice is made for (MemoryPlanRow::layouts)
  // The step whose activations every GPU needs besides weights and state (--max-num-batched-tokens; logits for
  // the largest of `batches` rows): parallel::step_activation_bytes.
  int64_t step_tokens = EngineOptions{}.max_num_batched_tokens;
};
// One layout's estimate for a decode step of `batch` sequences (docs/multi_gpu.md "Choosing a layout"; the cost
// model is parallel::choose_layout): what differs between EP, DP and TP attention.
struct LayoutPlan {
  std::string layout, flags;    // "TP attention + expert parallel", "--tensor-parallel-size N"
  bool fits = false;            // the batch fits in the state this layout keeps
  int64_t sequences_fit = 0;    // all GPUs together
  int64_t seqs_per_rank = 0;    // sequences one GPU runs attention for
  int64_t collectives = 0;      // per step
  double comm_bytes = 0;        // sent per GPU per step
  double attn_weight_bytes = 0, attn_state_bytes = 0;  // read by one GPU per step
  double attn_ms = 0, comm_ms = 0, step_ms = 0;        // estimates (H200, NVLink)
};
struct LayoutPlanChoice {
  int64_t batch = 0;
  std::vector<LayoutPlan> options;  // EP, DP, TP (one GPU: EP only)
  int32_t best = -1;                // index into options; -1: nothing fits
  std::string reason;
};
struct MemoryPlanRow {
  int32_t gpus = 0;
  double weight_bytes = 0;   // per GPU: dense + this GPU's routed experts
  double tables_split_bytes = 0;  // per GPU with the Engram tables' rows sharded over the GPUs (= weight_bytes for V4)
  double limit_bytes = 0;    // 92 % of gpu_memory_gib: what the CUDA runner lets weights take
  // One step of options.step_tokens tokens' activations per GPU: EP and TP (every GPU every token), DP (its share).
  double activation_bytes = 0, activation_bytes_dp = 0;
  bool fits = false;         // weights + activations within the limit
  int64_t sequences = 0;     // of `context` tokens in limit - weights - activations (0 when they do not fit)
  int64_t sequences_fp8 = 0;  // the same with the FP8 state format
  // Sequences of `context` tokens the N GPUs hold together, by layout (docs/multi_gpu.md "DP attention"): EP
  // (--data-parallel-size 1) replicates the state, so every GPU holds all of them (= sequences); DP
  // (--data-parallel-size N) gives each GPU its own sequences (N x what limit - weights - activation_bytes_dp holds).
  int64_t sequences_ep = 0, sequences_dp = 0;
  // DeepSeek-V4.1's Engram tables off the replicated weights (--engram-placement, docs/decisions.md 2026-12-02):
  // `sharded` keeps 1/N of every table's rows per GPU (tables_split_bytes), `host` keeps the tables in pinned host
  // memory (tables_host_bytes: no table on any GPU). Each with the fp32 state that remains per GPU (limit - weights,
  // 0 when they do not fit) and the sequences of `context` tokens it holds per GPU (EP; DP holds N times that).
  double tables_host_bytes = 0;
  double state_left_sharded = 0, state_left_host = 0;
  int64_t sequences_sharded = 0, sequences_host = 0;
  std::vector<LayoutPlanChoice> layouts;  // one per options.batches
};
struct MemoryPlan {
  std::string model_type;
  int64_t layers = 0;
  int64_t context = 0;           // the context the sequences are sized for (options.context, or the model's maximum)
  double dense_bytes = 0;        // replicated on every GPU (attention, mHC, router, shared experts, embedding, head)
  double engram_table_bytes = 0; // of dense_bytes: DeepSeek-V4.1's Engram tables (0 for V4)
  // Engram rows one token looks up over all Engram layers, in their storage format (FP8 + scales): what the host
  // placement fetches over PCIe per token, and what the sharded placement's gathers move at most per token.
  double engram_bytes_per_token = 0;
  double expert_bytes = 0;       // every routed expert (EPLB slots excluded)
  double state_bytes_per_token = 0, state_fixed_bytes = 0, state_bytes_per_sequence = 0;  // fp32 state
  // The same in DeepSeek's storage format (FP8 "MODEL1" rows + FP8 indexer keys, fp32 frontiers; issue 31), the
  // one-GPU CUDA runner's default state with official numerics (EngineOptions::state_format); 0 where the format does
  // not apply (DeepSeek-V4.1, head shapes without whole 64-channel NoPE tiles).
  double state_fp8_bytes_per_token = 0, state_fp8_fixed_bytes = 0, state_fp8_bytes_per_sequence = 0;
  std::vector<MemoryPlanRow> rows;  // one per entry of options.gpus
};
bool plan_memory(const MemoryPlanOptions& options, MemoryPlan* plan, std::string* error);

// `dsinfer convert`: writes a DeepSeek-V4.1 checkpoint in the release's storage formats (FP8 e4m3 dense projections
// with E8M0 scales per 32x32 block, FP4 experts, FP8 Engram rows; sharded, with model.safetensors.index.json and a
// config.json carrying the release's quantization_config). The values come from a V4.1 model folder (model_dir: a
// fixture in any float format, quantized with the official rule; its tokenizer files are copied) or are random
// (config: a config.json or its folder, `set` overriding fields of it as "key=json value", seed).
struct ConvertOptions {
  std::string model_dir;        // convert this model folder, or
  std::string config;           // random values at these shapes
  std::vector<std::string> set; // with config: "key=value" overrides (num_hidden_layers=3, n_routed_experts=16, ...)
  uint64_t seed = 0;
  std::string out_dir;
  int64_t shard_bytes = int64_t(1) << 30;
  int32_t threads = 1;
};
bool convert_checkpoint(const ConvertOptions& options, std::string* error);

}  // namespace dsinfer
