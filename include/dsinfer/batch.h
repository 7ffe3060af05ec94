// The OpenAI Batch API file format (what `dsinfer generate --input/--output` reads and writes): one request
// per input line {"custom_id", "method": "POST", "url", "body"}, one record per output line.
#pragma once
#include <string>
#include <string_view>

#include "dsinfer/engine.h"
#include "dsinfer/request.h"

namespace dsinfer {

struct BatchLine {
  std::string custom_id;  // empty when the line has none (the record then carries null)
  Request request;
};

// Parses one input line (line_number is 1-based, for messages). On failure returns false, sets *error, and
// still fills out->custom_id when the line had a readable one, so the error record can name it.
bool parse_batch_line(std::string_view line, size_t line_number, BatchLine* out, std::string* error);

// Output records (one JSON line each, no trailing newline). record_id is "batch_req_<line number>". Text
// that is not valid UTF-8 is written with U+FFFD replacement characters.
std::string batch_success_line(size_t line_number, const std::string& custom_id, const RequestResult& result);
std::string batch_error_line(size_t line_number, const std::string& custom_id, const std::string& code,
                             const std::string& message);

}  // namespace dsinfer
