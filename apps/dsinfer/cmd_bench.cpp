// `dsinfer bench`: decode step time at batch B and context C, and prefill time of N tokens, per op and end to
// end, each next to its roofline floor and the ratio measured / floor (dsinfer::run_bench,
// include/dsinfer/diagnostics.h). Weights are usually --load-format dummy at the real V4-Flash / V4-Pro shapes
// (configs/), with --layers N when the whole model does not fit one GPU.
#include <algorithm>
#include <cstdio>
#include <string>

#include "apps/dsinfer/commands.h"
#include "apps/dsinfer/engine_flags.h"
#include "dsinfer/diagnostics.h"

namespace dsinfer::cli {

namespace {

constexpr const char* kUsage =
    "usage: dsinfer bench --model DIR [--backend cuda] [--load-format dummy|auto] [--layers N]\n"
    "                     [--batch 1,64,256] [--context 4096] [--prefill 4096] [--iters 5] [--numerics official|hf]\n"
    "                     [--batch-invariant] [--prefill-chunk N]  (prefill in steps of N tokens)\n"
    "                     [--gpus N]  (experts split over N GPUs of this node)  [--communicator auto|nccl|in-process]\n"
    "                     [--data-parallel-size N]  (= --gpus: DP attention, the batch spread over the ranks)\n"
    "                     [--tensor-parallel-size N]  (= --gpus: TP attention, the query heads split)\n"
    "                     [--engram-placement device|host]  (DeepSeek-V4.1's Engram tables)\n"
    "                     [--verify-tokens 1,2,3,4,5]  (speculative verify steps: 1 + K tokens per sequence)\n"
    "                     [--ceilings measured|nominal]  (floors at ceilings measured here at start, or the\n"
    "                      H200 datasheet's 4.8 TB/s, 989 / 1,979 TFLOP/s)\n"
    "                     [--state-profile fp8|bf16|fp32]  (state format the floors count; fp8 = official)\n"
    "                     [--state-format auto|fp32]  (the runner's state: auto = FP8 where it applies)\n"
    "       dsinfer bench --engine-decode --model DIR [--backend cuda] [--load-format dummy|auto] [--layers N]\n"
    "                     [--batch 64] [--prompt 128] [--steps 64] [--async-scheduling on|off|both]\n"
    "                     [--gpus N] [--communicator ...] [--tensor-parallel-size N] [--data-parallel-size N]\n"
    "                     (decode through the Engine: device busy / idle time between steps, sync vs async)\n";

// --engine-decode: one line per (batch, async mode).
int engine_decode(const BenchOptions& b, int64_t prompt, int64_t steps, const std::string& async) {
  std::printf("%-6s %-36s %8s %12s %12s %12s %8s\n", "batch", "steps", "measured", "wall ms/step", "busy ms/step",
              "idle ms/step", "idle %");
  int rc = 0;
  for (int64_t batch : b.batches)
    for (const char* mode : {"off", "on"}) {
      if (async != "both" && async != mode) continue;
      EngineDecodeOptions o;
      o.model_dir = b.model_dir;
      o.backend = b.backend;
      o.load_format = b.load_format;
      o.numerics = b.numerics;
      o.num_layers = b.num_layers;
      o.batch = batch;
      o.prompt_tokens = prompt;
      o.decode_steps = steps;
      o.async_scheduling = mode;
      o.gpus = b.gpus;
      o.tensor_parallel_size = b.tensor_parallel_size;
      o.data_parallel_size = b.data_parallel_size;
      o.communicator = b.communicator;
      EngineDecodeReport r;
      std::string err;
      if (!run_engine_decode_bench(o, &r, &err)) {
        std::fprintf(stderr, "bench: engine-decode batch %lld async %s: %s\n", (long long)batch, mode, err.c_str());
        rc = 1;
        continue;
      }
      if (r.device_events)
        std::printf("%-6lld %-36s %8lld %12.4f %12.4f %12.4f %8.2f\n", (long long)batch, r.step_mode.c_str(),
                    (long long)r.steps, r.wall_ms_per_step, r.busy_ms_per_step, r.idle_ms_per_step,
                    100.0 * r.idle_fraction());
      else
        std::printf("%-6lld %-36s %8lld %12.4f %12s %12s %8s\n", (long long)batch, r.step_mode.c_str(),
                    (long long)r.steps, r.wall_ms_per_step, "-", "-", "-");
      std::fflush(stdout);
    }
  return rc;
}

void print_header(const BenchReport& rep) {
  std::printf("bench: %s, %lld layers, %s\n", rep.model_dir.c_str(), (long long)rep.num_layers,
              rep.runner_name.c_str());
}

double ratio(double ms, double floor_ms) { return floor_ms > 0 ? ms / floor_ms : 0.0; }

void print_case(const BenchCase& c, const BenchCeilings& ceil, int64_t layers) {
  if (c.step_ms <= 0) {  // failed before anything was measured
    std::fprintf(stderr, "bench: %s: %s\n", c.title.c_str(), c.error.c_str());
    return;
  }
  std::printf("\n== %s: %lld seqs x %lld new tokens, context %lld", c.title.c_str(), (long long)c.seqs,
              (long long)c.new_tokens, (long long)c.context);
  if (c.chunk > 0) std::printf(", in chunks of %lld tokens", (long long)c.chunk);
  std::printf(" ==\n");
  std::printf("ceilings (%s): copy %.2f TB/s, BF16 %.0f TFLOP/s, FP8 %.0f TFLOP/s; state %s; floors count the minimum "
              "work (docs/kernels.md)\n",
              ceil.source.c_str(), ceil.hbm_bytes_per_s / 1e12, ceil.bf16_flops / 1e12, ceil.fp8_flops / 1e12,
              ceil.state_profile.c_str());
  // Headlines: the step as a user runs it, next to the sum of op times; per layer with the head apart.
  if (c.user_ms > 0) {
    std::printf("%-22s %12.4f %12.4f %8.2f   (", "STEP AS RUN", c.user_ms, c.user_floor_ms, ratio(c.user_ms, c.user_floor_ms));
    if (c.user_chunk > 0) {
      std::printf("prefill in chunks of %lld tokens, no per-op events, host wall", (long long)c.user_chunk);
      if (c.user_device_ms >= 0) std::printf("; device busy %.4f ms", c.user_device_ms);
      std::printf(")\n");
    } else {
      std::printf("CUDA graph replay, host wall)\n");
    }
  }
  std::printf("%-22s %12.4f %12.4f %8.2f   (sum of op times)\n", "SUM OF OPS", c.ops_ms, c.floor_ms,
              ratio(c.ops_ms, c.floor_ms));
  std::printf("%-22s %12.4f %12.4f %8.2f   (ops of one layer, mean of %lld)\n", "PER LAYER", c.layers_ms / double(layers),
              c.layers_floor_ms / double(layers), ratio(c.layers_ms, c.layers_floor_ms), (long long)layers);
  std::printf("%-22s %12.4f %12.4f %8.2f   (embed, hc_head, lm_head)\n", "HEAD APART", c.head_ms, c.head_floor_ms,
              ratio(c.head_ms, c.head_floor_ms));
  std::printf("%-22s %12s %12s %8s %14s\n", "op (all layers)", "measured ms", "floor ms", "ratio", "per layer ms");
  for (const BenchOp& op : c.ops)
    std::printf("%-22s %12.4f %12.4f %8.2f %14.4f\n", op.name.c_str(), op.measured_ms, op.floor_ms, op.ratio(),
                op.measured_ms / double(layers));
  std::printf("%-22s %12.4f %12.4f %8.2f   (sum of op times)\n", "total ops", c.ops_ms, c.floor_ms,
              c.ops_ms / c.floor_ms);
  std::printf("%-22s %12.4f %12.4f %8.2f   (host wall, incl. plan upload and logits download)\n", "step", c.step_ms,
              c.floor_ms, c.step_ms / c.floor_ms);
  std::printf("per layer: %.4f ms; tokens/s: %.1f\n", c.ops_ms / double(layers), c.tokens_per_s());
  if (c.chunk > 0) std::printf("TTFT: %.1f ms (all chunks, host wall)\n", c.step_ms);
  if (c.peak_device_bytes > 0) std::printf("peak device memory: %.2f GiB\n", c.peak_device_bytes / double(1 << 30));
  if (c.comm_bytes_per_step >= 0)
    std::printf("collectives: %.3f MB sent per step (all ranks), %.0f calls per step, %.4f ms per step in rank 0's "
                "collective ops\n", c.comm_bytes_per_step / 1e6, c.comm_calls_per_step, c.comm_ms);
  if (c.graph_step_ms > 0)
    std::printf("%-22s %12.4f %12.4f %8.2f   (CUDA graph replay + greedy sampling on the device, host wall; tokens/s %.1f)\n", "step (graph)",
                c.graph_step_ms, c.floor_ms, c.graph_step_ms / c.floor_ms, c.graph_tokens_per_s());
  if (!c.error.empty()) std::fprintf(stderr, "bench: %s: %s\n", c.title.c_str(), c.error.c_str());
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  BenchOptions o;
  bool engine_mode = false;
  int64_t prompt = 128, steps = 64;
  std::string async = "both";
  const auto on_switch = [&](const std::string& a) {
    if (a == "--engine-decode") engine_mode = true;
    else if (a == "--batch-invariant") o.batch_invariant = true;
    else return false;
    return true;
  };
  const int rc = parse_value_flags("bench", kUsage, argc, argv, [&](const std::string& a, const std::string& v) {
    constexpr long long kMaxTokens = 1ll << 40;
    bool ok = true;
    if (a == "--model") o.model_dir = v;
    else if (a == "--backend") o.backend = v;
    else if (a == "--load-format") o.load_format = v;
    else if (a == "--numerics") o.numerics = v;
    else if (a == "--layers") ok = parse_int_flag("bench", a, v, 0, 1 << 20, &o.num_layers);
    else if (a == "--communicator") o.communicator = v;
    else if (a == "--data-parallel-size") ok = parse_int_flag("bench", a, v, 1, 1 << 20, &o.data_parallel_size);
    else if (a == "--tensor-parallel-size") ok = parse_int_flag("bench", a, v, 1, 1 << 20, &o.tensor_parallel_size);
    else if (a == "--gpus") ok = parse_int_flag("bench", a, v, 1, 1 << 20, &o.gpus);
    else if (a == "--batch") ok = parse_int_list_flag("bench", a, v, 1, 1 << 24, &o.batches);
    else if (a == "--context") ok = parse_int_flag("bench", a, v, 0, kMaxTokens, &o.context);
    else if (a == "--prefill") ok = parse_int_flag("bench", a, v, 0, kMaxTokens, &o.prefill);
    else if (a == "--prefill-chunk") ok = parse_int_flag("bench", a, v, 0, kMaxTokens, &o.prefill_chunk);
    else if (a == "--iters") ok = parse_int_flag("bench", a, v, 1, 1 << 20, &o.iters);
    else if (a == "--verify-tokens") ok = parse_int_list_flag("bench", a, v, 1, 17, &o.verify_tokens);
    else if (a == "--prompt") ok = parse_int_flag("bench", a, v, 1, kMaxTokens, &prompt);
    else if (a == "--steps") ok = parse_int_flag("bench", a, v, 1, 1 << 24, &steps);
    else if (a == "--async-scheduling") async = v;
    else if (a == "--ceilings") o.ceilings = v;
    else if (a == "--state-profile") o.state_profile = v;
    else if (a == "--engram-placement") o.engram_placement = v;
    else if (a == "--state-format") o.state_format = v;
    else return FlagParse::kNotEngineFlag;
    return ok ? FlagParse::kOk : FlagParse::kError;
  }, on_switch);
  if (rc >= 0) return rc;
  (void)writes_results();  // one process per rank: rank 0 alone prints the report
  if (o.model_dir.empty()) {
    std::fprintf(stderr, "bench: --model is required\n%s", kUsage);
    return 2;
  }
  if (async != "on" && async != "off" && async != "both") {
    std::fprintf(stderr, "bench: --async-scheduling expects on, off or both, found '%s'\n", async.c_str());
    return 2;
  }
  if (engine_mode) return engine_decode(o, prompt, steps, async);
  // Print each case as it finishes (a full bench takes minutes), the header before the first.
  o.on_case = [](const BenchReport& rep) {
    if (rep.cases.size() == 1) print_header(rep);
    print_case(rep.cases.back(), rep.ceilings, rep.num_layers);
    std::fflush(stdout);
  };
  BenchReport rep;
  std::string error;
  if (!run_bench(o, &rep, &error)) {
    std::fprintf(stderr, "bench: %s\n", error.c_str());
    return 2;
  }
  if (rep.cases.empty()) print_header(rep);
  return rep.ok ? 0 : 1;
}

}  // namespace dsinfer::cli
