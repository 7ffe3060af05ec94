// A model directory's chat defaults (DIR/chat_defaults.json): the "thinking" / "reasoning_effort" a chat request
// gets when it sets neither. Without the file, DeepSeek's API defaults: thinking on, effort high.
#pragma once
#include <string>

#include "chat/chat_types.h"
#include "core/status.h"

namespace dsinfer::chat {

inline constexpr const char* kChatDefaultsFile = "chat_defaults.json";

struct ChatDefaults {
  ojson fields = ojson::object();  // {"thinking": {...}, "reasoning_effort": ...} as in a request body
  std::string source;              // the file read, or "" for the API defaults
};

// Reads DIR/chat_defaults.json; the API defaults when the file does not exist. An error names the file and the field.
Result<ChatDefaults> load_chat_defaults(const std::string& model_dir);

// For a conversation whose request set neither field: the defaults' thinking mode and effort (reasoning of earlier
// turns dropped when thinking ends up off). Then, for every conversation, DeepSeek's tool_choice rule in
// thinking mode (check_thinking_tool_choice). Afterwards conv.thinking_given is true.
Status apply_chat_defaults(const ChatDefaults& d, Conversation& conv);

}  // namespace dsinfer::chat
