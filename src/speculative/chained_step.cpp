// The chained verify step (see chained_step.h).
#include "speculative/chained_step.h"

namespace dsinfer::speculative {

std::optional<ChainedStep> chain_after(const scheduler::BatchPlan& round, int32_t k, int32_t block,
                                       int64_t block_size, int64_t max_model_len, bool snapshots) {
  const int32_t S = round.num_seqs(), n = 1 + k;
  if (S < 1 || S > kChainMaxSeqs || k < 1 || k > block || block_size < 1 || !round.token_fills.empty()) return std::nullopt;
  ChainedStep c;
  scheduler::BatchPlan& p = c.plan;
  p.clear();
  p.step = round.step + 1;
  for (int32_t s = 0; s < S; ++s) {
    const scheduler::SeqPlan& sp = round.seqs[size_t(s)];
    if (sp.is_prefill || !sp.needs_logits || !sp.params || sp.num_new_tokens != 1 + sp.num_spec_tokens) return std::nullopt;
    const int64_t P = sp.start_pos, L = sp.num_spec_tokens;
    if (snapshots && (P + 1 + L) / block_size != P / block_size) return std::nullopt;  // the round may end a block
    const int64_t end = P + chain_lookahead(k, block);
    if (end > max_model_len || end > int64_t(sp.block_table.size()) * block_size) return std::nullopt;
    // Not near the request's end, where this round may finish it (the launched step would be wasted): room for this
    // round's 1 + L tokens and a whole next round.
    if (sp.params->max_tokens && int64_t(sp.output_tokens.size()) + L + k + 2 > *sp.params->max_tokens)
      return std::nullopt;
    scheduler::SeqPlan q = sp;
    q.num_new_tokens = n;
    q.num_spec_tokens = k;
    q.token_offset = p.num_tokens();
    q.logits_row = p.num_logits();
    const int32_t placeholder = round.token_ids[size_t(sp.token_offset)];  // a valid id; the device overwrites it
    for (int32_t j = 0; j < n; ++j) {
      p.logits_token_index.push_back(p.num_tokens());
      p.token_ids.push_back(placeholder);
      p.positions.push_back(P + j);
    }
    p.cu_seqlens.push_back(p.num_tokens());
    p.seqs.push_back(q);
    ChainedStep::Seq& cs = c.seqs.emplace_back();
    cs.id = sp.seq_id;
    cs.slot = sp.slot;
    cs.start = P;
    cs.table.assign(sp.block_table.begin(), sp.block_table.end());
  }
  return c;
}

void settle_chained_step(ChainedStep& c, std::span<const RoundResult> results) {
  c.settled = results.size() == c.seqs.size();
  for (size_t s = 0; c.settled && s < c.seqs.size(); ++s) {
    const RoundResult& r = results[s];
    const size_t k = size_t(c.plan.seqs[s].num_spec_tokens);
    ChainedStep::Seq& cs = c.seqs[s];
    if (r.tokens.empty() || r.proposal.tokens.size() < k || r.accepted < 0) {
      c.settled = false;
      break;
    }
    cs.start += 1 + r.accepted;
    cs.tokens.assign(1, r.tokens.back());
    cs.tokens.insert(cs.tokens.end(), r.proposal.tokens.begin(), r.proposal.tokens.begin() + std::ptrdiff_t(k));
  }
}

bool is_chained_step(const ChainedStep& c, const scheduler::BatchPlan& next, int64_t block_size) {
  if (!c.settled || next.seqs.size() != c.seqs.size() || !next.state_copies.empty() || !next.token_fills.empty() ||
      next.num_tokens() != c.plan.num_tokens() || next.logits_token_index != c.plan.logits_token_index ||
      next.cu_seqlens != c.plan.cu_seqlens)
    return false;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const ChainedStep::Seq& cs = c.seqs[s];
    const scheduler::SeqPlan& a = c.plan.seqs[s];
    const scheduler::SeqPlan& b = next.seqs[s];
    if (b.seq_id != cs.id || b.slot != cs.slot || b.start_pos != cs.start || b.is_prefill || !b.needs_logits ||
        b.num_new_tokens != a.num_new_tokens || b.num_spec_tokens != a.num_spec_tokens ||
        b.token_offset != a.token_offset || b.logits_row != a.logits_row)
      return false;
    for (int32_t j = 0; j < b.num_new_tokens; ++j) {
      const size_t t = size_t(b.token_offset + j);
      if (next.token_ids[t] != cs.tokens[size_t(j)] || next.positions[t] != cs.start + j) return false;
    }
    const size_t used = size_t((cs.start + b.num_new_tokens + block_size - 1) / block_size);
    if (b.block_table.size() < used || cs.table.size() < used) return false;
    for (size_t i = 0; i < used; ++i)
      if (b.block_table[i] != cs.table[i]) return false;
  }
  return true;
}

}  // namespace dsinfer::speculative
