// StructuredDecoding (see structured_decoding.h).
#include "structured/structured_decoding.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <xgrammar/xgrammar.h>

namespace dsinfer::structured {

StructuredDecoding::~StructuredDecoding() = default;

Result<std::unique_ptr<StructuredDecoding>> StructuredDecoding::create(const tokenizer::Tokenizer& tok,
                                                                       int64_t vocab_size, int32_t eos_token_id,
                                                                       int32_t mask_threads,
                                                                       std::shared_ptr<GrammarCache> cache) {
  std::unique_ptr<StructuredDecoding> d(new StructuredDecoding());
  d->tok_ = &tok;
  d->vocab_ = vocab_size;
  d->eos_ = eos_token_id;
  if (cache) {
    d->cache_ = std::move(cache);
  } else {
    DSI_ASSIGN_OR_RETURN(std::unique_ptr<GrammarCache> own, GrammarCache::create(tok, vocab_size, eos_token_id));
    d->cache_ = std::move(own);
  }
  if (mask_threads <= 0) mask_threads = std::clamp(int32_t(std::thread::hardware_concurrency() / 2), 1, 16);
  d->batch_ = std::make_unique<xgrammar::BatchGrammarMatcher>(mask_threads);
  return d;
}

void StructuredDecoding::add(scheduler::SeqId id, const Grammar& grammar, const SeqOptions& opts) {
  std::vector<int32_t> stops{eos_};
  for (int32_t t : opts.stop_tokens)
    if (t >= 0 && t < vocab_ && std::find(stops.begin(), stops.end(), t) == stops.end()) stops.push_back(t);
  seqs_.insert_or_assign(id, SequenceMatcher(grammar, *tok_, std::move(stops), opts.wait_for_think_end));
}

SequenceMatcher* StructuredDecoding::matcher(scheduler::SeqId id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

void StructuredDecoding::fill_bitmask(const scheduler::BatchPlan& plan, sampling::TokenBitmask& mask) {
  mask.reset(plan.num_logits(), vocab_);
  if (seqs_.empty()) return;
  std::vector<xgrammar::GrammarMatcher> matchers;
  std::vector<int32_t> rows;
  for (const scheduler::SeqPlan& sp : plan.seqs) {
    if (!sp.needs_logits || sp.logits_row < 0) continue;
    auto it = seqs_.find(sp.seq_id);
    if (it == seqs_.end() || !it->second.constrained()) continue;
    matchers.push_back(it->second.matcher());  // a handle sharing the matcher's state
    rows.push_back(sp.logits_row);
  }
  if (matchers.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t shape[2] = {int64_t(mask.rows()), int64_t(mask.words_per_row)};
  DLTensor t{};
  t.data = mask.words.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  if (matchers.size() == 1) matchers[0].FillNextTokenBitmask(&t, rows[0]);
  else batch_->BatchFillNextTokenBitmask(&matchers, &t, rows);
  for (int32_t r : rows) {
    mask.active[size_t(r)] = 1;
    allow_stop_if_empty(mask.row(r), eos_);
  }
  stats_.calls += 1;
  stats_.rows += int64_t(rows.size());
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void StructuredDecoding::advance(std::span<const scheduler::SeqUpdate> updates) {
  for (const scheduler::SeqUpdate& u : updates) {
    auto it = seqs_.find(u.seq_id);
    if (it == seqs_.end()) continue;
    if (u.finished) {
      seqs_.erase(it);
      continue;
    }
    for (int32_t t : u.tokens) it->second.accept(t);
  }
}

Status StructuredDecoding::rollback(scheduler::SeqId id, int64_t n) {
  SequenceMatcher* m = matcher(id);
  if (!m) return Status::errorf("structured outputs: sequence {} has no grammar", id);
  return m->rollback(n);
}

}  // namespace dsinfer::structured
