// Where DeepSeek-V4.1's Engram tables live (--engram-placement; model/engram_rows.h has the three placements and
// how a step gets its rows from each). A light header for the runner options.
#pragma once
#include <string>

#include "core/status.h"
#include "io/config.h"

namespace dsinfer::model {

enum class EngramPlacement { kDevice, kSharded, kHost };
// "device" | "sharded" | "host"; anything else is an error listing the three.
Result<EngramPlacement> parse_engram_placement(const std::string& name);
const char* engram_placement_name(EngramPlacement p);
// A placement other than kDevice needs a model with Engram tables: an error naming the option otherwise.
Status check_engram_placement(const io::ModelConfig& cfg, EngramPlacement p, const std::string& model_dir);

}  // namespace dsinfer::model
