// OpenAI request body -> dsinfer::Request (include/dsinfer/request.h): the one place where request JSON is
// parsed. ordered_json keeps the key order of tool and schema objects.
#include "api/request.h"

#include <cmath>
#include <limits>

#include "chat/chat_options.h"
#include "chat/chat_request.h"
#include "chat/chat_types.h"
#include "io/json_parse.h"
#include "sampling/sampling_params.h"
#include "structured/tool_call_tag.h"

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
    if (!pr[i].is_number_unsigned() || pr[i].get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()))
      return Status::errorf("'prompt'[{}] = {} is not a valid token id", i, pr[i].dump());
    r.prompt_ids.push_back(int32_t(pr[i].get<int64_t>()));
  }
  return Status::ok();
}

// ---- structured outputs: response_format, structured_outputs, guided_*, strict forced tool calls ----

using Kind = StructuredOutput::Kind;

bool present(const ojson& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

// A JSON Schema given as an object / boolean, or (guided_json, structured_outputs.json) as JSON text.
// JSON Schema counts a number with a zero fractional part as an integer (draft 2020-12 §4.2.1), so
// "maxLength": 1e2 is valid; xgrammar wants integer JSON there. Integral floats become integers.
void integral_floats_to_integers(ojson& j) {
  if (j.is_number_float()) {
    const double d = j.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.0e15) j = int64_t(d);
  } else if (j.is_structured()) {
    for (auto& x : j) integral_floats_to_integers(x);
  }
}

Status schema_text(const ojson& v, const std::string& field, std::string& out) {
  ojson schema = v;
  if (v.is_string()) {
    Result<ojson> parsed = io::parse_json(v.get<std::string>(), "'" + field + "'");
    if (!parsed) return Status::errorf("'{}' is a string but not valid JSON ({})", field, parsed.status().message());
    schema = std::move(parsed).value();
  }
  if (!schema.is_object() && !schema.is_boolean())
    return Status::errorf("'{}' must be a JSON Schema (an object), found {}", field, schema.type_name());
  integral_floats_to_integers(schema);
  out = schema.dump();
  return Status::ok();
}

// One vLLM constraint (structured_outputs.<key> / guided_<key>) -> so.
Status parse_constraint(const std::string& key, const ojson& v, const std::string& field, StructuredOutput& so) {
  so.field = field;
  if (key == "json") {
    so.kind = Kind::kJsonSchema;
    return schema_text(v, field, so.spec);
  }
  if (key == "regex" || key == "grammar") {
    if (!v.is_string() || v.get<std::string>().empty())
      return Status::errorf("'{}' must be a non-empty string, found {}", field, v.dump().substr(0, 200));
    so.kind = key == "regex" ? Kind::kRegex : Kind::kGrammar;
    so.spec = v.get<std::string>();
    return Status::ok();
  }
  if (key == "choice") {
    if (!v.is_array() || v.empty()) return Status::errorf("'{}' must be a non-empty array of strings", field);
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) return Status::errorf("'{}'[{}] must be a string, found {}", field, i, v[i].type_name());
      so.choices.push_back(v[i].get<std::string>());
    }
    so.kind = Kind::kChoice;
    return Status::ok();
  }
  if (key == "json_object") {
    if (!v.is_boolean()) return Status::errorf("'{}' must be true or false", field);
    so.kind = v.get<bool>() ? Kind::kJsonObject : Kind::kNone;
    return Status::ok();
  }
  if (key == "structural_tag") {
    ojson tag = v;
    if (v.is_string()) {
      Result<ojson> parsed = io::parse_json(v.get<std::string>(), "'" + field + "'");
      if (!parsed) return parsed.status();
      tag = std::move(parsed).value();
    }
    if (!tag.is_object() || !tag.contains("format"))
      return Status::errorf("'{}' must be a structural tag object {{\"type\": \"structural_tag\", \"format\": ...}}", field);
    so.kind = Kind::kStructuralTag;
    so.spec = tag.dump();
    return Status::ok();
  }
  return Status::errorf("'{}' is not a supported structured-output constraint", field);
}

