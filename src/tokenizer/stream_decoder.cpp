// Incremental UTF-8 assembly over token bytes (see stream_decoder.h for the invalid-byte policy).
#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer {

Status StreamDecoder::push(int32_t id, std::string& out) {
  if (!tok_.is_valid_id(id))
    return Status::errorf("stream decode: token id {} is outside the vocabulary [0, {})", id, tok_.vocab_size());
  if (skip_special_ && tok_.is_special(id)) return Status::ok();
  pending_ += tok_.token_bytes(id);
  // Emit everything except a trailing valid-but-incomplete sequence.
  size_t i = 0, keep_from = pending_.size();
  while (i < pending_.size()) {
    bool incomplete = false;
    size_t len = utf8_valid_len(pending_, i, &incomplete);
    if (len) {
      i += len;
    } else if (incomplete) {
      keep_from = i;
      break;
    } else {
      // Invalid and final: the lossy pass below replaces it. A split point is never inside an invalid
      // maximal subpart (its later bytes are continuation bytes, which are never "incomplete").
      ++i;
    }
  }
  utf8_append_lossy(std::string_view(pending_).substr(0, keep_from), out);
  pending_.erase(0, keep_from);
  return Status::ok();
}

void StreamDecoder::finish(std::string& out) {
  if (!pending_.empty()) utf8_append_lossy(pending_, out);
  pending_.clear();
}

}  // namespace dsinfer::tokenizer
