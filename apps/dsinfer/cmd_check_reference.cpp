// `dsinfer check-reference`: a backend against reference logits (fixture format; see
// include/dsinfer/diagnostics.h). Prints per prompt the normalised logit error and the greedy match; exits 0 when
// every prompt is within tolerance with identical greedy tokens, 1 when not, 2 on bad input.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "apps/dsinfer/commands.h"
#include "apps/dsinfer/engine_flags.h"
#include "dsinfer/diagnostics.h"

namespace dsinfer::cli {

namespace {
// To stdout when asked for (--help), else to stderr after a usage error.
void usage(FILE* f = stderr) {
  std::fprintf(f,
               "usage: dsinfer check-reference --model DIR [--reference FILE] [--numerics hf|official]\n"
               "                               [--backend cpu|cuda] [--tolerance X] [--dump-logits FILE]\n"
               "  --reference    default DIR/reference.safetensors; a file in the official format (DeepSeek-V4.1\n"
               "                 official.safetensors: last_logits / greedy_prefill_logits) takes its ids from it\n"
               "  --numerics     official, hf (transformers semantics) or hf-noqat (hf without the DeepSeek-V4.1 KV /\n"
               "                 indexer quantizers); default: the numerics that produced the reference (its metadata\n"
               "                 \"numerics\", else reference.json next to it, else hf)\n"
               "  --backend      cpu (reference, default) or cuda\n"
               "  --gpus N       cuda: N GPUs of this node, routed experts split over them (default 1)\n"
               "  --communicator auto|nccl|in-process   gpus > 1 (in-process: the ranks may share one GPU)\n"
               "  --data-parallel-size N  = --gpus: DP attention (each prompt on one rank, its experts dispatched)\n"
               "  --tensor-parallel-size N  = --gpus: TP attention (each rank the query heads of its output groups)\n"
               "  --engram-placement device|host   DeepSeek-V4.1's Engram tables (host: in host memory, fetched per step)\n"
               "  --fast-gemm    cuda: check the tensor-core GEMM path (bf16 operands) instead of exact fp32 GEMMs\n"
               "  --tolerance    max allowed max|logit error| / max|reference logit| (default: cpu 1e-4 for fp32\n"
               "                 checkpoints, 1e-3 for bf16/f16/fp8/fp4 ones; cuda 3e-2; see docs/decisions.md)\n"
               "  --dump-logits  write the computed logits as safetensors with the reference's keys\n"
               "  --min-greedy-match F  pass when at least this fraction of all greedy steps match (default 1:\n"
               "                 every step of every prompt); each prompt must still be within tolerance\n"
               "  --fidelity     instead: the fast path (cuda tensor-core GEMMs) against the exact path, teacher-forced\n"
               "                 over a deterministic stream (reference prompt ids continued by seeded samples of the\n"
               "                 exact path); reports top-1 agreement, mean / max KL(exact || fast), max |logit diff|\n"
               "  --positions N  fidelity: positions compared (default 2048); --seq-len N tokens per sequence (512)\n"
               "  --fidelity-chunk N  fidelity: tokens per teacher-forced step (default 256; above 1024 the fast\n"
               "                 path runs its prefill kernels)\n"
               "  --min-top1 F   fidelity: pass threshold on top-1 agreement (default 0.995)\n"
               "  --max-kl X     fidelity: pass threshold on the mean KL (default 1e-3)\n");
}
int fail(const std::string& message) {
  std::fprintf(stderr, "check-reference: %s\n", message.c_str());
  return 2;
}
int print_fidelity(const CheckReferenceReport& rep) {
  const FidelityResult& f = rep.fidelity;
  std::printf("fidelity: model %s (numerics %s), exact \"%s\" vs fast \"%s\"\n", rep.model_dir.c_str(),
              rep.numerics.c_str(), f.exact_runner.c_str(), f.fast_runner.c_str());
  std::printf("positions %lld in %lld sequences (reference prompt ids + seeded samples of the exact path)\n",
              (long long)f.positions, (long long)f.sequences);
  std::printf("top-1 agreement %.3f%% (%lld/%lld)  mean KL %.3e  max KL %.3e  max|logit diff| %.4g\n", 100.0 * f.top1,
              (long long)f.top1_matches, (long long)f.positions, f.mean_kl, f.max_kl, f.max_logit_diff);
  std::printf("thresholds: top-1 >= %.2f%%, mean KL <= %.1e\n%s\n", 100.0 * f.min_top1, f.max_kl_allowed,
              rep.ok ? "PASS" : "FAIL");
  return rep.ok ? 0 : 1;
}
}  // namespace

int cmd_check_reference(int argc, char** argv) {
  CheckReferenceOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (a == "--fast-gemm") {
      // On the GPU the default is exact (fp32) GEMMs, so the check tests every kernel at reference precision;
      // --fast-gemm checks the production tensor-core path (bf16 operands) instead.
      o.exact_gemm = false;
      continue;
    }
    if (a == "--fidelity") {
      o.fidelity = true;
      continue;
    }
    if (!v) {
      std::fprintf(stderr, "check-reference: unknown or incomplete option '%s'\n", a.c_str());
      usage();
      return 2;
    }
    ++i;
    if (a == "--model") o.model_dir = v;
    else if (a == "--reference") o.reference_path = v;
    else if (a == "--numerics") o.numerics = v;
    else if (a == "--backend") o.backend = v;
    else if (a == "--gpus") {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (*end || n < 1 || n > 1024) return fail(std::string("--gpus '") + v + "' is not an integer in [1, 1024]");
      o.gpus = int32_t(n);
    }
    else if (a == "--communicator") o.communicator = v;
    else if (a == "--data-parallel-size") {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (*end || n < 1 || n > 1024) return fail(std::string("--data-parallel-size '") + v + "' is not an integer in [1, 1024]");
      o.data_parallel_size = int32_t(n);
    }
    else if (a == "--tensor-parallel-size") {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (*end || n < 1 || n > 1024) return fail(std::string("--tensor-parallel-size '") + v + "' is not an integer in [1, 1024]");
      o.tensor_parallel_size = int32_t(n);
    }
    else if (a == "--engram-placement") o.engram_placement = v;
    else if (a == "--dump-logits") o.dump_logits_path = v;
    else if (a == "--tolerance") {
      char* end = nullptr;
      o.tolerance = std::strtod(v, &end);
      if (*end || !(o.tolerance >= 0)) return fail(std::string("--tolerance '") + v + "' is not a non-negative number");
    } else if (a == "--min-greedy-match") {
      char* end = nullptr;
      o.min_greedy_match = std::strtod(v, &end);
      if (*end || !(o.min_greedy_match >= 0 && o.min_greedy_match <= 1))
        return fail(std::string("--min-greedy-match '") + v + "' is not a fraction in [0, 1]");
    } else if (a == "--positions" || a == "--seq-len" || a == "--fidelity-chunk") {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (*end || n < 1 || n > (1ll << 30)) return fail(a + " '" + v + "' is not a positive integer");
      int64_t& field = a == "--positions" ? o.fidelity_positions
                       : a == "--seq-len" ? o.fidelity_seq_len
                                          : o.fidelity_chunk;
      field = n;
    } else if (a == "--min-top1" || a == "--max-kl") {
      char* end = nullptr;
      const double x = std::strtod(v, &end);
      if (*end || !(x >= 0) || (a == "--min-top1" && x > 1)) return fail(a + " '" + v + "' is out of range");
      (a == "--min-top1" ? o.min_top1 : o.max_kl) = x;
    } else {
      std::fprintf(stderr, "check-reference: unknown option '%s'\n", a.c_str());
      usage();
      return 2;
    }
  }
  if (o.model_dir.empty()) {
    usage();
    return 2;
  }
  (void)writes_results();  // one process per rank: rank 0 alone prints the report
  CheckReferenceReport rep;
  std::string error;
  if (!check_reference(o, &rep, &error)) return fail(error);
  if (o.fidelity) return print_fidelity(rep);
  std::printf("model %s, reference %s, %s, tolerance %.1e (numerics: %s)\n", rep.model_dir.c_str(),
              rep.reference_path.c_str(), rep.runner_name.c_str(), rep.tolerance, rep.numerics_source.c_str());
  const bool partial = rep.min_greedy_match < 1;
  for (const PromptCheckResult& p : rep.prompts)
    std::printf("prompt %lld: len %3lld  max|err|/max|ref| = %.3e  p99 %.3e  greedy %lld/%lld  %s\n", (long long)p.index,
                (long long)p.len, p.rel_err, p.p99_rel_err, (long long)p.greedy_matched, (long long)p.greedy_total,
                (partial ? p.logits_ok : p.ok) ? "OK" : "FAIL");
  if (partial)
    std::printf("greedy %lld/%lld steps match (need %.0f%%)\n", (long long)rep.greedy_matched, (long long)rep.greedy_total,
                100.0 * rep.min_greedy_match);
  std::printf("%s\n", rep.ok ? "PASS" : "FAIL");
  return rep.ok ? 0 : 1;
}

}  // namespace dsinfer::cli
