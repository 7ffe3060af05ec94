// `dsinfer plan`: the memory a model needs per GPU for 1, 2, 4, 8 GPUs, from its config.json alone
// (dsinfer::plan_memory, include/dsinfer/diagnostics.h), and the layout (EP, DP or TP attention) it would pick for
// each GPU count and decode batch, with the alternatives and why. Runs anywhere: no GPU, no weights.
#include <cstdio>
#include <sstream>
#include <string>

#include "apps/dsinfer/commands.h"
#include "apps/dsinfer/engine_flags.h"
#include "dsinfer/diagnostics.h"

namespace dsinfer::cli {

namespace {

const char* const kUsage =
    "usage: dsinfer plan --model DIR [--gpus 1,2,4,8] [--gpu-memory-gib 139] [--context N (the model's maximum)]\n"
    "                    [--num-redundant-experts R] [--batch 1,64,256] [--max-num-batched-tokens 8192]\n"
    "  weights per GPU in the official checkpoint formats (dense replicated, routed experts split over the GPUs),\n"
    "  one step's activations per GPU, the fp32 state per sequence, how many sequences of --context tokens fit per\n"
    "  GPU in what weights and activations leave, and for each GPU count and decode batch the layout it would pick\n"
    "  (EP, DP or TP attention), with the alternatives' estimates and why\n";

double gib(double bytes) { return bytes / double(int64_t(1) << 30); }

}  // namespace

int cmd_plan(int argc, char** argv) {
  MemoryPlanOptions o;
  const int rc = parse_value_flags("plan", kUsage, argc, argv, [&](const std::string& a, const std::string& v) {
    bool ok = true;
    if (a == "--model") o.model_dir = v;
    else if (a == "--gpu-memory-gib") ok = parse_real_flag("plan", a, v, 1e-3, 1e6, &o.gpu_memory_gib);
    else if (a == "--context") ok = parse_int_flag("plan", a, v, 1, 1ll << 40, &o.context);
    else if (a == "--max-num-batched-tokens") ok = parse_int_flag("plan", a, v, 1, 1ll << 32, &o.step_tokens);
    else if (a == "--num-redundant-experts") ok = parse_int_flag("plan", a, v, 0, 1 << 20, &o.redundant_experts);
    else if (a == "--gpus") ok = parse_int_list_flag("plan", a, v, 1, 1 << 16, &o.gpus);
    else if (a == "--batch") ok = parse_int_list_flag("plan", a, v, 1, 1 << 24, &o.batches);
    else return FlagParse::kNotEngineFlag;
    return ok ? FlagParse::kOk : FlagParse::kError;
  });
  if (rc >= 0) return rc;
  if (o.model_dir.empty()) {
    std::fprintf(stderr, "plan: --model is required\n%s", kUsage);
    return 2;
  }
  MemoryPlan p;
  std::string err;
  if (!plan_memory(o, &p, &err)) {
    std::fprintf(stderr, "plan: %s\n", err.c_str());
    return 1;
  }
  std::printf("plan: %s (%s, %lld layers), official checkpoint formats, %.1f GiB per GPU\n", o.model_dir.c_str(),
              p.model_type.c_str(), (long long)p.layers, o.gpu_memory_gib);
  std::printf("weights: %.2f GiB dense, replicated on every GPU", gib(p.dense_bytes));
  if (p.engram_table_bytes > 0) std::printf(" (of which %.2f GiB Engram tables)", gib(p.engram_table_bytes));
  std::printf("; %.2f GiB routed experts, split over the GPUs\n", gib(p.expert_bytes));
  std::printf("state (fp32 rows; EP: every GPU holds every sequence, DP: each GPU its own): %.0f B per token + "
              "%.2f MiB fixed = %.2f MiB per "
              "%lld-token sequence%s\n", p.state_bytes_per_token, p.state_fixed_bytes / double(1 << 20),
              p.state_bytes_per_sequence / double(1 << 20), (long long)p.context,
              o.context > 0 ? "" : " (the model's maximum; --context N for another)");
  if (p.state_fp8_bytes_per_sequence > 0)
    std::printf("state in DeepSeek's storage format (FP8 MODEL1 rows + FP8 indexer keys; the one-GPU CUDA runner's "
                "default with official numerics, --state-format fp32 for fp32 rows; expert-parallel ranks keep fp32 rows "
                "so far): %.0f B per token + %.2f MiB fixed = %.2f MiB per sequence\n", p.state_fp8_bytes_per_token,
                p.state_fp8_fixed_bytes / double(1 << 20), p.state_fp8_bytes_per_sequence / double(1 << 20));
  std::printf("activations: one step of %lld tokens per GPU (EP and TP: every token; DP: its share), counted before "
              "the state\n", (long long)o.step_tokens);
  std::printf("%-5s %16s %16s %16s %5s %22s %22s %14s %14s\n", "gpus", "weights/GPU GiB", "activations GiB",
              "limit (92%) GiB", "fits", "sequences per GPU", "with the FP8 state", "EP: sequences", "DP: sequences");
  for (const MemoryPlanRow& r : p.rows)
    std::printf("%-5d %16.2f %16.2f %16.2f %5s %22lld %22s %14lld %14lld\n", r.gpus, gib(r.weight_bytes),
                gib(r.activation_bytes), gib(r.limit_bytes), r.fits ? "yes" : "no", (long long)r.sequences,
                p.state_fp8_bytes_per_sequence > 0 ? std::to_string(r.sequences_fp8).c_str() : "-",
                (long long)r.sequences_ep, (long long)r.sequences_dp);
  std::printf("(EP = --data-parallel-size 1: the state replicated; DP = --data-parallel-size N: each GPU its own "
              "sequences; both count every GPU together; DP is built on the cpu backend so far)\n");
  std::printf("\nlayout for a decode step of B sequences of %lld tokens (estimates of what differs between the "
              "layouts: attention and communication; the routed experts' work is the same in all three. H200: HBM "
              "4.8 TB/s, 989 TFLOP/s, NVLink 450 GB/s, 10 us per collective)\n", (long long)p.context);
  std::printf("%-5s %6s %-32s %14s %12s %6s %14s %14s %9s %9s %9s\n", "gpus", "batch", "layout", "fits (seqs)",
              "comm MB", "colls", "attn wts MB", "attn state MB", "attn ms", "comm ms", "step ms");
  for (const MemoryPlanRow& r : p.rows)
    for (const LayoutPlanChoice& c : r.layouts) {
      for (size_t i = 0; i < c.options.size(); ++i) {
        const LayoutPlan& e = c.options[i];
        const std::string fit = (e.fits ? "yes (" : "no (") + std::to_string(e.sequences_fit) + ")";
        std::printf("%-5d %6lld %-32s %14s %12.1f %6lld %14.1f %14.1f %9.3f %9.3f %9.3f%s\n", r.gpus,
                    (long long)c.batch, e.layout.c_str(), fit.c_str(), e.comm_bytes / 1e6, (long long)e.collectives,
                    e.attn_weight_bytes / 1e6, e.attn_state_bytes / 1e6, e.attn_ms, e.comm_ms, e.step_ms,
                    int32_t(i) == c.best ? "  <- pick" : "");
      }
      std::printf("      pick for %d GPU(s), batch %lld: %s\n", r.gpus, (long long)c.batch,
                  c.best >= 0 ? c.reason.c_str() : ("none: " + c.reason).c_str());
    }
  if (p.engram_table_bytes > 0) {
    std::printf("\nEngram tables (%.2f GiB) off the replicated weights (--engram-placement; %.1f KiB of rows per "
                "token):\n  sharded: 1/N of every table's rows per GPU, one gather of the looked-up rows per Engram "
                "layer\n  host: the tables in pinned host memory (%.2f GiB per node), each step's rows fetched over "
                "PCIe behind the layers before them\n", gib(p.engram_table_bytes), p.engram_bytes_per_token / 1024.0,
                gib(p.engram_table_bytes));
    std::printf("%-5s %-9s %16s %5s %20s %22s %14s\n", "gpus", "placement", "weights/GPU GiB", "fits",
                "state left/GPU GiB", "sequences per GPU", "DP: sequences");
    for (const MemoryPlanRow& r : p.rows)
      for (const bool host : {false, true}) {
        const double w = host ? r.tables_host_bytes : r.tables_split_bytes;
        const int64_t seqs = host ? r.sequences_host : r.sequences_sharded;
        std::printf("%-5d %-9s %16.2f %5s %20.2f %22lld %14lld\n", r.gpus, host ? "host" : "sharded", gib(w),
                    w <= r.limit_bytes ? "yes" : "no", gib(host ? r.state_left_host : r.state_left_sharded),
                    (long long)seqs, (long long)seqs * r.gpus);
      }
  }
  return 0;
}

}  // namespace dsinfer::cli
