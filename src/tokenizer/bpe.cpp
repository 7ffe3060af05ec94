// BPE merge loop: a linear scan for short words, a lazy-deletion heap for long ones; both merge the lowest
// rank pair first and the leftmost one among equal ranks, so they agree with HF's merge_word.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

namespace dsinfer::tokenizer {
namespace {
constexpr uint32_t kNoRank = ~0u;
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheMaxEntries = 1 << 17;
constexpr size_t kSmallWord = 48;  // symbols; above this the heap beats the O(n^2) scan
}  // namespace

void MergeTable::build(size_t n_merges) {
  size_t cap = 16;
  while (cap < n_merges * 2) cap <<= 1;
  slots_.assign(cap, Entry{});
  mask_ = cap - 1;
}

bool MergeTable::insert(int32_t a, int32_t b, uint32_t rank, int32_t merged) {
  uint64_t key = pack(a, b);
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == key) return false;
    if (e.key == kEmpty) {
      e = Entry{key, rank, merged};
      return true;
    }
  }
}

BpeModel::BpeModel(std::array<int32_t, 256> byte_ids, MergeTable merges, int32_t unk_id)
    : byte_ids_(byte_ids), merges_(std::move(merges)), unk_id_(unk_id) {}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) {
  if (word.size() <= kCacheMaxWordBytes) {
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  merge(word, out);
  if (word.size() <= kCacheMaxWordBytes) {
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(start), out.end()));
  }
}

void BpeModel::merge(std::string_view word, std::vector<int32_t>& out) {
  syms_.clear();
  for (unsigned char c : word) {
    int32_t id = byte_ids_[c];
    if (id >= 0) syms_.push_back(id);
    else if (unk_id_ >= 0) syms_.push_back(unk_id_);
  }
  if (syms_.size() <= kSmallWord) merge_small(out);
  else merge_heap(out);
}

void BpeModel::merge_small(std::vector<int32_t>& out) {
  // ranks_[i] = rank of (syms_[i], syms_[i+1]).
  size_t n = syms_.size();
  ranks_.resize(n);
  merged_.resize(n);
  std::vector<int32_t>& merged_id = merged_;
  auto look = [&](size_t i) {
    const MergeTable::Entry* e = merges_.find(syms_[i], syms_[i + 1]);
    ranks_[i] = e ? e->rank : kNoRank;
    merged_id[i] = e ? e->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    size_t best = 0;
    uint32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < n; ++i)
      if (ranks_[i] < best_rank) {
        best_rank = ranks_[i];
        best = i;
      }
    if (best_rank == kNoRank) break;
    syms_[best] = merged_id[best];
    syms_.erase(syms_.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks_.erase(ranks_.begin() + static_cast<ptrdiff_t>(best) + 1);
    merged_id.erase(merged_id.begin() + static_cast<ptrdiff_t>(best) + 1);
    --n;
    if (best + 1 < n) look(best);
    if (best > 0) look(best - 1);
  }
  out.insert(out.end(), syms_.begin(), syms_.begin() + static_cast<ptrdiff_t>(n));
}

void BpeModel::merge_heap(std::vector<int32_t>& out) {
  const size_t n = syms_.size();
  std::vector<int32_t> next(n), prev(n);
  std::vector<char> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
    prev[i] = int32_t(i) - 1;
  }
  struct Cand {
    uint32_t rank;
    int32_t left, right, left_id, right_id, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l) {
    if (l < 0 || next[l] < 0) return;
    int32_t r = next[l];
    if (const MergeTable::Entry* e = merges_.find(syms_[l], syms_[r]))
      heap.push(Cand{e->rank, l, r, syms_[l], syms_[r], e->merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || syms_[c.left] != c.left_id ||
        syms_[c.right] != c.right_id)
      continue;  // stale
    syms_[c.left] = c.merged;
    alive[c.right] = 0;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) out.push_back(syms_[i]);
}

}  // namespace dsinfer::tokenizer
