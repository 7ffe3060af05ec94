// OpenAI Batch API lines (include/dsinfer/batch.h).
#include "dsinfer/batch.h"

#include <nlohmann/json.hpp>

#include "api/request.h"
#include "core/status.h"
#include "io/json_parse.h"

namespace dsinfer {

namespace {

using ojson = nlohmann::ordered_json;

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson custom_id_json(const std::string& id) { return id.empty() ? ojson(nullptr) : ojson(id); }

}  // namespace

bool parse_batch_line(std::string_view line, size_t n, BatchLine* out, std::string* error) {
  auto fail = [&](const std::string& m) {
    if (error) *error = fmt::format("line {}: {}", n, m);
    return false;
  };
  Result<ojson> parsed = io::parse_json(line, "line");  // linear time in the number of keys
  if (!parsed) {
    std::string m = parsed.status().message();  // "line is not valid JSON: ..." or "line: JSON nested deeper ..."
    if (m.rfind("line is ", 0) == 0) m.erase(0, 8);
    return fail(m);
  }
  const ojson j = std::move(parsed).value();
  if (!j.is_object()) return fail("must be a JSON object");
  if (j.contains("custom_id") && j["custom_id"].is_string()) out->custom_id = j["custom_id"].get<std::string>();
  if (!j.contains("custom_id") || !j["custom_id"].is_string() || out->custom_id.empty())
    return fail("'custom_id' must be a non-empty string");
  if (j.contains("method") && j["method"] != "POST") return fail("'method' must be \"POST\", found " + dump(j["method"]));
  if (!j.contains("body") || !j["body"].is_object()) return fail("'body' must be a JSON object");
  const ojson& body = j["body"];
  Endpoint ep = body.contains("messages") ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  if (j.contains("url")) {
    const ojson& url = j["url"];
    if (!url.is_string() || !endpoint_from_url(url.get<std::string>(), &ep))
      return fail("unsupported url " + dump(url) + " (expected /v1/chat/completions or /v1/completions)");
  }
  if (body.contains("stream") && body["stream"].is_boolean() && body["stream"].get<bool>())
    return fail("'stream' is not supported in batch mode");
  if (Status s = api::parse_request_body(body, ep, out->request); !s) return fail(s.message());
  return true;
}

std::string batch_success_line(size_t n, const std::string& custom_id, const RequestResult& r) {
  // The response body is already JSON text: spliced in, not parsed again.
  return fmt::format(R"({{"id":"batch_req_{}","custom_id":{},"response":{{"status_code":200,"request_id":{},"body":{}}},"error":null}})",
                     n, dump(custom_id_json(custom_id)), dump(ojson(r.response_id)), r.response_json);
}

std::string batch_error_line(size_t n, const std::string& custom_id, const std::string& code, const std::string& message) {
  return dump({{"id", "batch_req_" + std::to_string(n)},
               {"custom_id", custom_id_json(custom_id)},
               {"response", nullptr},
               {"error", {{"code", code}, {"message", message}}}});
}

}  // namespace dsinfer
