// Pre-tokenizer: the HF `Split` regex sequence (PCRE2 + JIT) that cuts text into words before BPE. Patterns are
// rewritten so PCRE2 (Unicode 14 tables) matches what HF's Oniguruma (Unicode 16) matches; see regex_rewrite.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace dsinfer::tokenizer {

// Rewrites an Oniguruma-flavoured HF pattern for PCRE2: \p{L|M|N|P|S} gain the Unicode 15-16 code points that
// PCRE2 10.42 lacks, \s / \S become Oniguruma's White_Space set. Other syntax is passed through.
std::string rewrite_pattern_for_pcre2(std::string_view pattern);

// A piece of the input: [begin, end) byte offsets.
using Span = std::pair<uint32_t, uint32_t>;

class RegexSplit;

class Pretokenizer {
 public:
  // Builds from the tokenizer.json "pre_tokenizer" value. Supported: null, ByteLevel (use_regex true/false,
  // add_prefix_space false), Split (Regex or String pattern; behaviours Isolated / Removed; invert), and
  // Sequence of those. Anything else is an error naming the unsupported field.
  static Result<Pretokenizer> from_json(const nlohmann::json& j);

  Pretokenizer();
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;
  ~Pretokenizer();

  // Splits text[begin, end) and appends the pieces (absolute offsets) to `out`. `text` must be valid UTF-8.
  // Not thread-safe (reuses match buffers); the Tokenizer serialises calls.
  Status split(std::string_view text, Span range, std::vector<Span>& out);

 private:
  std::vector<std::unique_ptr<RegexSplit>> splits_;
  std::vector<Span> scratch_;
};

}  // namespace dsinfer::tokenizer
