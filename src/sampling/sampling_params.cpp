// Validation (vLLM ranges) and OpenAI-body parsing for SamplingParams. Errors name the field and the value.
#include "sampling/sampling_params.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

namespace dsinfer::sampling {

// OpenAI caps n at 128; each sample holds a sequence's state, so an uncapped n exhausts memory.
constexpr int32_t kMaxN = 128;
// logit_bias entries per request (README "Limits"): every sampled row applies each one, on the host and the device.
constexpr size_t kMaxLogitBiasEntries = 4096;

using json = nlohmann::ordered_json;

Status validate(const SamplingParams& p, int64_t vocab_size) {
  auto finite = [](double x) { return std::isfinite(x); };
  if (p.n < 1) return Status::field_errorf("n", "n must be at least 1, got {}", p.n);
  if (p.n > kMaxN) return Status::field_errorf("n", "n must be at most {}, got {}", kMaxN, p.n);
  if (!finite(p.temperature) || p.temperature < 0.0)
    return Status::field_errorf("temperature", "temperature must be a finite number >= 0, got {}", p.temperature);
  if (!finite(p.top_p) || p.top_p <= 0.0 || p.top_p > 1.0)
    return Status::field_errorf("top_p", "top_p must be in (0, 1], got {}", p.top_p);
  if (p.top_k < -1)
    return Status::field_errorf("top_k", "top_k must be -1 or 0 (disabled) or at least 1, got {}", p.top_k);
  if (!finite(p.min_p) || p.min_p < 0.0 || p.min_p > 1.0)
    return Status::field_errorf("min_p", "min_p must be in [0, 1], got {}", p.min_p);
  if (!finite(p.presence_penalty) || p.presence_penalty < -2.0 || p.presence_penalty > 2.0)
    return Status::field_errorf("presence_penalty", "presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  if (!finite(p.frequency_penalty) || p.frequency_penalty < -2.0 || p.frequency_penalty > 2.0)
    return Status::field_errorf("frequency_penalty", "frequency_penalty must be in [-2, 2], got {}",
                                p.frequency_penalty);
  if (!finite(p.repetition_penalty) || p.repetition_penalty <= 0.0)
    return Status::field_errorf("repetition_penalty", "repetition_penalty must be > 0, got {}", p.repetition_penalty);
  for (const auto& [tok, bias] : p.logit_bias) {
    if (tok < 0 || (vocab_size > 0 && tok >= vocab_size))
      return Status::field_errorf("logit_bias", "logit_bias token id {} is outside the vocabulary [0, {})", tok,
                                  vocab_size);
    if (!finite(bias) || bias < -100.0 || bias > 100.0)
      return Status::field_errorf("logit_bias", "logit_bias[{}] must be in [-100, 100], got {}", tok, bias);
  }
  if (p.max_tokens && *p.max_tokens < 1)
    return Status::field_errorf("max_tokens", "max_tokens must be at least 1, got {}", *p.max_tokens);
  if (p.min_tokens < 0) return Status::field_errorf("min_tokens", "min_tokens must be >= 0, got {}", p.min_tokens);
  if (p.max_tokens && p.min_tokens > *p.max_tokens)
    return Status::field_errorf("min_tokens", "min_tokens ({}) must be <= max_tokens ({})", p.min_tokens,
                                *p.max_tokens);
  for (size_t i = 0; i < p.stop.size(); ++i)
    if (p.stop[i].empty()) return Status::field_errorf("stop", "stop[{}] is an empty string", i);
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    int32_t t = p.stop_token_ids[i];
    if (t < 0 || (vocab_size > 0 && t >= vocab_size))
      return Status::field_errorf("stop_token_ids", "stop_token_ids[{}] = {} is outside the vocabulary [0, {})", i, t,
                                  vocab_size);
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs)
    return Status::field_errorf("top_logprobs", "top_logprobs must be in [0, {}], got {}", kMaxTopLogprobs,
                                p.top_logprobs);
  if (p.top_logprobs > 0 && !p.logprobs)
    return Status::field_errorf("top_logprobs", "top_logprobs = {} needs logprobs = true", p.top_logprobs);
  return Status::ok();
}

namespace {

// Field readers: null means "not given" (OpenAI clients send explicit nulls); anything else must match.
const char* type_name(const json& v) { return v.type_name(); }

Status read_number(const json& body, const char* key, double& out) {
  if (!body.contains(key) || body[key].is_null()) return Status::ok();
  const json& v = body[key];
  if (!v.is_number())
    return Status::field_errorf(key, "'{}' must be a number, found {} {}", key, type_name(v), v.dump());
  out = v.get<double>();
  return Status::ok();
}

Status read_int(const json& body, const char* key, std::optional<int64_t>& out) {
  if (!body.contains(key) || body[key].is_null()) return Status::ok();
  const json& v = body[key];
  // Above 2^63 - 1 (nlohmann keeps it unsigned): say so with the number as sent, never its wrapped int64.
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    return Status::field_errorf(key, "'{}' = {} is out of range (at most {})", key, v.dump(),
                                std::numeric_limits<int64_t>::max());
  if (v.is_number_integer()) {
    out = v.get<int64_t>();
    return Status::ok();
  }
  // 16.0 is accepted as 16 (some clients serialise every number as a float); 16.5 is not.
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9.0e15) {
      out = int64_t(d);
      return Status::ok();
    }
  }
  return Status::field_errorf(key, "'{}' must be an integer, found {} {}", key, type_name(v), v.dump());
}

