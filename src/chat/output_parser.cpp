// V4 output parsing state machine: reasoning -> </think> -> content -> <｜DSML｜tool_calls> ... -> end.
// Leading newlines of reasoning and of content are dropped, and so are the newlines before </think> and before
// a tool_calls block; text after the block is dropped (deepseek-recipe's StreamProcessor does the same).
#include "chat/output_parser.h"

#include <algorithm>

#include "chat/chat_request.h"

namespace dsinfer::chat {
namespace {

// Length of the longest suffix of s that is a proper prefix of marker.
size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// Bytes at the end of s that start a UTF-8 sequence not yet complete (held back so that a streamed JSON string
// never splits a character).
size_t incomplete_utf8_suffix(std::string_view s) {
  for (size_t k = 1; k <= std::min<size_t>(3, s.size()); ++k) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c >> 6) == 2) continue;  // continuation byte: look further back
    const size_t need = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return need > k ? k : 0;
  }
  return 0;
}

// s as the inside of a JSON string literal (no quotes); invalid UTF-8 becomes U+FFFD.
std::string json_string_body(std::string_view s) {
  std::string q = ojson(std::string(s)).dump(-1, ' ', false, ojson::error_handler_t::replace);
  return q.substr(1, q.size() - 2);
}

}  // namespace

OutputParser::OutputParser(ParserOptions opts) : opts_(std::move(opts)) {
  const std::string& d = opts_.tokens.dsml;
  think_end_ = opts_.tokens.think_end;
  calls_open_ = "<" + d + opts_.tokens.calls_tag + ">";
  calls_close_ = "</" + d + opts_.tokens.calls_tag + ">";
  invoke_open_ = "<" + d + opts_.tokens.invoke_tag + " name=\"";
  invoke_close_ = "</" + d + opts_.tokens.invoke_tag + ">";
  param_open_ = "<" + d + opts_.tokens.param_tag + " name=\"";
  param_close_ = "</" + d + opts_.tokens.param_tag + ">";
  state_ = opts_.starts_in_tool_calls ? State::kToolCalls : opts_.thinking ? State::kReasoning : State::kContent;
  if (opts_.keep_leading_newlines) (state_ == State::kReasoning ? reasoning_started_ : content_started_) = true;
}

void OutputParser::emit_reasoning(std::string_view s, ParseDelta& d) {
  if (!reasoning_started_) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    if (s.empty()) return;
    reasoning_started_ = true;
  }
  d.reasoning += s;
  reasoning_ += s;
}

void OutputParser::emit_content(std::string_view s, ParseDelta& d) {
  if (!content_started_) {
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
    if (s.empty()) return;
    content_started_ = true;
  }
  d.content += s;
  content_ += s;
}

ParseDelta OutputParser::push(std::string_view text) {
  ParseDelta d;
  buf_ += text;
  step(d, false);
  return d;
}

Status OutputParser::finish(ParseDelta& d) {
  step(d, true);
  if (state_ != State::kReasoning && state_ != State::kContent && state_ != State::kAfterToolCalls) {
    // Cut off inside the block (max_tokens, or EOS): the markup never reaches content. A call whose name was
    // complete is reported with the arguments parsed so far, closed into a JSON object; the error says so.
    const bool in_call = state_ == State::kInvokeBody || state_ == State::kParamHeader || state_ == State::kParamValue;
    Status s = in_call ? Status::errorf("model output ended inside DSML tool call {:?} (its arguments are cut short: "
                                        "{} unparsed bytes)", cur_.name, block_raw_.size() + buf_.size())
                       : Status::errorf("model output ended inside a DSML tool_calls block ({} unparsed bytes dropped)",
                                        block_raw_.size() + buf_.size());
    if (error_.is_ok()) error_ = s;
    if (in_call) close_partial_call(d);
    block_raw_.clear();
    buf_.clear();
    state_ = State::kAfterToolCalls;
  }
  return error_;
}

void OutputParser::close_partial_call(ParseDelta& d) {
  if (state_ == State::kParamValue) {
    std::string_view value(buf_);  // less a closing marker cut short and an incomplete UTF-8 character
    value.remove_suffix(
        std::max(partial_marker_suffix(value, param_close_), partial_marker_suffix(value, invoke_close_)));
    value.remove_suffix(incomplete_utf8_suffix(value));
    if (param_is_string_) {
      emit_args(json_string_body(value) + "\"", d);
    } else {  // a value cut short is kept as a JSON string (valid JSON either way)
      emit_args(ojson::accept(value.begin(), value.end()) && !value.empty()
                    ? std::string(value)
                    : ojson(std::string(value)).dump(-1, ' ', false, ojson::error_handler_t::replace), d);
    }
  }
  emit_args(cur_has_params_ ? "}" : "{}", d);
  calls_.push_back(cur_);
  d.tool_calls.push_back(cur_);
}