// response_format (read by the chat layer's parser, for chat and completions alike) -> a structured output.
Status parse_response_format(const ojson& rf, StructuredOutput& so) {
  DSI_ASSIGN_OR_RETURN(const chat::ResponseFormatSpec f, chat::parse_response_format(rf));
  so.field = "response_format";
  switch (f.format) {
    case chat::ResponseFormat::kText:
      return Status::ok();
    case chat::ResponseFormat::kJsonObject:
      so.kind = Kind::kJsonObject;
      return Status::ok();
    case chat::ResponseFormat::kJsonSchema:
      so.kind = Kind::kJsonSchema;
      so.field = "response_format.json_schema.schema";
      return schema_text(f.schema, so.field, so.spec);
    case chat::ResponseFormat::kRegex:
      if (f.regex.empty()) return Status::error("response_format regex: the \"regex\" string is empty");
      so.kind = Kind::kRegex;
      so.field = "response_format.regex";
      so.spec = f.regex;
      return Status::ok();
  }
  return Status::ok();
}

Status parse_structured_outputs(const ojson& so_body, StructuredOutput& so) {
  if (!so_body.is_object()) return Status::errorf("'structured_outputs' must be an object, found {}", so_body.type_name());
  std::string chosen;
  for (auto it = so_body.begin(); it != so_body.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    const std::string field = "structured_outputs." + k;
    if (v.is_null()) continue;
    if (k == "disable_any_whitespace" || k == "disable_fallback" || k == "disable_additional_properties" ||
        k == "disable_number_bounds") {
      if (!v.is_boolean()) return Status::errorf("'{}' must be true or false", field);
      if (k == "disable_any_whitespace") so.any_whitespace = !v.get<bool>();
      if (k == "disable_number_bounds") so.bounded_numbers = !v.get<bool>();
      continue;
    }
    if (k == "whitespace_pattern") return Status::errorf("'{}' is not supported (xgrammar has no whitespace pattern)", field);
    if (k == "json" || k == "regex" || k == "choice" || k == "grammar" || k == "json_object" || k == "structural_tag") {
      if (!chosen.empty()) return Status::errorf("'structured_outputs' sets both {} and {}; give one constraint", chosen, k);
      chosen = k;
      DSI_RETURN_IF_ERROR(parse_constraint(k, v, field, so));
      continue;
    }
    return Status::errorf("'{}' is not a known structured_outputs field", field);
  }
  if (chosen.empty()) return Status::error("'structured_outputs' needs one of json, regex, choice, grammar, json_object, structural_tag");
  return Status::ok();
}

// Strict forced tool calls: tool_choice "required" / a named function, and every tool it may call has
// function.strict == true. The grammar holds the arguments to the schema as the client wrote it: the chat layer
// renders a normalised strict schema, which drops keywords such as maxLength that the output must still obey.
Status parse_strict_tools(const ojson& body, const chat::Conversation& conv, StructuredOutput& so) {
  if (conv.tool_choice != chat::ToolChoice::kRequired && conv.tool_choice != chat::ToolChoice::kNamed) return Status::ok();
  std::vector<structured::ToolSchema> tools;
  for (const chat::ToolDefinition& d : conv.tools) {  // the tools the call may name (validated by the chat layer)
    if (!d.strict) return Status::ok();
    for (const ojson& t : body["tools"]) {
      const ojson& f = t["function"];
      if (f["name"] != d.name) continue;
      tools.push_back({d.name, present(f, "parameters") ? f["parameters"] : d.parameters});
    }
  }
  if (tools.empty()) return Status::ok();
  if (so.active())
    return Status::errorf("strict tool calls (tool_choice with strict tools) cannot be combined with '{}'", so.field);
  so.kind = Kind::kToolCalls;
  so.field = "tools";
  so.spec = structured::tool_calls_spec(tools, conv.tool_choice == chat::ToolChoice::kNamed);
  return Status::ok();
}

