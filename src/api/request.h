// Request parsing shared by the public API's entry points (request.cpp, batch.cpp): an already-parsed
// body (ordered JSON: key order is kept) -> dsinfer::Request.
#pragma once
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "dsinfer/request.h"

namespace dsinfer::api {

// endpoint absent: chat when the body has "messages", else completions.
Status parse_request_body(const nlohmann::ordered_json& body, std::optional<Endpoint> endpoint, Request& out);
Status parse_request_text(std::string_view body_json, std::optional<Endpoint> endpoint, Request& out);

}  // namespace dsinfer::api
