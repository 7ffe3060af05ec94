// Incremental parser of DeepSeek-V4 model output (the text after the prompt): reasoning vs content around
// </think>, and DSML tool-call blocks into OpenAI tool_calls (name + arguments as a JSON string). Text can be
// pushed in arbitrary pieces (e.g. per decoded token); a marker split across pieces is held back, never leaked.
// Tool calls are also reported piece by piece for streaming (ToolCallDelta): the name once an invoke's header
// is complete, then the arguments JSON as it is parsed (string values character by character, other values
// per parameter). A completed call's `arguments` is exactly the concatenation of its argument deltas.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "chat/chat_encoding.h"

namespace dsinfer::chat {

struct ParsedToolCall {
  int index = 0;
  std::string id;         // "call_<index>"; the server may replace it with a unique id
  std::string name;
  std::string arguments;  // JSON object text, ", " / ": " separators (as deepseek-recipe emits)
};

// A streamed piece of a tool call: the first piece of a call carries its id and name (arguments ""), later
// ones the next part of the arguments text.
struct ToolCallDelta {
  int index = 0;
  std::string id, name;   // first piece only
  std::string arguments;
};

// What one push() produced: text to append to reasoning_content / content, tool calls completed so far
// (a call is reported once its </｜DSML｜invoke> has arrived) and the tool-call pieces for streaming.
struct ParseDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  std::vector<ToolCallDelta> tool_call_deltas;
};

struct ParserOptions {
  bool thinking = true;              // the prompt ended with <think>: output starts in reasoning
  bool starts_in_tool_calls = false; // the prompt opened a tool_calls block (tool_choice required / named)
  bool parse_tool_calls = true;      // false without tools (or tool_choice "none"): DSML is plain content
  bool keep_leading_newlines = false;  // the output continues a prefix message's reasoning / content
  V4Tokens tokens;
};

class OutputParser {
 public:
  explicit OutputParser(ParserOptions opts);
  ParseDelta push(std::string_view text);
  // End of output: flushes held-back text. A tool_calls block or invoke that never closed (output cut off by
  // max_tokens) is an error naming it; no DSML markup reaches content: a call whose name was complete is
  // reported with the arguments parsed so far (a value cut short ends there; the object is closed, valid JSON),
  // the rest of the block is dropped.
  Status finish(ParseDelta& out);

  // The complete message so far (sum of all deltas).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& tool_calls() const { return calls_; }

 private:
  // kToolCalls: between invokes; kInvokeName: after `<invoke name="`; kInvokeBody: between parameters;
  // kParamHeader: after `<parameter name="`; kParamValue: inside a parameter's value.
  enum class State { kReasoning, kContent, kToolCalls, kInvokeName, kInvokeBody, kParamHeader, kParamValue, kAfterToolCalls };
  void step(ParseDelta& d, bool final);
  bool step_tool_calls(ParseDelta& d, bool final);  // false: wait for more text
  bool step_param(ParseDelta& d, bool final);
  void consume(size_t n);  // drops n bytes of buf_ (kept in block_raw_ while inside a tool_calls block)
  void emit_args(std::string piece, ParseDelta& d);
  void close_partial_call(ParseDelta& d);  // finish() inside an invoke: report it with its arguments so far
  void fail(Status s);
  void emit_reasoning(std::string_view s, ParseDelta& d);
  void emit_content(std::string_view s, ParseDelta& d);

  ParserOptions opts_;
  State state_;
  std::string buf_;
  bool reasoning_started_ = false, content_started_ = false;
  std::string reasoning_, content_;
  std::vector<ParsedToolCall> calls_;
  ParsedToolCall cur_;             // the invoke being parsed
  bool cur_has_params_ = false;
  std::string param_name_;         // the parameter being parsed
  bool param_is_string_ = false;
  std::string block_raw_;          // tool_calls text consumed since the last completed invoke
  std::string think_end_, calls_open_, calls_close_, invoke_open_, invoke_close_, param_open_, param_close_;
  Status error_;
};

}  // namespace dsinfer::chat
