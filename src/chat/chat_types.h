// Chat data model shared by the request parser, the DeepSeek-V4 prompt renderer and the output parser: a
// validated conversation (OpenAI Chat Completions semantics, as deepseek-recipe's Conversation).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsinfer::chat {

using ojson = nlohmann::ordered_json;  // key order matters: tool schemas are rendered as given

struct ToolCall {
  std::string id;
  std::string name;
  ojson arguments = ojson::object();  // always a JSON object
};

enum class Role { kSystem, kUser, kAssistant, kTool, kLatestReminder };

struct ChatMessage {
  Role role = Role::kUser;
  std::string content;          // image parts of a V4 conversation are "[Unsupported Image]" text
  std::string reasoning;        // assistant only
  bool has_reasoning = false;   // reasoning_content was given
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
  bool prefix = false;               // assistant continuation (must be the last message)
};

struct ToolDefinition {
  std::string name;
  std::string description;
  ojson parameters = ojson::object();  // as rendered: a strict tool's schema is already normalised
  bool strict = false;
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };
enum class ResponseFormat { kText, kJsonObject, kJsonSchema, kRegex };
// kLow (low / minimal): no reasoning-effort preamble; kHigh (medium / high / xhigh, the default); kMax (max / ultra).
enum class ReasoningEffort { kLow, kHigh, kMax };

// One system message where it was sent (V4.1 renders each in place; V4 uses the merged Conversation::system).
struct SystemMessage {
  size_t before = 0;  // number of Conversation::messages before it
  std::string content;
};

struct Conversation {
  std::vector<ChatMessage> messages;  // system messages already merged into `system`
  std::string system;                 // all system contents joined by "\n\n"
  bool has_system = false;
  std::vector<SystemMessage> system_messages;  // the same system contents, in place
  bool thinking = true;
  bool thinking_given = false;        // the request set "thinking" or "reasoning_effort" (else the model's defaults)
  ReasoningEffort effort = ReasoningEffort::kHigh;
  int effort_budget = 50;             // V4.1's numeric effort 1-100 (named levels mapped; default high = 50)
  std::vector<ToolDefinition> tools;  // after tool_choice: empty for "none", only the named tool for a named one
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string named_tool;
  ResponseFormat response_format = ResponseFormat::kText;
  ojson response_schema;              // json_schema: the schema as written (also when strict)
  std::string response_regex;         // regex: not rendered into the prompt
};

}  // namespace dsinfer::chat
