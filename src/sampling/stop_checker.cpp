// Incremental stop checking (see stop_checker.h). The invariant: every byte of released text has been
// proven not to start a stop string, so a match can only begin inside pending_.
#include "sampling/stop_checker.h"

#include <algorithm>

namespace dsinfer::sampling {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
  }
  return "";
}

StopChecker::StopChecker(const SamplingParams* params, int64_t eos_token_id, int64_t max_tokens)
    : params_(params), eos_(eos_token_id), max_tokens_(max_tokens) {}

StopResult StopChecker::append(int32_t token, std::string_view text_delta) {
  StopResult r;
  if (finished_) return r;
  ++num_tokens_;
  const SamplingParams& p = *params_;
  const bool active = num_tokens_ >= p.min_tokens;
  auto finish = [&](FinishReason why) {
    finished_ = true;
    r.finished = true;
    r.reason = why;
  };

  // Stop tokens: their own text is dropped, the held-back text is released (it did not become a stop string).
  bool is_stop_token = (!p.ignore_eos && eos_ >= 0 && token == eos_) ||
                       std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  if (active && is_stop_token) {
    r.text = std::move(pending_);
    pending_.clear();
    r.stop_token = token;
    finish(FinishReason::Stop);
    return r;
  }

  pending_.append(text_delta);
  if (!p.stop.empty()) {
    if (active) {
      // Earliest match wins; at equal start the longer stop string is reported (the output is the same).
      size_t best = std::string::npos;
      const std::string* which = nullptr;
      for (const std::string& s : p.stop) {
        size_t at = pending_.find(s);
        if (at != std::string::npos && (at < best || (at == best && s.size() > which->size()))) {
          best = at;
          which = &s;
        }
      }
      if (which) {
        r.text = pending_.substr(0, best);
        r.stop_string = *which;
        pending_.clear();
        finish(FinishReason::Stop);
        return r;
      }
    }
    // Hold back the longest suffix of pending_ that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& s : p.stop) {
      size_t max_len = std::min(s.size() - 1, pending_.size());
      for (size_t len = max_len; len > hold; --len) {
        if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(s).substr(0, len)) {
          hold = len;
          break;
        }
      }
    }
    r.text = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
  } else {
    r.text = std::move(pending_);
    pending_.clear();
  }

  if (num_tokens_ >= max_tokens_) {
    r.text += pending_;
    pending_.clear();
    finish(FinishReason::Length);
  }
  return r;
}

}  // namespace dsinfer::sampling
