// HostStep (see host_step_sampling.h).
#include "backends/cpu/host_step_sampling.h"

#include <algorithm>

namespace dsinfer::backends {

namespace {
bool all_finite(std::span<const float> v) {
  float acc = 0.0f;  // x - x is 0 for finite x, NaN otherwise
  for (float x : v) acc += x - x;
  return acc == 0.0f;
}
}  // namespace

HostStep::HostStep(const scheduler::BatchPlan& plan) : plan_(plan), fills_(plan.token_fills) {
  plan_.token_fills.clear();
  plan_.state_copies.clear();  // done by the caller before the step is queued
  tables_.resize(plan_.seqs.size());
  for (size_t s = 0; s < plan_.seqs.size(); ++s) {
    scheduler::SeqPlan& sp = plan_.seqs[s];
    tables_[s].assign(sp.block_table.begin(), sp.block_table.end());
    sp.block_table = tables_[s];
    if (sp.needs_logits) {
      Row& r = rows_.emplace_back();
      r.has_params = sp.params != nullptr;
      if (sp.params) r.params = *sp.params;
      r.prompt.assign(sp.prompt_tokens.begin(), sp.prompt_tokens.end());
      r.output.assign(sp.output_tokens.begin(), sp.output_tokens.end());
      r.rng = sp.rng;
      r.last_token = sp.token_offset + sp.num_new_tokens - 1;
    }
    sp.params = nullptr;  // the forward reads none of these; the rows above own the sampler's copies
    sp.prompt_tokens = {};
    sp.output_tokens = {};
  }
}

Status HostStep::resolve_fills(std::span<const int32_t> prev) {
  const int32_t T = int32_t(plan_.token_ids.size());
  for (const scheduler::TokenFill& f : fills_) {
    if (f.token_index < 0 || f.token_index >= T || plan_.token_ids[size_t(f.token_index)] != scheduler::kPendingToken)
      return Status::errorf("asynchronous step: token fill {} names no pending token", f.token_index);
    if (f.sample_row < 0 || size_t(f.sample_row) >= prev.size())
      return Status::errorf("asynchronous step: token fill row {} of a sampling of {} rows", f.sample_row, prev.size());
    plan_.token_ids[size_t(f.token_index)] = std::max(prev[size_t(f.sample_row)], 0);  // invalid ids: 0, as on the device
  }
  for (int32_t t : plan_.token_ids)
    if (t == scheduler::kPendingToken) return Status::error("asynchronous step: a pending token has no fill");
  for (Row& r : rows_)
    if (!r.output.empty() && r.output.back() == scheduler::kPendingToken) r.output.back() = plan_.token_ids[size_t(r.last_token)];
  return Status::ok();
}

Status HostStep::sample(const sampling::PackedRows& rows, std::span<const float> logits, int64_t vocab,
                        int64_t eos_token_id, sampling::Sampler& sampler, std::vector<ops::SampleRowOut>& out) const {
  if (rows.rows.size() != rows_.size())
    return Status::errorf("asynchronous step: {} packed rows for {} rows that need logits", rows.rows.size(), rows_.size());
  out.assign(rows_.size(), ops::SampleRowOut{});
  const int64_t num_logits = int64_t(logits.size()) / vocab;
  for (size_t j = 0; j < rows_.size(); ++j) {
    const ops::SampleRowDesc& d = rows.rows[j];
    const Row& row = rows_[j];
    ops::SampleRowOut& o = out[j];
    if (d.logits_row < 0 || d.logits_row >= num_logits || (d.mask_row >= 0 && d.mask_row >= rows.num_mask_rows())) {
      o.status = ops::kSampleBadInput;
      continue;
    }
    sampling::SampleInput in;
    in.logits = logits.subspan(size_t(d.logits_row) * size_t(vocab), size_t(vocab));
    if (!all_finite(in.logits)) {
      o.status = ops::kSampleNonFinite;
      continue;
    }
    if (d.mask_row >= 0)
      in.token_bitmask = std::span<const int32_t>(rows.mask_words)
                             .subspan(size_t(d.mask_row) * size_t(rows.words_per_row()), size_t(rows.words_per_row()));
    in.params = row.has_params ? &row.params : nullptr;
    in.prompt_tokens = row.prompt;
    in.output_tokens = row.output;
    in.rng = row.rng;
    in.eos_token_id = eos_token_id;
    const sampling::SampleResult s = sampler.sample(in);
    o.token = s.token;
    o.logprob = s.logprob;
    o.num_top = int32_t(std::min<size_t>(s.top.size(), size_t(ops::kSampleMaxTop)));
    for (int32_t k = 0; k < o.num_top; ++k) {
      o.top_token[k] = s.top[size_t(k)].token;
      o.top_logprob[k] = s.top[size_t(k)].logprob;
    }
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
