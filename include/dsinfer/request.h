// The typed request: what an OpenAI /v1/completions or /v1/chat/completions body means, parsed once at the
// edge (generate's JSONL lines, the C++ API, the server) and handed to the engine as is. No third-party
// types: the validated chat conversation (src/chat/chat_types.h) is held behind a pointer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dsinfer/sampling_params.h"

namespace dsinfer {

namespace chat {
struct Conversation;
}

enum class Endpoint { kCompletions, kChatCompletions };

// "/v1/completions" / "/v1/chat/completions"; false for any other URL.
bool endpoint_from_url(std::string_view url, Endpoint* out);

struct Request {
  Endpoint endpoint = Endpoint::kCompletions;
  // Completions: a text prompt (tokenized by the engine) or token ids.
  bool prompt_is_ids = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  // Chat: the validated conversation (messages, tools, thinking options, response format).
  std::shared_ptr<const chat::Conversation> conversation;
  SamplingParams sampling;
  bool return_token_ids = false;
  // "stream": true (the server answers with server-sent events); stream_options.include_usage.
  bool stream = false;
  bool include_usage = false;
  std::string model;  // "model" as given ("" when absent); the server checks it names the served model
};

// A conversation of one user message (thinking and tools at their defaults), e.g. for `generate --chat`.
std::shared_ptr<const chat::Conversation> user_message_conversation(const std::string& content);

// Parses and validates an OpenAI request body (JSON text) for `endpoint`. On failure returns false and sets
// *error to a message naming the field and value. Object key order is kept (tool schemas render as given).
bool parse_request(std::string_view body_json, Endpoint endpoint, Request* out, std::string* error);

}  // namespace dsinfer
