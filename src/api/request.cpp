// OpenAI request body -> dsinfer::Request (include/dsinfer/request.h): the one place where request JSON is
// parsed. ordered_json keeps the key order of tool and schema objects.
#include "api/request.h"

#include <limits>

#include "chat/chat_request.h"
#include "chat/chat_types.h"
#include "sampling/sampling_params.h"

namespace dsinfer {

namespace {

using ojson = nlohmann::ordered_json;

Status parse_prompt(const ojson& body, Request& r) {
  if (!body.contains("prompt")) return Status::error("a /v1/completions body needs 'prompt'");
  const ojson& pr = body["prompt"];
  if (pr.is_string()) {
    r.prompt_text = pr.get<std::string>();
    return Status::ok();
  }
  if (!pr.is_array()) return Status::errorf("'prompt' must be a string or an array of token ids, found {}", pr.type_name());
  r.prompt_is_ids = true;
  for (size_t i = 0; i < pr.size(); ++i) {
    if (!pr[i].is_number_integer())
      return Status::errorf("'prompt'[{}] must be a token id (integer), found {}", i, pr[i].type_name());
    const int64_t id = pr[i].get<int64_t>();
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      return Status::errorf("'prompt'[{}] = {} is not a valid token id", i, id);
    r.prompt_ids.push_back(int32_t(id));
  }
  return Status::ok();
}

// "model", "stream", "stream_options": read by the server, ignored by the engine.
Status parse_edge_fields(const ojson& body, Request& r) {
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return Status::errorf("'model' must be a string, found {}", body["model"].type_name());
    r.model = body["model"].get<std::string>();
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return Status::errorf("'stream' must be true or false, found {}", body["stream"].dump());
    r.stream = body["stream"].get<bool>();
  }
  if (!body.contains("stream_options") || body["stream_options"].is_null()) return Status::ok();
  const ojson& so = body["stream_options"];
  if (!so.is_object()) return Status::errorf("'stream_options' must be an object, found {}", so.type_name());
  if (!r.stream) return Status::error("'stream_options' is only allowed when 'stream' is true");
  if (so.contains("include_usage") && !so["include_usage"].is_null()) {
    if (!so["include_usage"].is_boolean())
      return Status::errorf("'stream_options.include_usage' must be true or false, found {}", so["include_usage"].dump());
    r.include_usage = so["include_usage"].get<bool>();
  }
  return Status::ok();
}

Status parse_body_fields(const ojson& body, std::optional<Endpoint> endpoint_opt, Request& r) {
  if (!body.is_object()) return Status::errorf("request body must be a JSON object, found {}", body.type_name());
  // Without an endpoint (the C++ API's JSON convenience), chat when the body has "messages".
  const Endpoint endpoint = endpoint_opt ? *endpoint_opt : body.contains("messages") ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  r.endpoint = endpoint;
  if (endpoint == Endpoint::kChatCompletions) {
    if (!body.contains("messages")) return Status::error("a /v1/chat/completions body needs 'messages'");
    DSI_ASSIGN_OR_RETURN(chat::Conversation conv, chat::parse_chat_request(body));
    r.conversation = std::make_shared<const chat::Conversation>(std::move(conv));
  } else {
    if (body.contains("messages")) return Status::error("'messages' belongs to /v1/chat/completions, not /v1/completions");
    DSI_RETURN_IF_ERROR(parse_prompt(body, r));
  }
  DSI_ASSIGN_OR_RETURN(r.sampling, sampling::parse_sampling_params(body));
  if (body.contains("return_token_ids") && !body["return_token_ids"].is_null()) {
    if (!body["return_token_ids"].is_boolean()) return Status::error("'return_token_ids' must be true or false");
    r.return_token_ids = body["return_token_ids"].get<bool>();
  }
  return parse_edge_fields(body, r);
}

}  // namespace

namespace api {

Status parse_request_body(const ojson& body, std::optional<Endpoint> endpoint, Request& r) {
  // The field readers check types before reading; should one be missed, a request is still never a crash.
  try {
    return parse_body_fields(body, endpoint, r);
  } catch (const std::exception& e) {
    return Status::errorf("request body has a field of an unexpected type: {}", e.what());
  }
}

Status check_json_depth(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return Status::errorf("JSON nested deeper than {} levels", kMaxJsonDepth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::ok();
}

Status parse_request_text(std::string_view body_json, std::optional<Endpoint> endpoint, Request& r) {
  DSI_RETURN_IF_ERROR(check_json_depth(body_json).with_context("request body"));
  ojson body;
  try {
    body = ojson::parse(body_json);
  } catch (const std::exception& e) {
    return Status::errorf("request body is not valid JSON: {}", e.what());
  }
  return parse_request_body(body, endpoint, r);
}

}  // namespace api

std::shared_ptr<const chat::Conversation> user_message_conversation(const std::string& content) {
  chat::Conversation c;
  chat::ChatMessage m;
  m.role = chat::Role::kUser;
  m.content = content;
  c.messages.push_back(std::move(m));
  return std::make_shared<const chat::Conversation>(std::move(c));
}

bool endpoint_from_url(std::string_view url, Endpoint* out) {
  if (url == "/v1/completions") *out = Endpoint::kCompletions;
  else if (url == "/v1/chat/completions") *out = Endpoint::kChatCompletions;
  else return false;
  return true;
}

bool parse_request(std::string_view body_json, Endpoint endpoint, Request* out, std::string* error) {
  Request r;
  if (Status s = api::parse_request_text(body_json, endpoint, r); !s) {
    if (error) *error = s.message();
    return false;
  }
  *out = std::move(r);
  return true;
}

}  // namespace dsinfer
