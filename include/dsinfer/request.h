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

// Structured outputs: a constraint on the generated text, enforced token by token (src/structured, xgrammar):
// tokens that cannot continue a valid output are masked before sampling, and the output ends (finish "stop",
// through EOS) once it is complete. In chat thinking mode it applies to the answer after </think>.
struct StructuredOutput {
  enum class Kind {
    kNone,
    kJsonObject,     // any JSON object
    kJsonSchema,     // spec: a JSON Schema (JSON text)
    kRegex,          // spec: a regular expression the whole output matches
    kChoice,         // choices: the output is exactly one of them
    kGrammar,        // spec: an EBNF grammar (root rule "root", when it has "::=") or a Lark grammar ("start")
    kStructuralTag,  // spec: an xgrammar structural tag (JSON text)
    kToolCalls,      // strict forced tool calls; spec: {"tools": [{"name", "parameters"}], "single_call": bool}
                     // (model-independent; the engine builds the model family's DSML structural tag from it)
  };
  Kind kind = Kind::kNone;
  std::string spec;
  std::vector<std::string> choices;
  bool any_whitespace = true;  // JSON: any whitespace between tokens (at most 6 in a row; false: compact only)
  // JSON: integers and numbers without a bound get |x| < 10^15 (6 fraction digits), so a literal cannot run
  // on to max_tokens (README "Structured outputs"; structured_outputs.disable_number_bounds turns it off).
  bool bounded_numbers = true;
  std::string field;           // the request field it came from, named in errors (e.g. "response_format")
  bool active() const { return kind != Kind::kNone; }
};

// vLLM's prefill/decode round trip, as vllm-router's --vllm-pd-disaggregation drives it (docs/fleet.md): the router
// sends a prefill worker {do_remote_decode: true}, then gives the decode worker the prefill answer's params, which
// name where the state waits. Read by `dsinfer serve --role prefill|decode`; other servers ignore it.
struct KvTransferParams {
  bool do_remote_decode = false;
  bool do_remote_prefill = false;
  std::string remote_engine_id, remote_host, remote_request_id;
  int32_t remote_port = 0;
  double prefill_s = -1, export_s = -1;  // a dsinfer prefill worker's own times (the P/D bench's TTFT split)
};

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
  StructuredOutput structured;  // response_format / structured_outputs / guided_* / strict forced tool calls
  // "stream": true (the server answers with server-sent events); stream_options.include_usage.
  bool stream = false;
  bool include_usage = false;
  bool has_kv_transfer = false;  // "kv_transfer_params" given as an object
  KvTransferParams kv_transfer;
  std::string model;  // "model" as given ("" when absent); the server checks it names the served model
};

// A conversation of one user message (thinking and tools at their defaults), e.g. for `generate --chat`.
std::shared_ptr<const chat::Conversation> user_message_conversation(const std::string& content);

// Parses and validates an OpenAI request body (JSON text) for `endpoint`. On failure returns false and sets
// *error to a message naming the field and value, and *error_param (when given) to the top-level field the error
// is about ("max_tokens", "messages"; "" when none: OpenAI's "param"). Object key order is kept (tool schemas
// render as given).
bool parse_request(std::string_view body_json, Endpoint endpoint, Request* out, std::string* error,
                   std::string* error_param = nullptr);

}  // namespace dsinfer
