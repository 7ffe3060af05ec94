// HostState / SoloSequence (see host_state.h).
#include "model/host_state.h"

namespace dsinfer::model {

Result<std::unique_ptr<HostState>> HostState::create(const io::ModelConfig& cfg, int32_t num_seqs, int64_t max_len) {
  cache::StateCacheConfig cc;
  cc.max_num_seqs = num_seqs;
  cc.max_model_len = max_len;
  cc.kv_elem_bytes = 4;
  DSI_ASSIGN_OR_RETURN(cache::StateLayout layout, cache::compute_state_layout(cfg, cc));
  cc.budget_bytes = int64_t(num_seqs) * layout.bytes_per_sequence(max_len);
  return create(cfg, cc);
}

Result<std::unique_ptr<HostState>> HostState::create(const io::ModelConfig& cfg, const cache::StateCacheConfig& cc) {
  DSI_ASSIGN_OR_RETURN(cache::StateCache c, cache::StateCache::create(cfg, cc));
  if (c.layout().kv_elem_bytes != 4) return Status::error("HostState: the CPU backend keeps fp32 state (kv_elem_bytes 4)");
  std::unique_ptr<HostState> s(new HostState(std::move(c)));
  const cache::StateLayout& L = s->cache_.layout();
  s->slots_.assign(size_t(s->cache_.num_slots()) * size_t(L.slot_bytes / 4), 0.0f);
  s->blocks_.assign(size_t(s->cache_.num_blocks()) * size_t(L.block_bytes / 4), 0.0f);
  return s;
}

SoloSequence::~SoloSequence() {
  if (slot_ >= 0) st_->cache().free(slot_);
}

Result<SeqChunk> SoloSequence::next_chunk(std::span<const int32_t> tokens, bool all_logits) {
  const int64_t end = pos_ + int64_t(tokens.size());
  if (slot_ < 0) {
    slot_ = st_->cache().admit(end);
    if (slot_ < 0) return Status::errorf("state cache has no room for a {}-token sequence", end);
  } else if (!st_->cache().allocate_for(slot_, end)) {
    return Status::errorf("state cache has no blocks left to grow a sequence to {} tokens", end);
  }
  return SeqChunk{slot_, pos_, st_->cache().table(slot_), tokens, all_logits};
}

Status SoloSequence::step(DeepseekV4Cpu& m, std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
  DSI_ASSIGN_OR_RETURN(SeqChunk c, next_chunk(tokens, all_logits));
  DSI_RETURN_IF_ERROR(m.forward(st_->pool(), {&c, 1}, logits));
  advance(int64_t(tokens.size()));
  return Status::ok();
}

}  // namespace dsinfer::model
