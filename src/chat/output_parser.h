// Incremental parser of DeepSeek-V4 model output (the text after the prompt): reasoning vs content around
// </think>, and DSML tool-call blocks into OpenAI tool_calls (name + arguments as a JSON string). Text can be
// pushed in arbitrary pieces (e.g. per decoded token); a marker split across pieces is held back, never leaked.
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

// What one push() produced: text to append to reasoning_content / content, and tool calls completed so far
// (a call is reported once its </｜DSML｜invoke> has arrived).
struct ParseDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
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
  // End of output: flushes held-back text. A tool_calls block or invoke that never closed is an error naming
  // it (the delta still holds everything parsed before it, and the unparsed text is returned as content).
  Status finish(ParseDelta& out);

  // The complete message so far (sum of all deltas).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& tool_calls() const { return calls_; }

 private:
  enum class State { kReasoning, kContent, kToolCalls, kAfterToolCalls };
  void step(ParseDelta& d, bool final);
  Status parse_invoke(std::string_view body, ParsedToolCall& call) const;
  void emit_reasoning(std::string_view s, ParseDelta& d);
  void emit_content(std::string_view s, ParseDelta& d);

  ParserOptions opts_;
  State state_;
  std::string buf_;
  bool reasoning_started_ = false, content_started_ = false;
  std::string reasoning_, content_;
  std::vector<ParsedToolCall> calls_;
  std::string think_end_, calls_open_, calls_close_, invoke_open_, invoke_close_, param_open_, param_close_;
  Status error_;
};

}  // namespace dsinfer::chat
