// The engine flags shared by the commands that build an Engine (`generate`, `serve`): one parser, one help text,
// and the range-checked number parsers every command uses for its own flags.
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

// Numeric flag values: the whole value must parse and lie in [lo, hi]; no silent casts. false (with the reason
// printed as "<cmd>: <flag> expects ...") otherwise.
bool parse_int_flag(const char* cmd, const std::string& flag, const std::string& v, long long lo, long long hi,
                    long long* out);
bool parse_real_flag(const char* cmd, const std::string& flag, const std::string& v, double lo, double hi, double* out);

}  // namespace dsinfer::cli