Status read_bool(const json& body, const char* key, bool& out) {
  if (!body.contains(key) || body[key].is_null()) return Status::ok();
  const json& v = body[key];
  if (!v.is_boolean())
    return Status::field_errorf(key, "'{}' must be true or false, found {} {}", key, type_name(v), v.dump());
  out = v.get<bool>();
  return Status::ok();
}

Status read_int32(const json& body, const char* key, int32_t& out) {
  std::optional<int64_t> v;
  DSI_RETURN_IF_ERROR(read_int(body, key, v));
  if (v) {
    if (*v < std::numeric_limits<int32_t>::min() || *v > std::numeric_limits<int32_t>::max())
      return Status::field_errorf(key, "'{}' = {} is out of range [{}, {}]", key, *v,
                                  std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    out = int32_t(*v);
  }
  return Status::ok();
}

}  // namespace

Result<SamplingParams> parse_sampling_params(const json& body) {
  if (!body.is_object()) return Status::errorf("request body must be a JSON object, found {}", body.type_name());
  SamplingParams p;
  DSI_RETURN_IF_ERROR(read_number(body, "temperature", p.temperature));
  DSI_RETURN_IF_ERROR(read_number(body, "top_p", p.top_p));
  DSI_RETURN_IF_ERROR(read_int32(body, "top_k", p.top_k));
  DSI_RETURN_IF_ERROR(read_number(body, "min_p", p.min_p));
  DSI_RETURN_IF_ERROR(read_number(body, "presence_penalty", p.presence_penalty));
  DSI_RETURN_IF_ERROR(read_number(body, "frequency_penalty", p.frequency_penalty));
  DSI_RETURN_IF_ERROR(read_number(body, "repetition_penalty", p.repetition_penalty));
  DSI_RETURN_IF_ERROR(read_bool(body, "ignore_eos", p.ignore_eos));
  DSI_RETURN_IF_ERROR(read_int32(body, "n", p.n));

  std::optional<int64_t> seed;
  if (body.contains("seed") && body["seed"].is_number_unsigned())
    p.seed = body["seed"].get<uint64_t>();  // up to 2^64-1
  else
    DSI_RETURN_IF_ERROR(read_int(body, "seed", seed));
  if (seed) p.seed = uint64_t(*seed);  // negative seeds are valid keys too; only the bits matter

  std::optional<int64_t> max_tokens, max_completion_tokens, min_tokens;
  DSI_RETURN_IF_ERROR(read_int(body, "max_tokens", max_tokens));
  DSI_RETURN_IF_ERROR(read_int(body, "max_completion_tokens", max_completion_tokens));
  if (max_tokens && max_completion_tokens && *max_tokens != *max_completion_tokens)
    return Status::field_errorf("max_tokens", "max_tokens ({}) and max_completion_tokens ({}) disagree", *max_tokens,
                                *max_completion_tokens);
  p.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  DSI_RETURN_IF_ERROR(read_int(body, "min_tokens", min_tokens));
  if (min_tokens) p.min_tokens = *min_tokens;

  // logprobs: bool (chat API, with top_logprobs) or integer N (completions API = chosen + N alternatives).
  if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    const json& v = body["logprobs"];
    if (v.is_boolean()) {
      p.logprobs = v.get<bool>();
    } else if (v.is_number_integer()) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() > uint64_t(kMaxTopLogprobs))
        return Status::field_errorf("logprobs", "logprobs must be in [0, {}], got {}", kMaxTopLogprobs, v.dump());
      const int64_t k = v.get<int64_t>();
      p.logprobs = true;
      p.top_logprobs = int32_t(k);
    } else {
      return Status::field_errorf("logprobs", "'logprobs' must be a boolean or an integer, found {} {}", v.type_name(),
                                  v.dump());
    }
  }
  if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    DSI_RETURN_IF_ERROR(read_int32(body, "top_logprobs", p.top_logprobs));
  }

  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& v = body["stop"];
    if (v.is_string()) {
      p.stop.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string())
          return Status::field_errorf("stop", "'stop[{}]' must be a string, found {} {}", i, v[i].type_name(),
                                      v[i].dump());
        p.stop.push_back(v[i].get<std::string>());
      }
    } else {
      return Status::field_errorf("stop", "'stop' must be a string or a list of strings, found {} {}", v.type_name(),
                                  v.dump());
    }
  }
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null()) {
    const json& v = body["stop_token_ids"];
    if (!v.is_array())
      return Status::field_errorf("stop_token_ids", "'stop_token_ids' must be a list of integers, found {}", v.dump());
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer())
        return Status::field_errorf("stop_token_ids", "'stop_token_ids[{}]' must be an integer, found {}", i,
                                    v[i].dump());
      if (!v[i].is_number_unsigned() || v[i].get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()))
        return Status::field_errorf("stop_token_ids", "'stop_token_ids[{}]' = {} is not a valid token id", i,
                                    v[i].dump());
      const int64_t t = v[i].get<int64_t>();
      p.stop_token_ids.push_back(int32_t(t));
    }
  }
  // logit_bias: OpenAI sends {"token id as string": bias}; integer-valued keys only.
  if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
    const json& v = body["logit_bias"];
    if (!v.is_object())
      return Status::field_errorf("logit_bias", "'logit_bias' must be an object {{token id: bias}}, found {}",
                                  v.dump().substr(0, 200));
    if (v.size() > kMaxLogitBiasEntries)
      return Status::field_errorf("logit_bias", "'logit_bias' has {} entries; the limit is {}", v.size(),
                                  kMaxLogitBiasEntries);
    for (const auto& [key, bias] : v.items()) {
      char* end = nullptr;
      long long tok = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || tok < 0 || tok > std::numeric_limits<int32_t>::max())
        return Status::field_errorf("logit_bias", "'logit_bias' key '{}' is not a token id", key);
      if (!bias.is_number())
        return Status::field_errorf("logit_bias", "'logit_bias[{}]' must be a number, found {} {}", key,
                                    bias.type_name(), bias.dump());
      p.logit_bias[int32_t(tok)] = bias.get<double>();
    }
  }
  DSI_RETURN_IF_ERROR(validate(p));
  return p;
}

}  // namespace dsinfer::sampling
