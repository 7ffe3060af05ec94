// Reading config.json (private to src/io/config*.cpp, DeepSeek-V4 and V4.1 alike): a Reader that records the
// first problem naming the key and the expected value, the RoPE block parser, and the keys and checks both
// versions share.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/config.h"

namespace dsinfer::io::detail {

// Upper bound of every size in config.json (DeepSeek-V4's largest is vocab_size 129280): keeps products such as
// vocab_size x hidden_size inside int64 and rejects corrupt values before the loader allocates from them.
inline constexpr int64_t kMaxDim = int64_t(1) << 24;
inline constexpr int64_t kMaxTokenId = INT32_MAX;
inline constexpr int64_t kMaxPositions = int64_t(1) << 31;

struct Reader {
  const nlohmann::json& j;
  std::string src;
  Status err;  // first error seen

  void fail(const std::string& msg) {
    if (err.is_ok()) err = Status::error(src + ": " + msg);
  }
  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  // Sizes are bounded (kMaxDim) so that products of two or three of them cannot overflow and a corrupt value is
  // an error here, before anything is allocated from it.
  int64_t integer(const char* k, std::optional<int64_t> def = std::nullopt, int64_t min = 0, int64_t max = kMaxDim) {
    if (!has(k)) {
      if (!def) fail(fmt::format("missing required key '{}'", k));
      return def.value_or(0);
    }
    return integer_value(j[k], k, min, max);
  }
  int64_t integer_value(const nlohmann::json& v, const std::string& k, int64_t min, int64_t max) {
    const bool integral_float = v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
                                std::fabs(v.get<double>()) < 9.0e18;
    if (!(v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : true)) &&
        !integral_float) {
      fail(fmt::format("'{}' must be an integer, found {}", k, v.dump()));
      return min;
    }
    int64_t x = v.is_number_integer() ? v.get<int64_t>() : int64_t(v.get<double>());
    if (x < min || x > max) {
      fail(fmt::format("'{}' must be in [{}, {}], found {}", k, min, max, x));
      return min;
    }
    return x;
  }
  double number(const char* k, std::optional<double> def = std::nullopt) {
    if (!has(k)) {
      if (!def) fail(fmt::format("missing required key '{}'", k));
      return def.value_or(0.0);
    }
    if (!j[k].is_number()) {
      fail(fmt::format("'{}' must be a number, found {}", k, j[k].dump()));
      return 0.0;
    }
    return j[k].get<double>();
  }
  // A number that must lie in (lo, hi] (lo_open) or [lo, hi]: eps, scales, factors. NaN and infinities fail.
  double number_in(const char* k, double def, double lo, double hi, bool lo_open) {
    const double x = number(k, def);
    if (has(k) && j[k].is_number() && (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)))
      fail(fmt::format("'{}' must be in {}{}, {}], found {}", k, lo_open ? "(" : "[", lo, hi, j[k].dump()));
    return x;
  }
  bool boolean(const char* k, bool def) {
    if (!has(k)) return def;
    if (!j[k].is_boolean()) {
      fail(fmt::format("'{}' must be true or false, found {}", k, j[k].dump()));
      return def;
    }
    return j[k].get<bool>();
  }
  std::string string(const char* k, std::string def) {
    if (!has(k)) return def;
    if (!j[k].is_string()) {
      fail(fmt::format("'{}' must be a string, found {}", k, j[k].dump()));
      return def;
    }
    return j[k].get<std::string>();
  }
  // A list of integers >= min (no upper bound: table sizes may exceed kMaxDim); nullopt when absent.
  std::optional<std::vector<int64_t>> ints(const char* k, int64_t min = 0) {
    if (!has(k)) return std::nullopt;
    std::vector<int64_t> out;
    if (!j[k].is_array()) {
      fail(fmt::format("'{}' must be a list of integers, found {}", k, j[k].dump()));
      return out;
    }
    for (size_t i = 0; i < j[k].size(); ++i) {
      const nlohmann::json& v = j[k][i];
      if (!v.is_number_integer() || v.get<int64_t>() < min) {
        fail(fmt::format("{}[{}] must be an integer >= {}, found {}", k, i, min, v.dump()));
        return out;
      }
      out.push_back(v.get<int64_t>());
    }
    return out;
  }
};

// One RoPE parameter block ({rope_type, rope_theta, factor, ...}); `where` names it in errors.
RopeParams parse_rope_block(Reader& r, const nlohmann::json& b, const std::string& where, double default_theta);

// Shapes, attention, indexer, routed MoE, token ids and context length: the keys both versions read alike.
void read_shared_fields(Reader& r, ModelConfig& c);

// The shape checks both versions share; needs_indexer: the model has layers with an indexer.
Status check_shared_shapes(const ModelConfig& c, const std::string& source, bool needs_indexer);

}  // namespace dsinfer::io::detail
