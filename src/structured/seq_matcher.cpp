// SequenceMatcher (see seq_matcher.h).
#include "structured/seq_matcher.h"

#include <algorithm>
#include <cstring>

#include <xgrammar/xgrammar.h>

#include "structured/bitmask_row.h"

namespace dsinfer::structured {

namespace {

const size_t kThinkEndLen = std::strlen(kThinkEnd);

}  // namespace

bool allow_stop_if_empty(std::span<int32_t> row, int32_t stop_token) {
  for (int32_t w : row)
    if (w != 0) return false;
  if (stop_token >= 0 && size_t(stop_token / 32) < row.size())
    row[size_t(stop_token / 32)] |= int32_t(1u << (stop_token % 32));
  return true;
}

SequenceMatcher::SequenceMatcher(std::shared_ptr<const xgrammar::CompiledGrammar> grammar,
                                 const tokenizer::Tokenizer& tok, std::vector<int32_t> stop_tokens,
                                 bool wait_for_think_end)
    : grammar_(std::move(grammar)), tok_(&tok), stop_tokens_(std::move(stop_tokens)),
      wait_for_think_end_(wait_for_think_end),
      matcher_(std::make_unique<xgrammar::GrammarMatcher>(*grammar_, stop_tokens_)),
      gate_open_(!wait_for_think_end) {}

SequenceMatcher::~SequenceMatcher() = default;
SequenceMatcher::SequenceMatcher(SequenceMatcher&&) noexcept = default;
SequenceMatcher& SequenceMatcher::operator=(SequenceMatcher&&) noexcept = default;

bool SequenceMatcher::terminated() const { return matcher_->IsTerminated(); }
bool SequenceMatcher::completed() const { return matcher_->IsCompleted(); }

void SequenceMatcher::fill_bitmask(std::span<int32_t> row) {
  int64_t shape[1];
  DLTensor t = bitmask_row_tensor(row, shape);
  matcher_->FillNextTokenBitmask(&t);
  allow_stop_if_empty(row, stop_tokens_.empty() ? -1 : stop_tokens_[0]);
}

void SequenceMatcher::push_tail(std::string_view bytes) {
  tail_ += bytes;
  if (tail_.size() >= kThinkEndLen) tail_.erase(0, tail_.size() - (kThinkEndLen - 1));
}

bool SequenceMatcher::accept(int32_t token) {
  const int64_t index = int64_t(history_.size());
  history_.push_back(token);
  uint8_t steps = 0;
  bool ok = true;
  if (!gate_open_) {
    // Still in the reasoning: look for "</think>" ending inside this token's bytes.
    std::string window = tail_;
    window += tok_->token_bytes(token);
    const size_t at = window.find(kThinkEnd);
    if (at == std::string::npos) {
      push_tail(tok_->token_bytes(token));
    } else {
      gate_open_ = true;
      gate_token_ = index;
      tail_.clear();
      const std::string rest = window.substr(at + kThinkEndLen);
      if (!rest.empty()) {
        ok = matcher_->AcceptString(rest);
        steps = ok ? 1 : 0;
      }
    }
  } else if (!violated_ && !matcher_->IsTerminated()) {
    ok = matcher_->AcceptToken(token);
    steps = ok ? 1 : 0;
  }
  steps_.push_back(steps);
  if (!ok && !violated_) {
    violated_ = true;
    violated_at_ = index;
  }
  return ok;
}

Status SequenceMatcher::rollback(int64_t n) {
  if (n < 0 || n > num_tokens())
    return Status::errorf("structured outputs: cannot roll back {} tokens, the sequence has generated {}", n, num_tokens());
  const int64_t keep = num_tokens() - n;
  if (wait_for_think_end_ && gate_token_ >= keep) {
    // Back into the reasoning: the grammar has not started yet at `keep` tokens.
    matcher_->Reset();
    gate_open_ = false;
    gate_token_ = -1;
    violated_ = false;
    violated_at_ = -1;
    tail_.clear();
    for (int64_t i = std::max<int64_t>(0, keep - int64_t(kThinkEndLen)); i < keep; ++i)
      push_tail(tok_->token_bytes(history_[size_t(i)]));
  } else {
    int32_t steps = 0;
    for (int64_t i = keep; i < num_tokens(); ++i) steps += steps_[size_t(i)];
    if (steps > 0) matcher_->Rollback(steps);
    if (violated_ && violated_at_ >= keep) {
      violated_ = false;
      violated_at_ = -1;
    }
  }
  history_.resize(size_t(keep));
  steps_.resize(size_t(keep));
  return Status::ok();
}

TentativeMatcher::TentativeMatcher(SequenceMatcher* m, int64_t vocab_size)
    : m_(m), row_(size_t((vocab_size + 31) / 32)) {}

TentativeMatcher::~TentativeMatcher() {
  // Cannot fail: exactly the pushed tokens are undone.
  if (m_ && pushed_ > 0) (void)m_->rollback(pushed_);
}

void TentativeMatcher::push(int32_t token) {
  if (!m_) return;
  m_->accept(token);  // a token outside the grammar sets the latch; the rollback clears it
  ++pushed_;
}

std::span<const int32_t> TentativeMatcher::mask() {
  if (!m_ || !m_->constrained()) return {};
  m_->fill_bitmask(row_);
  return row_;
}

}  // namespace dsinfer::structured
