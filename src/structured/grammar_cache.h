// GrammarCache: structured-output specs (dsinfer::StructuredOutput) -> xgrammar compiled grammars for one
// tokenizer, each compiled once and kept in an LRU cache bounded by entries and by bytes (key: kind + spec +
// options). Compilation errors (bad schema, unsupported feature, bad regex / grammar, a source over
// kMaxGrammarSourceBytes, a constraint that admits no output) come back as a Status naming the request field.
// get() may be called from several threads (a lock guards the LRU; compiles run outside it).
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "dsinfer/request.h"
#include "tokenizer/tokenizer.h"

namespace xgrammar {
class CompiledGrammar;
class GrammarCompiler;
class TokenizerInfo;
}  // namespace xgrammar

namespace dsinfer::structured {

// The vocabulary as xgrammar sees it (decoded byte strings, one per id in [0, model_vocab)): ordinary tokens
// are their bytes; added tokens are "" (a grammar can never produce them: control tokens, <think>, ...) except
// the DSML marker, which strict tool-call grammars spell; ids past the tokenizer are "" too.
std::vector<std::string> grammar_vocabulary(const tokenizer::Tokenizer& tok, int64_t model_vocab);

// Most whitespace characters in a row between JSON tokens when any whitespace is allowed. Unbounded
// whitespace lets a weak model loop on tabs / newlines until max_tokens (the failure vLLM answers with
// disable_any_whitespace). 16 was too many: the shipped model spent 16 one-space tokens on every gap of a
// two-point object and ran out of 256 tokens mid-object; 6 still fits a newline plus 2-space indentation two
// levels deep (deeper indentation is cut, the JSON stays valid).
inline constexpr int kMaxJsonWhitespace = 6;

// Largest constraint source (spec text plus choices) compiled; larger ones are rejected before compiling
// (a 1 MiB choice list took 39 s to compile). README "Limits".
inline constexpr size_t kMaxGrammarSourceBytes = 256u << 10;
// Memory the cached compiled grammars may hold together (xgrammar's MemorySizeBytes), besides the entry count.
inline constexpr size_t kGrammarCacheBytes = 256u << 20;

struct GrammarCacheStats {
  int64_t compiles = 0, hits = 0, entries = 0;
  size_t bytes = 0;
  double compile_seconds = 0;  // total wall time of the compiles
};

// Test-only: called with each constraint just before it compiles (on the compiling thread), so a test can hold a
// compile and watch what the engine does meanwhile. Empty function: none (the default).
void set_compile_hook_for_testing(std::function<void(const StructuredOutput&)> hook);

class GrammarCache {
 public:
  // model_vocab: the logits width (>= the tokenizer's vocabulary); eos: the token that ends a complete output.
  static Result<std::unique_ptr<GrammarCache>> create(const tokenizer::Tokenizer& tok, int64_t model_vocab,
                                                      int32_t eos_token_id, size_t capacity = 256,
                                                      size_t capacity_bytes = kGrammarCacheBytes);
  ~GrammarCache();

  // The compiled grammar of `so` (compiled now, or found in the cache).
  Result<std::shared_ptr<const xgrammar::CompiledGrammar>> get(const StructuredOutput& so);

  const xgrammar::TokenizerInfo& tokenizer_info() const { return *info_; }
  int64_t vocab_size() const { return vocab_; }
  int32_t eos_token_id() const { return eos_; }
  size_t size() const;
  int64_t compiles() const { return stats().compiles; }  // cache misses so far
  int64_t hits() const { return stats().hits; }
  GrammarCacheStats stats() const;

 private:
  GrammarCache() = default;
  Result<std::shared_ptr<const xgrammar::CompiledGrammar>> compile(const StructuredOutput& so);
  // Error when no token (not even a stop token) can start an output of g.
  Status check_admits_output(const xgrammar::CompiledGrammar& g, const StructuredOutput& so) const;

  int64_t vocab_ = 0;
  int32_t eos_ = -1;
  size_t capacity_ = 0, capacity_bytes_ = 0;
  std::unique_ptr<xgrammar::TokenizerInfo> info_;
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
  struct Entry {
    std::string key;
    std::shared_ptr<const xgrammar::CompiledGrammar> grammar;
    size_t bytes = 0;
  };
  mutable std::mutex mu_;  // guards lru_, index_ and stats_
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  GrammarCacheStats stats_;
};

}  // namespace dsinfer::structured
