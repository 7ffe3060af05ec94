// `dsinfer check-reference`: the CPU reference against reference logits (fixture format; see
// src/model/reference_check.h). Prints per prompt the normalised logit error and the greedy match; exits 0 when
// every prompt is within tolerance with identical greedy tokens, 1 when not, 2 on bad input.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "apps/dsinfer/commands.h"
#include "check/reference_check.h"
#include "engine/model_runner.h"

namespace dsinfer::cli {

namespace {
void usage() {
  std::fprintf(stderr,
               "usage: dsinfer check-reference --model DIR [--reference FILE] [--numerics hf|official]\n"
               "                               [--backend cpu|cuda] [--tolerance X] [--dump-logits FILE]\n"
               "  --reference    default DIR/reference.safetensors; a file in the official format (DeepSeek-V4.1\n"
               "                 official.safetensors: last_logits / greedy_prefill_logits) takes its ids from it\n"
               "  --numerics     official (default), hf (transformers semantics) or hf-noqat (hf without the\n"
               "                 DeepSeek-V4.1 KV / indexer quantizers; for reference_noqat.safetensors)\n"
               "  --backend      cpu (reference, default) or cuda\n"
               "  --fast-gemm    cuda: check the tensor-core GEMM path (bf16 operands) instead of exact fp32 GEMMs\n"
               "  --tolerance    max allowed max|logit error| / max|reference logit| (default: cpu 1e-4 for fp32\n"
               "                 checkpoints, 1e-3 for bf16/f16/fp8/fp4 ones; cuda 3e-2; see docs/decisions.md)\n"
               "  --dump-logits  write the computed logits as safetensors with the reference's keys\n"
               "  --min-greedy-match F  pass when at least this fraction of all greedy steps match (default 1:\n"
               "                 every step of every prompt); each prompt must still be within tolerance\n");
}
int fail(const Status& s) {
  std::fprintf(stderr, "check-reference: %s\n", s.message().c_str());
  return 2;
}
}  // namespace

int cmd_check_reference(int argc, char** argv) {
  std::string model_dir, ref_path, dump_path, numerics = "official", backend = "cpu";
  double tol = -1, min_greedy = 1.0;
  bool fast_gemm = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "-h" || a == "--help") return usage(), 0;
    if (a == "--fast-gemm") {
      fast_gemm = true;
      continue;
    }
    if (!v) {
      std::fprintf(stderr, "check-reference: unknown or incomplete option '%s'\n", a.c_str());
      return usage(), 2;
    }
    ++i;
    if (a == "--model") model_dir = v;
    else if (a == "--reference") ref_path = v;
    else if (a == "--numerics") numerics = v;
    else if (a == "--backend") backend = v;
    else if (a == "--dump-logits") dump_path = v;
    else if (a == "--min-greedy-match") {
      char* end = nullptr;
      min_greedy = std::strtod(v, &end);
      if (*end || !(min_greedy >= 0 && min_greedy <= 1))
        return fail(Status::errorf("--min-greedy-match '{}' is not a fraction in [0, 1]", v));
    } else if (a == "--tolerance") {
      char* end = nullptr;
      tol = std::strtod(v, &end);
      if (*end || !(tol >= 0)) return fail(Status::errorf("--tolerance '{}' is not a non-negative number", v));
    } else {
      std::fprintf(stderr, "check-reference: unknown option '%s'\n", a.c_str());
      return usage(), 2;
    }
  }
  if (model_dir.empty()) return usage(), 2;
  if (ref_path.empty()) ref_path = (std::filesystem::path(model_dir) / "reference.safetensors").string();
  // On the GPU the default is exact (fp32) GEMMs, so the check tests every kernel at reference precision;
  // --fast-gemm checks the production tensor-core path (bf16 operands) instead.
  engine::RunnerOptions ro;
  ro.model_dir = model_dir;
  ro.exact_gemm = !fast_gemm;
  auto be = engine::parse_backend(backend);
  if (!be) return fail(be.status());
  ro.backend = *be;
  auto num = model::Numerics::from_name(numerics);
  if (!num) return fail(num.status());
  ro.numerics = *num;
  auto runner = engine::create_runner(ro);
  if (!runner) return fail(runner.status());
  auto ref = io::SafetensorsFile::open(ref_path);
  if (!ref) return fail(ref.status());
  if (tol < 0) tol = check::default_tolerance(**runner);
  std::printf("model %s, reference %s, %s, tolerance %.1e\n", model_dir.c_str(), ref_path.c_str(), (*runner)->name().c_str(),
              tol);
  // The official format carries no ids: they come from the fixture's own reference.safetensors.
  const std::string ids_path = (std::filesystem::path(model_dir) / "reference.safetensors").string();
  std::optional<io::SafetensorsFile> ids;
  if (ref_path != ids_path && std::filesystem::exists(ids_path)) {
    auto f = io::SafetensorsFile::open(ids_path);
    if (!f) return fail(f.status());
    ids.emplace(std::move(*f));
  }
  auto res = check::check_reference(**runner, *ref, tol, !dump_path.empty(), ids ? &*ids : nullptr, min_greedy);
  if (!res) return fail(res.status());
  for (size_t i = 0; i < res->prompts.size(); ++i) {
    const check::PromptCheck& p = res->prompts[i];
    std::printf("prompt %zu: len %3lld  max|err|/max|ref| = %.3e  greedy %zu/%zu  %s\n", p.index, (long long)p.len, p.rel_err,
                p.greedy_matched, p.greedy_total, (min_greedy < 1 ? p.logits_ok : p.ok) ? "OK" : "FAIL");
  }
  if (min_greedy < 1) {
    size_t m = 0, t = 0;
    for (const check::PromptCheck& p : res->prompts) m += p.greedy_matched, t += p.greedy_total;
    std::printf("greedy %zu/%zu steps match (need %.0f%%)\n", m, t, 100.0 * min_greedy);
  }
  if (!dump_path.empty()) {
    if (Status s = io::write_safetensors(dump_path, res->computed); !s) return fail(s);
  }
  std::printf("%s\n", res->ok() ? "PASS" : "FAIL");
  return res->ok() ? 0 : 1;
}

}  // namespace dsinfer::cli