Status parse_structured(const ojson& body, Request& r) {
  StructuredOutput so;
  std::string source;
  auto claim = [&](const std::string& field) -> Status {
    if (!source.empty())
      return Status::field_errorf(field,
                                  "'{}' and '{}' both constrain the output; give only one of "
                                  "response_format, structured_outputs and guided_*",
                                  source, field);
    source = field;
    return Status::ok();
  };
  if (present(body, "response_format")) {
    DSI_RETURN_IF_ERROR(parse_response_format(body["response_format"], so).with_field("response_format"));
    if (so.active()) DSI_RETURN_IF_ERROR(claim("response_format"));
  }
  if (present(body, "structured_outputs")) {
    DSI_RETURN_IF_ERROR(claim("structured_outputs"));
    DSI_RETURN_IF_ERROR(parse_structured_outputs(body["structured_outputs"], so).with_field("structured_outputs"));
  }
  for (const char* key : {"json", "regex", "choice", "grammar"}) {
    const std::string field = std::string("guided_") + key;
    if (!present(body, field.c_str())) continue;
    DSI_RETURN_IF_ERROR(claim(field));
    DSI_RETURN_IF_ERROR(parse_constraint(key, body[field], field, so).with_field(field));
  }
  if (present(body, "guided_whitespace_pattern"))
    return Status::field_error("guided_whitespace_pattern",
                               "'guided_whitespace_pattern' is not supported (xgrammar has no whitespace pattern)");
  if (r.conversation) DSI_RETURN_IF_ERROR(parse_strict_tools(body, *r.conversation, so).with_field("tools"));
  r.structured = std::move(so);
  return Status::ok();
}


// "kv_transfer_params" (vLLM's P/D round trip): the fields dsinfer uses are type-checked; the others (other
// connectors' remote_block_ids, tp_size, ...) are ignored; null or absent: none.
Status parse_kv_transfer(const ojson& body, Request& r) {
  if (!body.contains("kv_transfer_params") || body["kv_transfer_params"].is_null()) return Status::ok();
  const ojson& p = body["kv_transfer_params"];
  const char* f = "kv_transfer_params";
  if (!p.is_object()) return Status::field_errorf(f, "'kv_transfer_params' must be an object, found {}", p.type_name());
  auto given = [&](const char* k) { return p.contains(k) && !p[k].is_null(); };
  KvTransferParams& k = r.kv_transfer;
  for (const auto& [key, flag] : {std::pair{"do_remote_decode", &k.do_remote_decode}, {"do_remote_prefill", &k.do_remote_prefill}}) {
    if (!given(key)) continue;
    if (!p[key].is_boolean()) return Status::field_errorf(f, "'kv_transfer_params.{}' must be true or false", key);
    *flag = p[key].get<bool>();
  }
  for (const auto& [key, str] : {std::pair{"remote_engine_id", &k.remote_engine_id}, {"remote_host", &k.remote_host},
                                 {"remote_request_id", &k.remote_request_id}}) {
    if (!given(key)) continue;
    if (!p[key].is_string()) return Status::field_errorf(f, "'kv_transfer_params.{}' must be a string", key);
    *str = p[key].get<std::string>();
  }
  for (const auto& [key, num] : {std::pair{"prefill_s", &k.prefill_s}, {"export_s", &k.export_s}})
    if (given(key) && p[key].is_number()) *num = p[key].get<double>();
  if (given("remote_port")) {
    const ojson& port = p["remote_port"];
    if (!port.is_number_integer() || port.get<int64_t>() < 1 || port.get<int64_t>() > 65535)
      return Status::field_errorf(f, "'kv_transfer_params.remote_port' must be a port number, found {}", port.dump());
    k.remote_port = int32_t(port.get<int64_t>());
  }
  r.has_kv_transfer = true;
  return Status::ok();
}

