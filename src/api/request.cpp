// OpenAI request body -> dsinfer::Request (include/dsinfer/request.h): the one place where request JSON is
// parsed. ordered_json keeps the key order of tool and schema objects.
#include "api/request.h"

#include <limits>

#include "chat/chat_request.h"
#include "chat/chat_types.h"
#include "io/json_limits.h"
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

// Fields of the OpenAI APIs that dsinfer does not implement: an explicit non-default value is an error rather
// than silently ignored. ("model" and "user" are accepted and ignored: an engine serves one model.)
Status check_unsupported_fields(const ojson& body, Endpoint endpoint) {
  auto given = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (given("stream") && !body["stream"].is_boolean())
    return Status::errorf("'stream' must be true or false, found {}", body["stream"].type_name());
  if (endpoint == Endpoint::kCompletions) {
    if (given("echo") && body["echo"] != false) return Status::error("'echo' is not supported (only false)");
    if (given("suffix") && body["suffix"] != "") return Status::error("'suffix' is not supported");
    if (given("best_of") && body["best_of"] != 1) return Status::error("'best_of' is not supported (use 'n')");
    if (given("response_format"))
      return Status::error("'response_format' belongs to /v1/chat/completions, not /v1/completions");
  }
  return Status::ok();
}

}  // namespace

namespace api {

namespace {

Status parse_body(const ojson& body, std::optional<Endpoint> endpoint_opt, Request& r) {
  if (!body.is_object()) return Status::errorf("request body must be a JSON object, found {}", body.type_name());
  // Without an endpoint (the C++ API's JSON convenience), chat when the body has "messages".
  const Endpoint endpoint = endpoint_opt ? *endpoint_opt : body.contains("messages") ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  r.endpoint = endpoint;
  DSI_RETURN_IF_ERROR(check_unsupported_fields(body, endpoint));
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
  return Status::ok();
}

}  // namespace

Status parse_request_body(const ojson& body, std::optional<Endpoint> endpoint, Request& r) {
  // Every field is type-checked before it is read; this only keeps a missed check (a json::value() or get<>()
  // on a field of another type) a request error instead of an exception through the caller.
  try {
    return parse_body(body, endpoint, r);
  } catch (const nlohmann::json::exception& e) {
#ifdef DSINFER_FUZZING
    throw;  // the fuzz targets report a missed check as a crash
#endif
    return Status::errorf("malformed request body: {}", e.what());
  }
}

Status parse_request_text(std::string_view body_json, std::optional<Endpoint> endpoint, Request& r) {
  DSI_RETURN_IF_ERROR(io::check_json_depth(body_json, "request body"));
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
