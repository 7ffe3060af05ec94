// Unicode 16.0 vs 14.0 category deltas (see tools/tokenizer/gen_unicode_delta.py): lets PCRE2 10.42 classes
// match what Oniguruma (Unicode 16.0, used by HF tokenizers) matches for \p{L}, \p{M}, \p{N}, \p{P}, \p{S}.
#pragma once
#include <string_view>

namespace dsinfer::tokenizer {

// PCRE2 class items (e.g. "\x{1E030}-\x{1E06D}") to add to \p{category}; empty for other categories.
std::string_view unicode16_delta(char category);

}  // namespace dsinfer::tokenizer
