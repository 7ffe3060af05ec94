// V4 output parsing state machine: reasoning -> </think> -> content -> <｜DSML｜tool_calls> ... -> end.
// Leading newlines of reasoning and of content are dropped, and so are the newlines between content and a
// tool_calls block (deepseek-recipe's StreamProcessor does the same).
#include "chat/output_parser.h"

#include "chat/chat_request.h"
#include "io/json_limits.h"

namespace dsinfer::chat {
namespace {

// Length of the longest suffix of s that is a proper prefix of marker.
size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

OutputParser::OutputParser(ParserOptions opts) : opts_(std::move(opts)) {
  const std::string& d = opts_.tokens.dsml;
  think_end_ = opts_.tokens.think_end;
  calls_open_ = "<" + d + "tool_calls>";
  calls_close_ = "</" + d + "tool_calls>";
  invoke_open_ = "<" + d + "invoke name=\"";
  invoke_close_ = "</" + d + "invoke>";
  param_open_ = "<" + d + "parameter name=\"";
  param_close_ = "</" + d + "parameter>";
  state_ = opts_.starts_in_tool_calls ? State::kToolCalls : opts_.thinking ? State::kReasoning : State::kContent;
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
  if (!error_.is_ok()) return error_;
  if (state_ == State::kToolCalls) {
    error_ = Status::errorf("model output ended inside a DSML tool_calls block ({} unparsed bytes)", buf_.size());
    content_started_ = true;
    emit_content(buf_, d);
    buf_.clear();
    return error_;
  }
  return Status::ok();
}

Status OutputParser::parse_invoke(std::string_view body, ParsedToolCall& call) const {
  // body: everything after `<｜DSML｜invoke name="` up to (not including) `</｜DSML｜invoke>`.
  size_t q = body.find("\">");
  if (q == std::string_view::npos) return Status::error("DSML invoke without a closing '\">' after its name");
  call.name = std::string(body.substr(0, q));
  std::string_view rest = body.substr(q + 2);
  ojson args = ojson::object();
  while (true) {
    size_t p = rest.find(param_open_);
    if (p == std::string_view::npos) break;
    rest.remove_prefix(p + param_open_.size());
    size_t nq = rest.find("\" string=\"");
    if (nq == std::string_view::npos) return Status::errorf("DSML parameter of {:?} lacks string=\"...\"", call.name);
    std::string name(rest.substr(0, nq));
    rest.remove_prefix(nq + 10);
    size_t fq = rest.find("\">");
    if (fq == std::string_view::npos) return Status::errorf("DSML parameter {:?} lacks '\">'", name);
    bool is_string = rest.substr(0, fq) == "true";
    rest.remove_prefix(fq + 2);
    size_t end = rest.find(param_close_);
    if (end == std::string_view::npos) return Status::errorf("DSML parameter {:?} is not closed", name);
    std::string_view value = rest.substr(0, end);
    rest.remove_prefix(end + param_close_.size());
    if (is_string) {
      args[name] = std::string(value);
    } else {
      // Too deep (or not JSON after all): keep the text.
      ojson v = io::json_nesting_depth(value) > io::kMaxJsonDepth
                    ? ojson(ojson::value_t::discarded)
                    : ojson::parse(value.begin(), value.end(), nullptr, /*allow_exceptions=*/false);
      args[name] = v.is_discarded() ? ojson(std::string(value)) : v;
    }
  }
  call.arguments = dump_python_style(args);
  return Status::ok();
}

void OutputParser::step(ParseDelta& d, bool final) {
  while (true) {
    if (state_ == State::kReasoning) {
      size_t f = buf_.find(think_end_);
      if (f != std::string::npos) {
        emit_reasoning(std::string_view(buf_).substr(0, f), d);
        buf_.erase(0, f + think_end_.size());
        state_ = State::kContent;
        continue;
      }
      size_t hold = final ? 0 : partial_marker_suffix(buf_, think_end_);
      emit_reasoning(std::string_view(buf_).substr(0, buf_.size() - hold), d);
      buf_.erase(0, buf_.size() - hold);
      return;
    }
    if (state_ == State::kContent || state_ == State::kAfterToolCalls) {
      size_t f = state_ == State::kContent ? buf_.find(calls_open_) : std::string::npos;
      if (f != std::string::npos) {
        size_t e = f;
        while (e > 0 && buf_[e - 1] == '\n') --e;  // newlines before the block are layout, not content
        emit_content(std::string_view(buf_).substr(0, e), d);
        buf_.erase(0, f + calls_open_.size());
        state_ = State::kToolCalls;
        continue;
      }
      size_t hold = 0;
      if (!final && state_ == State::kContent) {
        hold = partial_marker_suffix(buf_, calls_open_);
        while (hold < buf_.size() && buf_[buf_.size() - hold - 1] == '\n') ++hold;
      }
      emit_content(std::string_view(buf_).substr(0, buf_.size() - hold), d);
      buf_.erase(0, buf_.size() - hold);
      return;
    }
    // kToolCalls: report each completed invoke; stop at the closing tag.
    size_t inv = buf_.find(invoke_open_), close = buf_.find(calls_close_);
    if (inv != std::string::npos && (close == std::string::npos || inv < close)) {
      size_t end = buf_.find(invoke_close_, inv);
      if (end == std::string::npos) return;  // wait for more text
      ParsedToolCall call;
      call.index = static_cast<int>(calls_.size());
      call.id = fmt::format("call_{}", call.index);
      Status s = parse_invoke(std::string_view(buf_).substr(inv + invoke_open_.size(), end - inv - invoke_open_.size()), call);
      if (!s.is_ok() && error_.is_ok()) error_ = s;
      if (s.is_ok()) {
        calls_.push_back(call);
        d.tool_calls.push_back(std::move(call));
      }
      buf_.erase(0, end + invoke_close_.size());
      continue;
    }
    if (close != std::string::npos) {
      buf_.erase(0, close + calls_close_.size());
      state_ = State::kAfterToolCalls;
      continue;
    }
    return;
  }
}

}  // namespace dsinfer::chat
