// GrammarCache: structured-output specs (dsinfer::StructuredOutput) -> xgrammar compiled grammars for one
// tokenizer, each compiled once and kept in a small LRU cache (key: kind + spec + options). Compilation errors
// (bad schema, unsupported feature, bad regex / grammar) come back as a Status naming the request field.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
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
// disable_any_whitespace); 16 still fits a newline plus the indentation of 3-level, 4-space pretty printing.
inline constexpr int kMaxJsonWhitespace = 16;

class GrammarCache {
 public:
  // model_vocab: the logits width (>= the tokenizer's vocabulary); eos: the token that ends a complete output.
  static Result<std::unique_ptr<GrammarCache>> create(const tokenizer::Tokenizer& tok, int64_t model_vocab,
                                                      int32_t eos_token_id, size_t capacity = 256);
  ~GrammarCache();

  // The compiled grammar of `so` (compiled now, or found in the cache).
  Result<std::shared_ptr<const xgrammar::CompiledGrammar>> get(const StructuredOutput& so);

  const xgrammar::TokenizerInfo& tokenizer_info() const { return *info_; }
  int64_t vocab_size() const { return vocab_; }
  int32_t eos_token_id() const { return eos_; }
  size_t size() const { return lru_.size(); }
  int64_t compiles() const { return compiles_; }  // cache misses so far
  int64_t hits() const { return hits_; }

 private:
  GrammarCache() = default;
  Result<std::shared_ptr<const xgrammar::CompiledGrammar>> compile(const StructuredOutput& so);

  int64_t vocab_ = 0;
  int32_t eos_ = -1;
  size_t capacity_ = 0;
  std::unique_ptr<xgrammar::TokenizerInfo> info_;
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
  using Entry = std::pair<std::string, std::shared_ptr<const xgrammar::CompiledGrammar>>;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int64_t compiles_ = 0, hits_ = 0;
};

}  // namespace dsinfer::structured