void OutputParser::fail(Status s) {
  if (error_.is_ok()) error_ = std::move(s);
}

void OutputParser::consume(size_t n) {
  block_raw_.append(buf_, 0, n);
  buf_.erase(0, n);
}

void OutputParser::emit_args(std::string piece, ParseDelta& d) {
  if (piece.empty()) return;
  cur_.arguments += piece;
  if (d.tool_call_deltas.empty() || d.tool_call_deltas.back().index != cur_.index)
    d.tool_call_deltas.push_back({cur_.index, "", "", ""});
  d.tool_call_deltas.back().arguments += piece;
}

void OutputParser::step(ParseDelta& d, bool final) {
  while (true) {
    if (state_ == State::kReasoning) {
      // </think> ends reasoning; a tool_calls block may also open straight from it. Newlines right before
      // either marker are layout, not reasoning.
      const size_t f = buf_.find(think_end_);
      const size_t c = opts_.parse_tool_calls ? buf_.find(calls_open_) : std::string::npos;
      if (f != std::string::npos || c != std::string::npos) {
        const bool to_calls = c < f;
        const size_t at = to_calls ? c : f;
        size_t e = at;
        while (e > 0 && buf_[e - 1] == '\n') --e;
        emit_reasoning(std::string_view(buf_).substr(0, e), d);
        buf_.erase(0, at + (to_calls ? calls_open_ : think_end_).size());
        state_ = to_calls ? State::kToolCalls : State::kContent;
        if (to_calls) block_raw_.clear();
        continue;
      }
      size_t hold = 0;
      if (!final) {
        hold = std::max(partial_marker_suffix(buf_, think_end_), opts_.parse_tool_calls ? partial_marker_suffix(buf_, calls_open_) : 0);
        while (hold < buf_.size() && buf_[buf_.size() - hold - 1] == '\n') ++hold;
      }
      emit_reasoning(std::string_view(buf_).substr(0, buf_.size() - hold), d);
      buf_.erase(0, buf_.size() - hold);
      return;
    }
    if (state_ == State::kAfterToolCalls) {
      buf_.clear();  // nothing follows a tool_calls block (deepseek-recipe drops it as invalid)
      return;
    }
    if (state_ == State::kContent) {
      size_t f = opts_.parse_tool_calls ? buf_.find(calls_open_) : std::string::npos;
      if (f != std::string::npos) {
        size_t e = f;
        while (e > 0 && buf_[e - 1] == '\n') --e;  // newlines before the block are layout, not content
        emit_content(std::string_view(buf_).substr(0, e), d);
        buf_.erase(0, f + calls_open_.size());
        state_ = State::kToolCalls;
        block_raw_.clear();
        continue;
      }
      size_t hold = 0;
      if (opts_.parse_tool_calls) {
        hold = partial_marker_suffix(buf_, calls_open_);
        // The output ends (max_tokens) inside the opening marker: markup, dropped from "<｜" on (a lone "<" stays).
        if (final && hold < 1 + std::string_view("｜").size()) hold = 0;
        if (!final || hold > 0)
          while (hold < buf_.size() && buf_[buf_.size() - hold - 1] == '\n') ++hold;
      }
      emit_content(std::string_view(buf_).substr(0, buf_.size() - hold), d);
      buf_.erase(0, buf_.size() - hold);
      if (final) buf_.clear();
      return;
    }
    if (!step_tool_calls(d, final)) return;
  }
}

