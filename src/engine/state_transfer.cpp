// Engine::export_prefix_state / import_prefix_state (P/D disaggregation, docs/fleet.md): a prefix's state leaves and
// enters an engine through its prefix cache. Export reads what an exact hit on the prompt would restore (the matched
// token blocks and the deepest snapshot); import writes a blob's blocks into fresh blocks of a transient slot,
// registers them in the prefix cache under the blob's token ids, fills the last one's snapshot and frees the slot,
// so the blocks stay behind as cached (evictable) blocks exactly like those of a finished local request. The
// scheduler then finds them through its ordinary lookup: the decode worker resumes through the exact-hit path.
#include <string>
#include <vector>

#include "cache/state_blob.h"
#include "engine/engine.h"

namespace dsinfer::engine {

namespace {

Result<cache::PrefixCache*> snapshot_cache(cache::StateCache& sc) {
  cache::PrefixCache* pc = sc.prefix();
  if (!pc || pc->mode() == cache::PrefixMode::kOff || !pc->has_snapshots())
    return Status::error("prefix state transfer needs prefix caching with slot snapshots (enable_prefix_caching "
                         "'exact' or 'bounded' and prefix_snapshot_memory_gb > 0)");
  return pc;
}

std::vector<cache::StateRegion> block_regions(std::span<const cache::BlockId> blocks) {
  std::vector<cache::StateRegion> r;
  for (const cache::BlockId b : blocks) r.push_back({cache::StateRegion::Kind::kBlock, b});
  return r;
}

std::span<uint8_t> bytes_at(std::string& s, size_t offset, size_t n) {
  return {reinterpret_cast<uint8_t*>(s.data()) + offset, n};
}

std::span<const uint8_t> bytes_of(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

}  // namespace

Status Engine::flush_state_copies() {
  // Spills and restores queued since the last planned step read or write blocks the transfer touches: done first,
  // in their order, exactly as the next step would have done them.
  std::vector<cache::StateCopy> copies;
  sched_->cache_between_steps().take_copies(copies);
  return runner_->copy_state(copies);
}

Result<std::string> Engine::export_prefix_state(std::span<const int32_t> prompt) {
  cache::StateCache& sc = sched_->cache_between_steps();
  DSI_ASSIGN_OR_RETURN(cache::PrefixCache* pc, snapshot_cache(sc));
  const int64_t bs = sc.block_size();
  std::vector<uint64_t> keys;
  pc->extend_keys(prompt, keys);
  // The decoder's lookup: at most prompt - 1 tokens (its last token runs there, for the first sampled token).
  const int32_t max_blocks = prompt.empty() ? 0 : int32_t((int64_t(prompt.size()) - 1) / bs);
  const cache::PrefixCache::Match m = pc->match(prompt, keys, max_blocks);
  if (m.snapshot_blocks == 0)
    return Status::errorf("no exact prefix state for this {}-token prompt (it needs more than one {}-token block, and "
                          "its blocks and snapshot in the prefix cache)", prompt.size(), bs);
  const std::span<const cache::BlockId> blocks(m.blocks.data(), size_t(m.snapshot_blocks));
  for (size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i] < 0) return Status::errorf("block {} of the prefix is in the host tier, not in the state memory", i);
  DSI_RETURN_IF_ERROR(flush_state_copies());
  const cache::StateLayout& L = sc.layout();
  const cache::StateBlobHeader h{pc->seed(), bs, L.block_bytes, L.slot_bytes, int64_t(blocks.size()) * bs};
  std::string blob;
  DSI_ASSIGN_OR_RETURN(const cache::StateBlobPayload at,
                       cache::begin_state_blob(h, prompt.first(size_t(h.num_tokens)), blob));
  DSI_RETURN_IF_ERROR(runner_->read_state(block_regions(blocks),
                                          bytes_at(blob, at.blocks_offset, at.snapshot_offset - at.blocks_offset)));
  const cache::StateRegion snap{cache::StateRegion::Kind::kSnapshot, m.snapshot};
  DSI_RETURN_IF_ERROR(runner_->read_state({&snap, 1}, bytes_at(blob, at.snapshot_offset, size_t(L.slot_bytes))));
  cache::seal_state_blob(blob);
  return blob;
}

Result<int64_t> Engine::import_prefix_state(std::string_view bytes) {
  cache::StateCache& sc = sched_->cache_between_steps();
  DSI_ASSIGN_OR_RETURN(cache::PrefixCache* pc, snapshot_cache(sc));
  DSI_ASSIGN_OR_RETURN(const cache::StateBlobView blob, cache::parse_state_blob(bytes));
  const cache::StateBlobHeader& h = blob.header;
  const cache::StateLayout& L = sc.layout();
  if (h.identity != pc->seed())
    return Status::errorf("state blob: exported by another model, numerics or state layout (identity {:016x}, this "
                          "engine's {:016x})", h.identity, pc->seed());
  if (h.block_size != L.block_size || h.block_bytes != L.block_bytes || h.slot_bytes != L.slot_bytes)
    return Status::errorf("state blob: block_size {} / block_bytes {} / slot_bytes {}, this engine's {} / {} / {}",
                          h.block_size, h.block_bytes, h.slot_bytes, L.block_size, L.block_bytes, L.slot_bytes);
  if (h.num_tokens >= max_model_len_)
    return Status::errorf("state blob: {} tokens, this engine's max_model_len is {}", h.num_tokens, max_model_len_);
  const int64_t vocab = model_config().vocab_size;
  for (size_t i = 0; i < blob.tokens.size(); ++i)
    if (blob.tokens[i] < 0 || blob.tokens[i] >= vocab)
      return Status::errorf("state blob: token {} is id {}, outside the vocabulary (size {})", i, blob.tokens[i], vocab);
  std::vector<uint64_t> keys;
  pc->extend_keys(blob.tokens, keys);
  const int32_t nb = int32_t(h.num_blocks());
  if (pc->match(blob.tokens, keys, nb).snapshot_blocks == nb) return h.num_tokens;  // already held here
  const cache::SlotId s = sc.admit(h.num_tokens);
  if (s < 0)
    return Status::errorf("no free state for an imported {}-token prefix ({} free slots, {} free blocks)", h.num_tokens,
                          sc.free_slots(), sc.free_blocks());
  // The admission may have spilled cached blocks to the host tier: those copies read the blocks written below.
  Status st = flush_state_copies();
  if (st) st = runner_->write_state(block_regions(sc.table(s)), bytes_of(blob.blocks));
  uint64_t parent = 0;
  for (int32_t i = 0; st && i < nb; ++i) {
    const std::span<const int32_t> bt(blob.tokens.data() + int64_t(i) * h.block_size, size_t(h.block_size));
    parent = sc.cache_block(s, i, keys[size_t(i)], parent, bt).gen;
    if (parent == 0) st = Status::errorf("the prefix cache refused block {} of the imported prefix", i);
  }
  if (st) {
    const auto [snap, fill] = pc->snapshot_for(parent);
    const cache::StateRegion region{cache::StateRegion::Kind::kSnapshot, snap};
    if (snap < 0) st = Status::error("the prefix cache has no snapshot for the imported prefix");
    else if (fill) st = runner_->write_state({&region, 1}, bytes_of(blob.snapshot));
  }
  sc.free(s);  // the cached blocks keep the cache's reference
  if (!st) return st;
  return h.num_tokens;
}

}  // namespace dsinfer::engine