// "model", "stream", "stream_options", "kv_transfer_params": read by the server, ignored by the engine.
Status parse_edge_fields(const ojson& body, Request& r) {
  DSI_RETURN_IF_ERROR(parse_kv_transfer(body, r));
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string())
      return Status::field_errorf("model", "'model' must be a string, found {}", body["model"].type_name());
    r.model = body["model"].get<std::string>();
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean())
      return Status::field_errorf("stream", "'stream' must be true or false, found {}", body["stream"].dump());
    r.stream = body["stream"].get<bool>();
  }
  if (!body.contains("stream_options") || body["stream_options"].is_null()) return Status::ok();
  const ojson& so = body["stream_options"];
  if (!so.is_object())
    return Status::field_errorf("stream_options", "'stream_options' must be an object, found {}", so.type_name());
  if (!r.stream) return Status::field_error("stream_options", "'stream_options' is only allowed when 'stream' is true");
  if (so.contains("include_usage") && !so["include_usage"].is_null()) {
    if (!so["include_usage"].is_boolean())
      return Status::field_errorf("stream_options", "'stream_options.include_usage' must be true or false, found {}",
                                  so["include_usage"].dump());
    r.include_usage = so["include_usage"].get<bool>();
  }
  return Status::ok();
}

// Fields of the OpenAI APIs that dsinfer does not implement: an explicit non-default value is an error rather
// than silently ignored. ("model" and "user" are accepted: an engine serves one model.)
Status check_unsupported_fields(const ojson& body, Endpoint endpoint) {
  auto given = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (endpoint == Endpoint::kCompletions) {
    if (given("echo") && body["echo"] != false)
      return Status::field_error("echo", "'echo' is not supported (only false)");
    if (given("suffix") && body["suffix"] != "") return Status::field_error("suffix", "'suffix' is not supported");
    if (given("best_of") && body["best_of"] != 1)
      return Status::field_error("best_of", "'best_of' is not supported (use 'n')");
  }
  return Status::ok();
}

Status parse_body_fields(const ojson& body, std::optional<Endpoint> endpoint_opt, Request& r) {
  if (!body.is_object()) return Status::errorf("request body must be a JSON object, found {}", body.type_name());
  // Without an endpoint (the C++ API's JSON convenience), chat when the body has "messages".
  const Endpoint endpoint = endpoint_opt ? *endpoint_opt : body.contains("messages") ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  r.endpoint = endpoint;
  DSI_RETURN_IF_ERROR(check_unsupported_fields(body, endpoint));
  if (endpoint == Endpoint::kChatCompletions) {
    if (!body.contains("messages"))
      return Status::field_error("messages", "a /v1/chat/completions body needs 'messages'");
    DSI_ASSIGN_OR_RETURN(chat::Conversation conv, chat::parse_chat_request(body));  // its errors name their fields
    r.conversation = std::make_shared<const chat::Conversation>(std::move(conv));
  } else {
    if (body.contains("messages"))
      return Status::field_error("messages", "'messages' belongs to /v1/chat/completions, not /v1/completions");
    DSI_RETURN_IF_ERROR(parse_prompt(body, r).with_field("prompt"));
  }
  DSI_ASSIGN_OR_RETURN(r.sampling, sampling::parse_sampling_params(body));
  DSI_RETURN_IF_ERROR(parse_structured(body, r));
  if (body.contains("return_token_ids") && !body["return_token_ids"].is_null()) {
    if (!body["return_token_ids"].is_boolean())
      return Status::field_error("return_token_ids", "'return_token_ids' must be true or false");
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
#ifdef DSINFER_FUZZING
    throw;  // the fuzz targets report a missed type check as a crash
#endif
    return Status::errorf("request body has a field of an unexpected type: {}", e.what());
  }
}

Status parse_request_text(std::string_view body_json, std::optional<Endpoint> endpoint, Request& r) {
  DSI_ASSIGN_OR_RETURN(const ojson body, io::parse_json(body_json, "request body"));  // linear in the keys
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

bool parse_request(std::string_view body_json, Endpoint endpoint, Request* out, std::string* error,
                   std::string* error_param) {
  Request r;
  if (Status s = api::parse_request_text(body_json, endpoint, r); !s) {
    if (error) *error = s.message();
    if (error_param) *error_param = s.field();
    return false;
  }
  *out = std::move(r);
  return true;
}

}  // namespace dsinfer