bool OutputParser::step_tool_calls(ParseDelta& d, bool final) {
  constexpr size_t npos = std::string::npos;
  if (state_ == State::kToolCalls) {  // between invokes: the next invoke, or the end of the block
    // The closing tag is also accepted as "</｜DSML｜ calls>" (deepseek-recipe does).
    const std::string close_alt = "</" + opts_.tokens.dsml + " calls>";
    size_t inv = buf_.find(invoke_open_), close = buf_.find(calls_close_), close_len = calls_close_.size();
    if (size_t alt = buf_.find(close_alt); alt < close) {
      close = alt;
      close_len = close_alt.size();
    }
    if (inv != npos && (close == npos || inv < close)) {
      consume(inv + invoke_open_.size());
      state_ = State::kInvokeName;
      return true;
    }
    if (close == npos) return false;
    buf_.erase(0, close + close_len);
    block_raw_.clear();
    state_ = State::kAfterToolCalls;
    return true;
  }
  const size_t ic = buf_.find(invoke_close_);
  if (state_ == State::kInvokeName) {  // `<invoke name="` NAME `">`
    const size_t q = buf_.find("\">");
    if (q != npos && (ic == npos || q < ic)) {
      cur_ = ParsedToolCall{};
      cur_.index = static_cast<int>(calls_.size());
      cur_.id = fmt::format("call_{}", cur_.index);
      cur_.name = buf_.substr(0, q);
      cur_has_params_ = false;
      d.tool_call_deltas.push_back({cur_.index, cur_.id, cur_.name, ""});
      consume(q + 2);
      state_ = State::kInvokeBody;
      return true;
    }
    if (ic == npos) return false;
    fail(Status::error("DSML invoke without a closing '\">' after its name"));  // dropped: nothing was streamed
    buf_.erase(0, ic + invoke_close_.size());
    block_raw_.clear();
    state_ = State::kToolCalls;
    return true;
  }
  if (state_ == State::kInvokeBody) {  // the next parameter, or the end of the invoke
    const size_t p = buf_.find(param_open_);
    if (p != npos && (ic == npos || p < ic)) {
      consume(p + param_open_.size());
      state_ = State::kParamHeader;
      return true;
    }
    if (ic == npos) return false;
    emit_args(cur_has_params_ ? "}" : "{}", d);
    buf_.erase(0, ic + invoke_close_.size());
    block_raw_.clear();
    calls_.push_back(cur_);
    d.tool_calls.push_back(cur_);
    state_ = State::kToolCalls;
    return true;
  }
  return step_param(d, final);
}

bool OutputParser::step_param(ParseDelta& d, bool final) {
  constexpr size_t npos = std::string::npos;
  const size_t ic = buf_.find(invoke_close_), pc = buf_.find(param_close_);
  const size_t bound = std::min(ic, pc);  // a parameter never spans either marker
  if (state_ == State::kParamHeader) {  // NAME `" string="` (true|false) `">`
    const size_t nq = buf_.find("\" string=\"");
    const size_t fq = nq == npos ? npos : buf_.find("\">", nq + 10);
    if (fq != npos && fq < bound) {
      param_name_ = buf_.substr(0, nq);
      param_is_string_ = std::string_view(buf_).substr(nq + 10, fq - nq - 10) == "true";
      std::string head = cur_has_params_ ? ", " : "{";
      head += ojson(param_name_).dump(-1, ' ', false, ojson::error_handler_t::replace);
      head += param_is_string_ ? ": \"" : ": ";
      emit_args(std::move(head), d);
      cur_has_params_ = true;
      consume(fq + 2);
      state_ = State::kParamValue;
      return true;
    }
    if (bound == npos) return false;
    if (nq == npos || nq > bound) fail(Status::errorf("DSML parameter of {:?} lacks string=\"...\"", cur_.name));
    else fail(Status::errorf("DSML parameter {:?} lacks '\">'", buf_.substr(0, nq)));
    consume(pc < ic ? pc + param_close_.size() : ic);  // the malformed parameter is skipped
    state_ = State::kInvokeBody;
    return true;
  }
  // kParamValue: string values stream as they arrive; other values are parsed as JSON once complete.
  if (bound == npos) {
    if (!param_is_string_ || final) return false;
    size_t n = buf_.size() - std::max(partial_marker_suffix(buf_, param_close_), partial_marker_suffix(buf_, invoke_close_));
    n -= incomplete_utf8_suffix(std::string_view(buf_).substr(0, n));
    if (n == 0) return false;
    emit_args(json_string_body(std::string_view(buf_).substr(0, n)), d);
    consume(n);
    return false;
  }
  if (ic < pc) fail(Status::errorf("DSML parameter {:?} is not closed", param_name_));
  const std::string_view value = std::string_view(buf_).substr(0, bound);
  if (param_is_string_) {
    emit_args(json_string_body(value) + "\"", d);
  } else {
    // JSON values verbatim, as deepseek-recipe builds the arguments text; not JSON after all: the text as a
    // JSON string.
    emit_args(ojson::accept(value.begin(), value.end())
                  ? std::string(value)
                  : ojson(std::string(value)).dump(-1, ' ', false, ojson::error_handler_t::replace), d);
  }
  consume(ic < pc ? ic : pc + param_close_.size());
  state_ = State::kInvokeBody;
  return true;
}

}  // namespace dsinfer::chat
