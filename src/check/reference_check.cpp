// Reference-logit comparison (see reference_check.h).
#include "check/reference_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <map>
#include <set>

#include "check/solo_sequence.h"

namespace dsinfer::check {

namespace {

// One prompt, normalised from either reference format: the prompt's logits (every position, or only the last
// one), then `steps` reference rows compared one by one; step 0 follows the prompt, step k > 0 follows feeding
// feed[k - 1]. The greedy check compares our argmax at each step with expected[k].
struct RefPrompt {
  size_t index = 0;  // N of prompt.N.*
  std::vector<int32_t> input_ids;
  std::vector<float> logits;  // [logit_rows, V]: all L positions, or the last one
  int64_t logit_rows = 0;
  std::vector<int32_t> feed, expected;
  std::vector<float> step_logits;  // [expected.size(), V] (empty: greedy tokens only)
};

Result<std::vector<int32_t>> read_ids(const io::TensorView& t) {
  if ((t.dtype != DType::I64 && t.dtype != DType::I32) || t.shape.size() != 1)
    return Status::errorf("{}: '{}' must be a 1-D I64 or I32 tensor, found {} {}", t.file, t.name, dtype_name(t.dtype),
                          io::shape_str(t.shape));
  std::vector<int32_t> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t(t.int_at(int64_t(i)));
  return v;
}

Result<std::vector<float>> read_f32(const io::TensorView& t, std::vector<int64_t> shape) {
  if (t.dtype != DType::F32 || t.shape != shape)
    return Status::errorf("{}: '{}' must be F32 {}, found {} {}", t.file, t.name, io::shape_str(shape), dtype_name(t.dtype),
                          io::shape_str(t.shape));
  std::vector<float> v(size_t(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

int32_t argmax(const float* v, int64_t n) { return int32_t(std::max_element(v, v + n) - v); }

// transformers format: prompt.{i}.logits [L, V]; greedy_logits[k] after feeding greedy_ids[:k].
Status read_hf_prompt(const std::map<std::string, io::TensorView>& ts, const std::string& p, int64_t V, RefPrompt& r) {
  auto lg = ts.find(p + "logits");
  if (lg == ts.end()) return Status::errorf("reference has '{}input_ids' but no '{}logits'", p, p);
  r.logit_rows = int64_t(r.input_ids.size());
  DSI_ASSIGN_OR_RETURN(r.logits, read_f32(lg->second, {r.logit_rows, V}));
  auto g = ts.find(p + "greedy_ids");
  if (g == ts.end()) return Status::ok();
  DSI_ASSIGN_OR_RETURN(r.expected, read_ids(g->second));
  if (!r.expected.empty()) r.feed.assign(r.expected.begin(), r.expected.end() - 1);
  if (auto gl = ts.find(p + "greedy_logits"); gl != ts.end()) {
    DSI_ASSIGN_OR_RETURN(r.step_logits, read_f32(gl->second, {int64_t(r.expected.size()), V}));
  }
  return Status::ok();
}

// Official format (official.safetensors): prompt.{i}.last_logits [V] of a prefill over the prompt and
// greedy_prefill_logits [n, V] of prefills over prompt + greedy_ids[:k+1]; the ids come from `ids`.
Status read_official_prompt(const std::map<std::string, io::TensorView>& ts, const std::string& p, int64_t V, RefPrompt& r,
                            const std::vector<int32_t>& greedy_ids) {
  r.logit_rows = 1;
  DSI_ASSIGN_OR_RETURN(r.logits, read_f32(ts.at(p + "last_logits"), {V}));
  r.step_logits = r.logits;
  r.feed = greedy_ids;
  if (auto gp = ts.find(p + "greedy_prefill_logits"); gp != ts.end()) {
    DSI_ASSIGN_OR_RETURN(std::vector<float> rows, read_f32(gp->second, {int64_t(greedy_ids.size()), V}));
    r.step_logits.insert(r.step_logits.end(), rows.begin(), rows.end());
  } else {
    r.feed.clear();
  }
  for (size_t k = 0; k * size_t(V) < r.step_logits.size(); ++k) r.expected.push_back(argmax(r.step_logits.data() + k * V, V));
  return Status::ok();
}

// Prompt indices present in the file (a reference may hold a subset, e.g. reference_noqat's prompts 0 and 5).
std::set<size_t> prompt_indices(const std::map<std::string, io::TensorView>& ts) {
  std::set<size_t> out;
  for (const auto& [name, t] : ts) {
    size_t i = 0, end = 0;
    if (name.rfind("prompt.", 0) != 0 || std::sscanf(name.c_str(), "prompt.%zu.%zn", &i, &end) != 1) continue;
    const std::string rest = name.substr(size_t(end));
    if (rest == "input_ids" || rest == "last_logits") out.insert(i);
  }
  return out;
}

Result<std::vector<RefPrompt>> read_reference(const io::SafetensorsFile& f, const io::SafetensorsFile* ids, int64_t vocab) {
  std::vector<RefPrompt> out;
  const auto& ts = f.tensors();
  for (size_t i : prompt_indices(ts)) {
    const std::string p = "prompt." + std::to_string(i) + ".";
    RefPrompt r;
    r.index = i;
    if (auto it = ts.find(p + "input_ids"); it != ts.end()) {
      DSI_ASSIGN_OR_RETURN(r.input_ids, read_ids(it->second));
      if (r.input_ids.empty()) return Status::errorf("'{}input_ids' is empty", p);
      DSI_RETURN_IF_ERROR(read_hf_prompt(ts, p, vocab, r));
    } else {
      if (!ids) return Status::errorf("'{}last_logits' (official format) needs the prompts' ids from the fixture's "
                                      "reference.safetensors", p);
      const auto& its = ids->tensors();
      if (!its.count(p + "input_ids")) return Status::errorf("{}: no '{}input_ids' for the official logits", ids->path(), p);
      DSI_ASSIGN_OR_RETURN(r.input_ids, read_ids(its.at(p + "input_ids")));
      std::vector<int32_t> greedy;
      if (its.count(p + "greedy_ids")) {
        DSI_ASSIGN_OR_RETURN(greedy, read_ids(its.at(p + "greedy_ids")));
      }
      DSI_RETURN_IF_ERROR(read_official_prompt(ts, p, vocab, r, greedy));
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) return Status::error("reference file holds no prompt.N.input_ids or prompt.N.last_logits");
  return out;
}

}  // namespace

bool ReferenceCheck::ok() const {
  if (min_greedy_match >= 1.0) return std::all_of(prompts.begin(), prompts.end(), [](const PromptCheck& p) { return p.ok; });
  size_t matched = 0, total = 0;
  for (const PromptCheck& p : prompts) {
    if (!p.logits_ok) return false;
    matched += p.greedy_matched;
    total += p.greedy_total;
  }
  return double(matched) >= min_greedy_match * double(total);
}

double default_tolerance(runner::ModelRunner& r) {
  if (!r.diagnostics().exact_math()) return 3e-2;
  return r.diagnostics().fp32_weights() ? 1e-4 : 1e-3;
}

Result<ReferenceCheck> check_reference(runner::ModelRunner& runner, const io::SafetensorsFile& reference, double tol,
                                       bool keep_logits, const io::SafetensorsFile* ids, double min_greedy_match) {
  const int64_t V = runner.config().vocab_size;
  if (tol < 0) tol = default_tolerance(runner);
  auto prompts = read_reference(reference, ids, V);
  if (!prompts) return prompts.status().with_context(reference.path());
  int64_t max_len = 1;
  for (const RefPrompt& r : *prompts) max_len = std::max<int64_t>(max_len, int64_t(r.input_ids.size() + r.feed.size()));
  DSI_ASSIGN_OR_RETURN(cache::StateCache cache, bind_single_sequence_cache(runner, max_len));
  ReferenceCheck out;
  out.min_greedy_match = min_greedy_match;
  for (size_t i = 0; i < prompts->size(); ++i) {
    const RefPrompt& r = (*prompts)[i];
    const int64_t L = int64_t(r.input_ids.size());
    SoloSequence seq(runner, cache);
    std::vector<float> logits;
    DSI_RETURN_IF_ERROR(seq.step(r.input_ids, true, logits).with_context(fmt::format("prompt {}", r.index)));
    double max_err = 0, max_ref = 0;
    std::vector<float> errs;
    auto compare = [&](const float* ours, const float* ref, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        errs.push_back(std::fabs(ours[k] - ref[k]));
        max_err = std::max(max_err, double(errs.back()));
        max_ref = std::max(max_ref, double(std::fabs(ref[k])));
      }
    };
    compare(logits.data() + (L - r.logit_rows) * V, r.logits.data(), r.logit_rows * V);
    std::vector<int64_t> ours;
    std::vector<float> greedy_logits, step(logits.end() - V, logits.end());
    PromptCheck pc;
    pc.index = r.index;
    pc.len = L;
    pc.greedy_total = r.expected.size();
    for (size_t k = 0; k < r.expected.size(); ++k) {
      if (k > 0) {
        const int32_t feed = r.feed[k - 1];
        DSI_RETURN_IF_ERROR(seq.step({&feed, 1}, false, step).with_context(fmt::format("prompt {} decode step {}", r.index, k - 1)));
      }
      if (!r.step_logits.empty()) compare(step.data(), r.step_logits.data() + k * size_t(V), V);
      if (keep_logits) greedy_logits.insert(greedy_logits.end(), step.begin(), step.end());
      const int32_t tok = argmax(step.data(), V);
      ours.push_back(tok);
      pc.greedy_matched += tok == r.expected[k];
    }
    pc.rel_err = max_ref > 0 ? max_err / max_ref : max_err;
    if (!errs.empty()) {
      auto at = errs.begin() + std::ptrdiff_t(0.99 * double(errs.size() - 1));
      std::nth_element(errs.begin(), at, errs.end());
      pc.p99_rel_err = max_ref > 0 ? double(*at) / max_ref : double(*at);
    }
    pc.logits_ok = pc.rel_err <= tol;
    pc.ok = pc.logits_ok && pc.greedy_matched == pc.greedy_total;
    out.prompts.push_back(pc);
    if (keep_logits) {
      const std::string p = "prompt." + std::to_string(r.index) + ".";
      out.computed.push_back(io::make_i64_tensor(p + "input_ids", std::vector<int64_t>(r.input_ids.begin(), r.input_ids.end())));
      out.computed.push_back(io::make_f32_tensor(p + "logits", {L, V}, logits));
      if (!ours.empty()) {
        out.computed.push_back(io::make_i64_tensor(p + "greedy_ids", ours));
        out.computed.push_back(io::make_f32_tensor(p + "greedy_logits", {int64_t(ours.size()), V}, greedy_logits));
      }
    }
  }
  return out;
}

}  // namespace dsinfer::check
