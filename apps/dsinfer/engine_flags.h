// The engine flags shared by the commands that build an Engine (`generate`, `serve`): one parser, one help text.
#pragma once
#include <string>

#include "dsinfer/engine.h"

namespace dsinfer::cli {

// Help lines for the engine flags (defaults from EngineOptions).
std::string engine_flags_help();

enum class FlagParse { kNotEngineFlag, kOk, kError };
// If argv[i] is an engine flag, reads it and its value into *eo (advancing i past the value) and returns kOk;
// kError (with the reason printed as "<cmd>: ...") on a missing or bad value; kNotEngineFlag otherwise.
FlagParse parse_engine_flag(const char* cmd, int argc, char** argv, int& i, EngineOptions& eo);

// Numeric flag values: false (with the reason printed) when v is not a number / not an integer.
bool parse_number_flag(const char* cmd, const std::string& flag, const std::string& v, double& out);
bool parse_int_flag(const char* cmd, const std::string& flag, const std::string& v, int64_t& out);

}  // namespace dsinfer::cli
