// sample_step (see header).
#include "scheduler/step_sampling.h"

namespace dsinfer::scheduler {

namespace {

bool all_finite(std::span<const float> v) {
  // x - x is 0 for finite x and NaN for NaN / +-Inf: one branch-free pass the compiler vectorises.
  float acc = 0.0f;
  for (float x : v) acc += x - x;
  return acc == 0.0f;
}

}  // namespace

Status sample_step(const BatchPlan& plan, std::span<const float> logits, int64_t vocab_size, int64_t eos_token_id,
                   sampling::Sampler& sampler, std::vector<StepOutput>& out, std::vector<int32_t>& nonfinite,
                   const sampling::TokenBitmask* bitmask) {
  if (int64_t(logits.size()) != int64_t(plan.num_logits()) * vocab_size)
    return Status::errorf("sample_step: logits hold {} floats, expected {} rows x vocab {}", logits.size(),
                          plan.num_logits(), vocab_size);
  out.clear();
  nonfinite.clear();
  for (int32_t i = 0; i < plan.num_seqs(); ++i) {
    const SeqPlan& sp = plan.seqs[size_t(i)];
    if (!sp.needs_logits) continue;
    sampling::SampleInput in;
    in.logits = logits.subspan(size_t(sp.logits_row) * size_t(vocab_size), size_t(vocab_size));
    if (!all_finite(in.logits)) {
      nonfinite.push_back(i);
      continue;
    }
    in.params = sp.params;
    in.prompt_tokens = sp.prompt_tokens;
    in.output_tokens = sp.output_tokens;
    in.rng = sp.rng;
    in.eos_token_id = eos_token_id;
    if (bitmask) in.token_bitmask = bitmask->row_if_active(sp.logits_row);
    StepOutput o;
    o.plan_index = i;
    o.seq_id = sp.seq_id;
    o.samples.push_back(sampler.sample(in));
    out.push_back(std::move(o));
  }
  return Status::ok();
}

Status pack_step_rows(const BatchPlan& plan, int64_t vocab_size, int64_t eos_token_id,
                      const sampling::TokenBitmask* bitmask, sampling::PackedRows& rows) {
  rows.clear(vocab_size);
  for (const SeqPlan& sp : plan.seqs) {
    if (!sp.needs_logits) continue;
    sampling::RowRequest r;
    r.logits_row = sp.logits_row;
    if (bitmask) r.token_bitmask = bitmask->row_if_active(sp.logits_row);
    r.params = sp.params;
    r.prompt_tokens = sp.prompt_tokens;
    r.output_tokens = sp.output_tokens;
    r.rng = sp.rng;
    r.eos_token_id = eos_token_id;
    DSI_RETURN_IF_ERROR(rows.add(r));
  }
  return Status::ok();
}

Status collect_device_samples(const BatchPlan& plan, std::span<const ops::SampleRowOut> results,
                              std::vector<StepOutput>& out, std::vector<int32_t>& nonfinite) {
  out.clear();
  nonfinite.clear();
  size_t j = 0;
  for (int32_t i = 0; i < plan.num_seqs(); ++i) {
    const SeqPlan& sp = plan.seqs[size_t(i)];
    if (!sp.needs_logits) continue;
    if (j >= results.size()) return Status::errorf("device sampling: {} results for a plan with more rows", results.size());
    const ops::SampleRowOut& r = results[j++];
    if (r.status == ops::kSampleNonFinite) {
      nonfinite.push_back(i);
      continue;
    }
    if (r.status != ops::kSampleOk || r.token < 0)
      return Status::errorf("device sampling: row {} was rejected (status {}, token {})", sp.logits_row, r.status, r.token);
    StepOutput o;
    o.plan_index = i;
    o.seq_id = sp.seq_id;
    o.samples.push_back(sampling::to_sample_result(r, sp.params && sp.params->logprobs));
    out.push_back(std::move(o));
  }
  if (j != results.size()) return Status::errorf("device sampling: {} results for {} rows", results.size(), j);
  return Status::ok();
}

}  // namespace dsinfer::scheduler
