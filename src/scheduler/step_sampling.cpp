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

}  // namespace dsinfer::scheduler
