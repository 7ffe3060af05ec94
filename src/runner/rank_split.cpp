// DP attention's plan and copy split (see rank_split.h).
#include "runner/rank_split.h"

namespace dsinfer::runner {

Status split_plan_by_rank(const scheduler::BatchPlan& plan, int32_t n, int32_t slots_per_rank,
                          int32_t blocks_per_rank, RankPlans& out, std::span<const RankRow> prev_rows) {
  if (!plan.token_fills.empty() && prev_rows.empty())
    return Status::error("DP attention: token fills without the rows of a previous sampling");
  if (n < 1 || slots_per_rank < 1 || blocks_per_rank < 1)
    return Status::errorf("DP attention: {} ranks of {} slots / {} blocks", n, slots_per_rank, blocks_per_rank);
  out.plans.resize(size_t(n));
  out.rows.resize(size_t(n));
  out.tables.resize(size_t(n));
  std::vector<int32_t> seq_rank(plan.seqs.size()), seq_local(plan.seqs.size());
  std::vector<RankRow> token_at(plan.token_fills.empty() ? 0 : plan.token_ids.size());  // fills: rank, local index
  for (int32_t r = 0; r < n; ++r) {
    out.plans[size_t(r)].clear();
    out.plans[size_t(r)].step = plan.step;
    out.rows[size_t(r)].clear();
    out.tables[size_t(r)].assign(plan.seqs.size(), {});  // sized first: the spans below stay valid
  }
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduler::SeqPlan& sp = plan.seqs[i];
    const int32_t r = sp.slot >= 0 ? sp.slot / slots_per_rank : -1;
    if (r < 0 || r >= n) return Status::errorf("DP attention: sequence {} has slot {}", sp.seq_id, sp.slot);
    scheduler::BatchPlan& q = out.plans[size_t(r)];
    std::vector<cache::BlockId>& table = out.tables[size_t(r)][i];
    for (cache::BlockId b : sp.block_table) {
      if (b < 0 || b / blocks_per_rank != r)
        return Status::errorf("DP attention: sequence {} (rank {}) has block {} of another rank", sp.seq_id, r, b);
      table.push_back(b - r * blocks_per_rank);
    }
    scheduler::SeqPlan lp = sp;
    lp.slot = sp.slot - r * slots_per_rank;
    lp.block_table = table;
    lp.token_offset = q.num_tokens();
    lp.logits_row = -1;
    for (int32_t j = 0; j < sp.num_new_tokens && !token_at.empty(); ++j)
      token_at[size_t(sp.token_offset + j)] = {r, lp.token_offset + j};
    q.token_ids.insert(q.token_ids.end(), plan.token_ids.begin() + sp.token_offset,
                       plan.token_ids.begin() + sp.token_offset + sp.num_new_tokens);
    q.positions.insert(q.positions.end(), plan.positions.begin() + sp.token_offset,
                       plan.positions.begin() + sp.token_offset + sp.num_new_tokens);
    q.cu_seqlens.push_back(q.num_tokens());
    seq_rank[i] = r;
    seq_local[i] = int32_t(q.seqs.size());
    q.seqs.push_back(lp);
  }
  for (int32_t g = 0; g < plan.num_logits(); ++g) {
    const int32_t t = plan.logits_token_index[size_t(g)];
    size_t i = 0;
    while (i < plan.seqs.size() && t >= plan.seqs[i].token_offset + plan.seqs[i].num_new_tokens) ++i;
    if (i == plan.seqs.size() || t < plan.seqs[i].token_offset)
      return Status::errorf("DP attention: logits row {} for token {} of no sequence", g, t);
    scheduler::BatchPlan& q = out.plans[size_t(seq_rank[i])];
    scheduler::SeqPlan& lp = q.seqs[size_t(seq_local[i])];
    if (lp.logits_row < 0) lp.logits_row = q.num_logits();
    q.logits_token_index.push_back(lp.token_offset + (t - plan.seqs[i].token_offset));
    out.rows[size_t(seq_rank[i])].push_back(g);
  }
  out.row_of.assign(size_t(plan.num_logits()), {});
  for (int32_t r = 0; r < n; ++r)
    for (size_t i = 0; i < out.rows[size_t(r)].size(); ++i) out.row_of[size_t(out.rows[size_t(r)][i])] = {r, int32_t(i)};
  for (const scheduler::TokenFill& f : plan.token_fills) {
    if (f.token_index < 0 || size_t(f.token_index) >= token_at.size() || token_at[size_t(f.token_index)].rank < 0)
      return Status::errorf("DP attention: token fill at token {} of no sequence", f.token_index);
    if (f.sample_row < 0 || size_t(f.sample_row) >= prev_rows.size())
      return Status::errorf("DP attention: token fill from row {} of a sampling of {} rows", f.sample_row,
                            prev_rows.size());
    const RankRow at = token_at[size_t(f.token_index)], from = prev_rows[size_t(f.sample_row)];
    if (from.rank != at.rank)
      return Status::errorf("DP attention: token {} is on rank {}, its fill's row {} was sampled on rank {}",
                            f.token_index, at.rank, f.sample_row, from.rank);
    out.plans[size_t(at.rank)].token_fills.push_back({at.row, from.row});
  }
  return Status::ok();
}

