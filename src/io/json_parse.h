// The one parser of untrusted JSON text into an ordered_json (request bodies, batch lines, JSON held in strings:
// schemas, tool-call arguments). nlohmann's own parser inserts every key of an ordered_json object through a
// linear search of the keys before it, so an object of n keys costs n^2 / 2 string compares (200,000 keys: a
// minute of CPU). This one builds objects through its SAX interface with a hash index per large object: linear
// time, the same values, key order and duplicate-key rule (the last value wins, at the first key's position).
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/status.h"

namespace dsinfer::io {

// Checks the nesting depth (json_limits.h), then parses. Errors: "<what> is not valid JSON: <parser message>" or
// the depth error.
Result<nlohmann::ordered_json> parse_json(std::string_view text, std::string_view what);

}  // namespace dsinfer::io
