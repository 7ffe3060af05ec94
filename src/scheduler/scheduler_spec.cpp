// Scheduler, speculative decoding part (see scheduler.h): drafts proposed for a sequence and the per-step
// choice of how many of them each sequence verifies (the confidence schedule).
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_state.h"

#include <algorithm>
#include <vector>

namespace dsinfer::scheduler {

Status Scheduler::set_draft(SeqId id, std::vector<int32_t> tokens, std::vector<float> survival) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::errorf("set_draft: unknown sequence {}", id);
  Sequence* s = it->second.get();
  if (s->state != SeqState::Decoding || s->num_computed + 1 != s->total_len())
    return Status::errorf("set_draft: sequence {} is not waiting for its next decode token", id);
  if (survival.size() != tokens.size())
    return Status::errorf("set_draft: {} survival values for {} drafts", survival.size(), tokens.size());
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (tokens[k] < 0 || (cfg_.vocab_size > 0 && tokens[k] >= cfg_.vocab_size))
      return Status::errorf("set_draft: draft token {} outside the vocabulary", tokens[k]);
    if (!(survival[k] >= 0.0f && survival[k] <= 1.0f) || (k > 0 && survival[k] > survival[k - 1]))
      return Status::errorf("set_draft: survival must be non-increasing in [0, 1], found {} at {}", survival[k], k);
  }
  // The drafts' positions stay below max_model_len. max_tokens does not cut them: near a request's end its drafts are
  // verified like everyone's (a verify step of uniform rows is a captured graph, a ragged one runs eagerly) and the
  // tokens past max_tokens are dropped where the outputs are applied (the stop checker; the same kept prefix).
  const int64_t room = cache_.max_model_len() - s->total_len();
  const size_t keep = size_t(std::clamp<int64_t>(room, 0, int64_t(tokens.size())));
  tokens.resize(std::min(keep, size_t(cache_.layout().num_speculative_tokens)));
  survival.resize(tokens.size());
  s->draft = std::move(tokens);
  s->survival = std::move(survival);
  return Status::ok();
}

bool Scheduler::holds_drafts() const {
  return std::any_of(running_.begin(), running_.end(),
                     [](const Sequence* s) { return s->state == SeqState::Decoding && !s->draft.empty(); });
}

void Scheduler::plan_spec_lengths() {
  struct Cand {
    float a;
    int32_t pos;
    int32_t seq;  // index in running_ (age order)
  };
  std::vector<Cand> cands;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence* s = running_[i];
    s->spec_len = 0;
    if (s->state != SeqState::Decoding || s->draft.empty() || s->num_computed + 1 != s->total_len()) continue;
    for (size_t k = 0; k < s->draft.size(); ++k)
      if (double(s->survival[k]) >= cfg_.spec_min_survival) cands.push_back({s->survival[k], int32_t(k), int32_t(i)});
  }
  if (cfg_.spec_budget > 0 && int64_t(cands.size()) > cfg_.spec_budget) {
    auto before = [](const Cand& x, const Cand& y) {
      return x.a > y.a || (x.a == y.a && (x.pos < y.pos || (x.pos == y.pos && x.seq < y.seq)));
    };
    std::nth_element(cands.begin(), cands.begin() + cfg_.spec_budget, cands.end(), before);
    cands.resize(size_t(cfg_.spec_budget));
  }
  // Survival is non-increasing per sequence and ties go to the earlier position, so the admitted drafts of a
  // sequence are a prefix of its block.
  for (const Cand& c : cands) running_[size_t(c.seq)]->spec_len += 1;
}

Scheduler::SpecTurn Scheduler::spec_turn(int64_t budget) const {
  if (!cfg_.spec_prompts_apart) return SpecTurn::kMixed;
  bool verifies = false, prompts = false;
  for (const Sequence* s : running_) {
    verifies = verifies || s->spec_len > 0;
    prompts = prompts || s->state == SeqState::Prefilling;
  }
  if (!verifies) return SpecTurn::kMixed;
  // Or a group of waiting sequences can be admitted, the first as schedule() admits it (prefix caching, whose hits
  // would change that, is not combined with speculation).
  const int64_t free = int64_t(max_running()) - int64_t(running_.size());
  if (!prompts && !waiting_.empty() &&
      free >= std::min<int64_t>(int64_t(waiting_.size()), std::max(cfg_.spec_admit_group, 1)))
    prompts = cache_.can_admit(std::min<int64_t>(waiting_.front()->total_len(), budget), admission_reserve());
  return prompts && !last_turn_prompts_ ? SpecTurn::kPrompts : SpecTurn::kVerify;
}

}  // namespace dsinfer::scheduler
