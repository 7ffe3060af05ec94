// StreamFormatter (include/dsinfer/engine.h): OpenAI streaming chunks. Field for field the deltas of the
// non-streaming response built by openai_format.cpp, so that a client concatenating them gets that response.
#include <ctime>

#include "api/engine_impl.h"
#include "api/openai_format.h"

namespace dsinfer {

using nlohmann::json;

struct StreamFormatter::Impl {
  const tokenizer::Tokenizer* tok = nullptr;
  std::string id, model;
  int64_t created = 0;
  bool chat = false, include_usage = false, return_token_ids = false;
  int32_t n = 1;
  std::vector<size_t> text_offset;  // completions logprobs: bytes of token text so far, per choice

  std::string wrap(json choices) const {
    json j = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
              {"model", model}, {"choices", std::move(choices)}};
    if (include_usage) j["usage"] = nullptr;  // as OpenAI: every chunk but the last has "usage": null
    return api::dump_json(j);
  }
};

StreamFormatter::StreamFormatter(const Engine& engine, const Request& request, uint64_t request_id)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.tok = engine.impl_->e->tokenizer();
  m.chat = request.endpoint == Endpoint::kChatCompletions;
  m.id = (m.chat ? "chatcmpl-" : "cmpl-") + std::to_string(request_id);
  m.model = engine.impl_->model_name;
  m.created = int64_t(std::time(nullptr));
  m.include_usage = request.include_usage;
  // Without a tokenizer token ids are the only output (as in the non-streaming response).
  m.return_token_ids = request.return_token_ids || !m.tok;
  m.n = request.sampling.n;
  m.text_offset.assign(size_t(std::max(1, m.n)), 0);
}

StreamFormatter::~StreamFormatter() = default;

const std::string& StreamFormatter::response_id() const { return impl_->id; }

std::vector<std::string> StreamFormatter::start() const {
  std::vector<std::string> out;
  if (!impl_->chat) return out;
  for (int32_t i = 0; i < impl_->n; ++i)
    out.push_back(impl_->wrap(json::array({{{"index", i},
                                            {"delta", {{"role", "assistant"}, {"content", ""}}},
                                            {"logprobs", nullptr},
                                            {"finish_reason", nullptr}}})));
  return out;
}

std::string StreamFormatter::chunk(const TokenEvent& ev) {
  Impl& m = *impl_;
  if (!ev.finished && ev.text.empty() && ev.reasoning.empty() && ev.tool_calls.empty() && ev.logprobs.empty() &&
      !(m.return_token_ids && !ev.token_ids.empty()))
    return "";
  json choice = {{"index", ev.index}};
  if (m.chat) {
    json delta = json::object();
    if (!ev.reasoning.empty()) delta["reasoning_content"] = ev.reasoning;
    if (!ev.text.empty()) delta["content"] = ev.text;
    if (!ev.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCallDelta& d : ev.tool_calls) {
        json c = {{"index", d.index}};
        if (!d.name.empty()) {
          c["id"] = d.id;
          c["type"] = "function";
          c["function"] = {{"name", d.name}, {"arguments", d.arguments}};
        } else {
          c["function"] = {{"arguments", d.arguments}};
        }
        calls.push_back(std::move(c));
      }
      delta["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(delta);
    choice["logprobs"] = ev.logprobs.empty() ? json(nullptr) : api::chat_logprobs(ev.logprobs, m.tok);
  } else {
    choice["text"] = ev.text;
    const size_t k = std::min(size_t(std::max(0, ev.index)), m.text_offset.size() - 1);
    choice["logprobs"] = ev.logprobs.empty() ? json(nullptr) : api::completion_logprobs(ev.logprobs, m.tok, &m.text_offset[k]);
  }
  choice["finish_reason"] = ev.finished ? json(ev.finish_reason) : json(nullptr);
  if (m.return_token_ids) choice["token_ids"] = ev.token_ids;
  if (!ev.parse_error.empty()) choice["parse_error"] = ev.parse_error;  // as in the non-streaming choice
  return m.wrap(json::array({std::move(choice)}));
}

std::string StreamFormatter::usage_chunk(const RequestResult& r) const {
  if (!impl_->include_usage) return "";
  json j = {{"id", impl_->id},
            {"object", impl_->chat ? "chat.completion.chunk" : "text_completion"},
            {"created", impl_->created},
            {"model", impl_->model},
            {"choices", json::array()},
            {"usage",
             {{"prompt_tokens", r.prompt_tokens},
              {"completion_tokens", r.completion_tokens},
              {"total_tokens", r.prompt_tokens + r.completion_tokens}}}};
  return api::dump_json(j);
}

}  // namespace dsinfer
