// Scheduler: prefix caching (cache/prefix_cache.h). At admission a sequence looks up the longest cached prefix
// of its tokens (never all of them: the last token is computed for its logits); exact hits restore a slot
// snapshot, bounded hits recompute the sliding window before the hit into scratch copies of the shared blocks.
// As a sequence's blocks complete, update() offers them to the cache and snapshots its slot at block
// boundaries. Shared blocks are complete, so no sequence ever writes one (it appends past them). Every copy goes
// through the StateCache's queue, in order with its host-tier spills / restores; schedule() hands it to the plan.
#include <algorithm>

#include "scheduler/scheduler.h"
#include "scheduler/scheduler_state.h"

namespace dsinfer::scheduler {

using cache::StateCopy;

Scheduler::PrefixHit Scheduler::prefix_lookup(Sequence* s) {
  PrefixHit h;
  cache::PrefixCache* pc = cache_.prefix();
  if (!pc) return h;
  const int64_t bs = cache_.block_size(), total = s->total_len();
  std::vector<int32_t> all(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) all[size_t(i)] = s->token_at(i);
  s->keys.clear();
  pc->extend_keys(all, s->keys);
  // At most total - 1 tokens: the last one must still run to produce the logits.
  cache::PrefixCache::Match m = pc->match(all, s->keys, int32_t((total - 1) / bs));
  // DP attention: a sequence's blocks live on one rank; keep the hit's leading blocks on its first device block's.
  int32_t rank = -1;
  for (size_t i = 0; i < m.blocks.size() && cache_.ranks() > 1; ++i) {
    if (m.blocks[i] < 0) continue;
    if (rank < 0) rank = cache_.rank_of_block(m.blocks[i]);
    if (cache_.rank_of_block(m.blocks[i]) == rank) continue;
    m.blocks.resize(i);
    m.gens.resize(i);
    if (m.snapshot_blocks > int32_t(i)) {  // the match knows only its deepest snapshot
      m.snapshot_blocks = 0;
      m.snapshot = -1;
    }
  }
  const int64_t exact = int64_t(m.snapshot_blocks) * bs, full = int64_t(m.blocks.size()) * bs;
  const int64_t window = cache_.layout().ring_rows - cache_.layout().num_speculative_tokens;
  if (pc->mode() == cache::PrefixMode::kBounded && full > window && full - window > exact) {
    h.start = full - window;
    h.replay_end = full;
    h.extra_blocks = int64_t(m.blocks.size()) - h.start / bs;  // scratch copies of the blocks being replayed
    h.blocks = std::move(m.blocks);
    h.gens = std::move(m.gens);
  } else if (exact > 0) {
    h.start = exact;
    h.snapshot = m.snapshot;
    h.blocks.assign(m.blocks.begin(), m.blocks.begin() + m.snapshot_blocks);
    h.gens.assign(m.gens.begin(), m.gens.begin() + m.snapshot_blocks);
  }
  return h;
}

bool Scheduler::prefix_defer(const Sequence* s, const PrefixHit& h) {
  // Identical prompts (n > 1, parallel requests): rather than prefill the same tokens twice, wait while a
  // running sequence computes the next block of this prefix; admission then finds it cached.
  cache::PrefixCache* pc = cache_.prefix();
  if (!pc) return false;
  const size_t d = h.blocks.size();
  const int64_t bs = cache_.block_size();
  if (s->keys.size() <= d || int64_t(d + 1) * bs > s->total_len() - 1) return false;
  for (const Sequence* r : running_) {
    if (r->state != SeqState::Prefilling && r->state != SeqState::Decoding) continue;
    if (!r->approx && r->keys.size() > d && r->keys[d] == s->keys[d] && r->num_computed < int64_t(d + 1) * bs) {
      ++pc->stats().deferred;
      return true;
    }
  }
  return false;
}

void Scheduler::prefix_admit(Sequence* s, const PrefixHit& h) {
  s->approx = false;
  s->replay_until = 0;
  s->replay_shared.clear();
  s->num_computed = h.start;
  cache::PrefixCache* pc = cache_.prefix();
  if (!pc) return;
  cache::PrefixCacheStats& st = pc->stats();
  ++st.lookups;
  st.lookup_tokens += s->total_len();
  s->gens = h.gens;
  if (h.start == 0) return;
  pc->touch(h.gens);
  st.hit_tokens += h.start;
  if (h.snapshot >= 0) {
    ++st.exact_hits;
    cache_.push_copy({StateCopy::Kind::kSnapshotToSlot, h.snapshot, s->slot});
    return;
  }
  // Bounded replay: a clean slot (deterministic), and private copies of the blocks the window's tokens would
  // rewrite; the cached blocks come back into the table once the window is recomputed.
  ++st.bounded_hits;
  st.replayed_tokens += h.replay_end - h.start;
  s->approx = true;
  s->replay_until = h.replay_end;
  s->replay_first = int64_t(h.blocks.size()) - h.extra_blocks;
  cache_.push_copy({StateCopy::Kind::kZeroSlot, -1, s->slot});
  for (int64_t i = s->replay_first; i < int64_t(h.blocks.size()); ++i) {
    const cache::BlockId shared = cache_.swap_scratch(s->slot, i);  // can_admit counted these blocks
    s->replay_shared.push_back(shared);
    cache_.push_copy({StateCopy::Kind::kBlockToBlock, shared, cache_.table(s->slot)[size_t(i)]});
  }
}

int32_t Scheduler::prefix_cap(int64_t pos, int64_t replay_until, bool approx, int32_t n) const {
  const cache::PrefixCache* pc = cache_.prefix();
  if (!pc) return n;
  // A replay step ends at the hit: later tokens must read the cached (exact) entries, not the scratch copies.
  if (replay_until > pos) return int32_t(std::min<int64_t>(n, replay_until - pos));
  // Exact mode: a chunk ends at every block boundary so that each one can be snapshot.
  if (pc->mode() == cache::PrefixMode::kExact && !approx && pc->has_snapshots()) {
    const int64_t bs = cache_.block_size();
    return int32_t(std::min<int64_t>(n, (pos / bs + 1) * bs - pos));
  }
  return n;
}

void Scheduler::prefix_end_replay(Sequence* s) {
  for (size_t j = 0; j < s->replay_shared.size(); ++j)
    cache_.swap_back(s->slot, s->replay_first + int64_t(j), s->replay_shared[j]);
  s->replay_shared.clear();
  s->replay_until = 0;
}

void Scheduler::prefix_register(Sequence* s) {
  cache::PrefixCache* pc = cache_.prefix();
  if (!pc || s->slot < 0) return;
  if (s->replay_until > 0 && s->num_computed >= s->replay_until) prefix_end_replay(s);
  if (s->approx) return;
  const int64_t bs = cache_.block_size(), done = s->num_computed / bs;
  if (int64_t(s->gens.size()) < done) {
    std::vector<int32_t> toks(static_cast<size_t>(done * bs));
    for (int64_t i = 0; i < done * bs; ++i) toks[size_t(i)] = s->token_at(i);
    if (int64_t(s->keys.size()) < done) pc->extend_keys(toks, s->keys);
    for (int64_t i = int64_t(s->gens.size()); i < done; ++i) {
      const uint64_t parent = i > 0 ? s->gens[size_t(i - 1)] : 0;
      if (i > 0 && parent == 0) {  // the chain is broken above this block: nothing below can be found
        s->gens.push_back(0);
        continue;
      }
      const std::span<const int32_t> bt(toks.data() + i * bs, size_t(bs));
      s->gens.push_back(cache_.cache_block(s->slot, i, s->keys[size_t(i)], parent, bt).gen);
    }
  }
  // Exactly at a boundary: the slot holds the state a hit there must resume from.
  if (done > 0 && s->num_computed == done * bs && pc->has_snapshots() && s->gens[size_t(done - 1)] != 0) {
    const auto [snap, fill] = pc->snapshot_for(s->gens[size_t(done - 1)]);
    if (fill) saves_.push_back({StateCopy::Kind::kSlotToSnapshot, s->slot, snap});
  }
}

cache::PrefixCacheStats Scheduler::prefix_stats() const {
  const cache::PrefixCache* pc = cache_.prefix();
  return pc ? pc->stats_now() : cache::PrefixCacheStats{};
}

}  // namespace dsinfer::scheduler
