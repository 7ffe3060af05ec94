// The engine flags shared by the commands that build an Engine (`generate`, `serve`): one parser, one help text,
// and the range-checked number parsers every command uses for its own flags.
#pragma once
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "dsinfer/engine.h"

namespace dsinfer::cli {

// One process per rank (dsinfer::process_rank): false on a rank > 0, whose stdout then goes to /dev/null (rank 0
// alone writes the command's results). Invalid variables are left to the engine, which refuses them by name.
bool writes_results();

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
// The same into an integer field of another type (the range [lo, hi] must fit it).
template <typename Int>
  requires std::is_integral_v<Int>
bool parse_int_flag(const char* cmd, const std::string& flag, const std::string& v, long long lo, long long hi,
                    Int* out) {
  long long n = 0;
  if (!parse_int_flag(cmd, flag, v, lo, hi, &n)) return false;
  *out = static_cast<Int>(n);
  return true;
}

// A comma-separated list of integers, each in [lo, hi], at least one; false (with the reason printed) otherwise.
template <typename Int>
  requires std::is_integral_v<Int>
bool parse_int_list_flag(const char* cmd, const std::string& flag, const std::string& v, long long lo, long long hi,
                         std::vector<Int>* out) {
  out->clear();
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) {
    long long n = 0;
    if (!parse_int_flag(cmd, flag, item, lo, hi, &n)) return false;
    out->push_back(static_cast<Int>(n));
  }
  if (out->empty()) return parse_int_flag(cmd, flag, v, lo, hi, &out->emplace_back());  // prints the reason
  return true;
}

// The argument loop of a command whose flags take a value ("--flag value"), but for its switches: --help / -h
// prints `usage` to stdout and returns 0; an argument `on_switch` (optional) accepts is a switch without a value; a
// flag without a value, or one `on_flag` answers kNotEngineFlag for (unknown), prints the reason and `usage` to
// stderr and returns 2, as does kError (on_flag printed the reason); -1 when all were read.
int parse_value_flags(const char* cmd, const char* usage, int argc, char** argv,
                      const std::function<FlagParse(const std::string& flag, const std::string& value)>& on_flag,
                      const std::function<bool(const std::string& flag)>& on_switch = {});

}  // namespace dsinfer::cli
