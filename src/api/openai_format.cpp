// OpenAI response formatting (see openai_format.h).
#include "api/openai_format.h"

namespace dsinfer::api {

using nlohmann::json;

namespace {

std::string token_text(const tokenizer::Tokenizer* tok, int32_t id) {
  if (!tok) return "token_id:" + std::to_string(id);
  return std::string(tok->token_bytes(id));
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// Token strings may hold partial UTF-8; the JSON carries them with replacement characters, and "bytes" holds
// the exact bytes (as OpenAI does).
std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

std::vector<TokenLogprob> public_logprobs(const std::vector<sampling::SampleResult>& lps) {
  std::vector<TokenLogprob> out;
  out.reserve(lps.size());
  for (const sampling::SampleResult& s : lps) {
    TokenLogprob lp{s.token, s.logprob, {}};
    for (const auto& a : s.top) lp.top.emplace_back(a.token, a.logprob);
    out.push_back(std::move(lp));
  }
  return out;
}

json chat_logprobs(const std::vector<TokenLogprob>& lps, const tokenizer::Tokenizer* tok) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = token_text(tok, lp.token);
    json top = json::array();
    for (const auto& [id, logprob] : lp.top) {
      const std::string at = token_text(tok, id);
      top.push_back({{"token", printable(at)}, {"logprob", logprob}, {"bytes", bytes_of(at)}});
    }
    content.push_back({{"token", printable(t)}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs(const std::vector<TokenLogprob>& lps, const tokenizer::Tokenizer* tok, size_t* text_offset) {
  json tokens = json::array(), values = json::array(), tops = json::array(), offs = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string t = printable(token_text(tok, lp.token));
    tokens.push_back(t);
    values.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [id, logprob] : lp.top) top[printable(token_text(tok, id))] = logprob;
    tops.push_back(top);
    offs.push_back(*text_offset);
    *text_offset += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offs}};
}

std::string response_id(const engine::RequestOutput& r) { return (r.chat ? "chatcmpl-" : "cmpl-") + std::to_string(r.id); }

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json response_body(const engine::RequestOutput& r, const std::string& model_name, const tokenizer::Tokenizer* tok,
                   int64_t created_unix) {
  json choices = json::array();
  for (const engine::Choice& c : r.choices) {
    json ch = {{"index", c.index}, {"finish_reason", c.finish_reason}};
    if (r.chat) {
      json msg = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) msg["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& t : c.tool_calls)
          calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        msg["tool_calls"] = calls;
      }
      ch["message"] = msg;
      ch["logprobs"] = c.logprobs.empty() ? json(nullptr) : chat_logprobs(public_logprobs(c.logprobs), tok);
    } else {
      ch["text"] = c.text;
      size_t offset = 0;
      ch["logprobs"] = c.logprobs.empty() ? json(nullptr) : completion_logprobs(public_logprobs(c.logprobs), tok, &offset);
    }
    if (r.return_token_ids) ch["token_ids"] = c.token_ids;
    if (!c.parse_error.empty()) ch["parse_error"] = c.parse_error;
    choices.push_back(ch);
  }
  return {{"id", response_id(r)},
          {"object", r.chat ? "chat.completion" : "text_completion"},
          {"created", created_unix},
          {"model", model_name},
          {"choices", choices},
          {"usage",
           {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens}}}};
}

}  // namespace dsinfer::api