Status split_sample_rows(const sampling::PackedRows& rows, const RankPlans& split, std::vector<sampling::PackedRows>& out,
                         std::vector<RankRow>& where) {
  const size_t n = split.plans.size();
  out.resize(n);
  for (sampling::PackedRows& p : out) {
    p.clear(rows.vocab());
    p.entries = rows.entries;
    p.mask_words = rows.mask_words;
  }
  where.assign(rows.rows.size(), {});
  for (size_t i = 0; i < rows.rows.size(); ++i) {
    const int32_t g = rows.rows[i].logits_row;
    if (g < 0 || size_t(g) >= split.row_of.size() || split.row_of[size_t(g)].rank < 0)
      return Status::errorf("DP attention: sampling row {} names logits row {} of a step with {} rows", i, g,
                            split.row_of.size());
    const RankRow at = split.row_of[size_t(g)];
    sampling::PackedRows& p = out[size_t(at.rank)];
    where[i] = {at.rank, int32_t(p.rows.size())};
    p.rows.push_back(rows.rows[i]);
    p.rows.back().logits_row = at.row;
  }
  return Status::ok();
}

Result<RankCopy> localize_copy(const cache::StateCopy& c, int32_t n, int32_t slots_per_rank,
                               int32_t blocks_per_rank) {
  using K = cache::StateCopy::Kind;
  RankCopy out{-1, c};
  auto to_local = [&](int32_t& id, int32_t per) -> Status {
    const int32_t r = per > 0 && id >= 0 ? id / per : -1;
    if (r < 0 || r >= n || (out.rank >= 0 && r != out.rank))
      return Status::errorf("DP attention: state copy id {} is not on one rank's state", id);
    out.rank = r;
    id -= r * per;
    return Status::ok();
  };
  if (c.kind == K::kSlotToSnapshot) DSI_RETURN_IF_ERROR(to_local(out.local.src, slots_per_rank));
  if (c.kind == K::kSnapshotToSlot || c.kind == K::kZeroSlot) DSI_RETURN_IF_ERROR(to_local(out.local.dst, slots_per_rank));
  if (c.kind == K::kBlockToBlock || c.kind == K::kBlockToHost) DSI_RETURN_IF_ERROR(to_local(out.local.src, blocks_per_rank));
  if (c.kind == K::kBlockToBlock || c.kind == K::kHostToBlock) DSI_RETURN_IF_ERROR(to_local(out.local.dst, blocks_per_rank));
  return out;
}

}  // namespace dsinfer::runner
