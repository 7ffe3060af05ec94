// Chat defaults of a model directory (see chat_defaults.h). The file holds request fields, read by the same
// parser as a request body (parse_thinking), so its values mean exactly what they mean in a request.
#include "chat/chat_defaults.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_options.h"
#include "io/model_files.h"

namespace dsinfer::chat {

Result<ChatDefaults> load_chat_defaults(const std::string& model_dir) {
  ChatDefaults d;
  const std::filesystem::path path = std::filesystem::path(model_dir) / kChatDefaultsFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return d;
  DSI_ASSIGN_OR_RETURN(const std::string text, io::read_regular_file(path.string()));
  d.fields = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (d.fields.is_discarded() || !d.fields.is_object())
    return Status::errorf("{}: not a JSON object (expected {{\"thinking\": {{\"type\": \"disabled\"}}}} or the like)",
                          path.string());
  for (const auto& [key, value] : d.fields.items())
    if (key != "thinking" && key != "reasoning_effort")
      return Status::errorf("{}: unknown field \"{}\" (chat defaults take \"thinking\" and \"reasoning_effort\")",
                            path.string(), key);
  Conversation probe;
  if (Status s = parse_thinking(d.fields, probe); !s) return Status::errorf("{}: {}", path.string(), s.message());
  d.source = path.string();
  return d;
}

Status apply_chat_defaults(const ChatDefaults& d, Conversation& conv) {
  if (!conv.thinking_given) {
    Conversation probe;
    DSI_RETURN_IF_ERROR(parse_thinking(d.fields, probe));
    conv.thinking = probe.thinking;
    conv.effort = probe.effort;
    conv.effort_budget = probe.effort_budget;
    conv.thinking_given = true;
    if (!conv.thinking)
      for (ChatMessage& m : conv.messages) {  // earlier turns' reasoning is not rendered without thinking
        m.reasoning.clear();
        m.has_reasoning = false;
      }
  }
  return check_thinking_tool_choice(conv);
}

}  // namespace dsinfer::chat
