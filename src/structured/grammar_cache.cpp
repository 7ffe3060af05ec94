// GrammarCache (see grammar_cache.h): one xgrammar GrammarCompiler per tokenizer, our own LRU on top (the
// compiler's internal cache is off so memory has one bound: the entry count here).
#include "structured/grammar_cache.h"

#include <exception>

#include <xgrammar/xgrammar.h>

namespace dsinfer::structured {

namespace {

constexpr const char* kDsmlMarker = "｜DSML｜";

// EBNF string literal for one choice (quote, backslash and control bytes escaped).
std::string ebnf_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      out += fmt::format("\\x{:02x}", unsigned(c));
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

std::string choice_grammar(const std::vector<std::string>& choices) {
  std::string g = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) g += (i ? " | " : "") + ebnf_literal(choices[i]);
  return g;
}

// xgrammar's messages can be long and multi-line, and start with "[time] file:line: "; keep the first line's
// text, capped.
std::string short_message(const char* what) {
  std::string m = what ? what : "unknown error";
  if (size_t nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  if (!m.empty() && m[0] == '[') {
    const size_t close = m.find("] ");
    const size_t colon = close == std::string::npos ? close : m.find(": ", close);
    if (colon != std::string::npos) m.erase(0, colon + 2);
  }
  if (m.size() > 400) m = m.substr(0, 400) + "...";
  return m;
}

const char* kind_name(StructuredOutput::Kind k) {
  switch (k) {
    case StructuredOutput::Kind::kJsonObject: return "json_object";
    case StructuredOutput::Kind::kJsonSchema: return "json schema";
    case StructuredOutput::Kind::kRegex: return "regex";
    case StructuredOutput::Kind::kChoice: return "choice";
    case StructuredOutput::Kind::kGrammar: return "grammar";
    case StructuredOutput::Kind::kStructuralTag: return "structural tag";
    case StructuredOutput::Kind::kToolCalls: return "tool-call constraint";
    case StructuredOutput::Kind::kNone: break;
  }
  return "none";
}

}  // namespace

std::vector<std::string> grammar_vocabulary(const tokenizer::Tokenizer& tok, int64_t model_vocab) {
  std::vector<std::string> vocab(size_t(std::max<int64_t>(model_vocab, int64_t(tok.vocab_size()))));
  for (size_t id = 0; id < tok.vocab_size(); ++id) vocab[id] = std::string(tok.token_bytes(int32_t(id)));
  for (const tokenizer::AddedToken& a : tok.added_tokens())
    if (size_t(a.id) < vocab.size() && a.content != kDsmlMarker) vocab[size_t(a.id)].clear();
  return vocab;
}

GrammarCache::~GrammarCache() = default;

Result<std::unique_ptr<GrammarCache>> GrammarCache::create(const tokenizer::Tokenizer& tok, int64_t model_vocab,
                                                           int32_t eos_token_id, size_t capacity) {
  if (model_vocab < int64_t(tok.vocab_size()))
    return Status::errorf("structured outputs: the model's vocab_size {} is below the tokenizer's {} ids", model_vocab,
                          tok.vocab_size());
  if (eos_token_id < 0 || eos_token_id >= model_vocab)
    return Status::errorf("structured outputs: eos_token_id {} is outside the vocabulary [0, {})", eos_token_id, model_vocab);
  std::unique_ptr<GrammarCache> c(new GrammarCache());
  c->vocab_ = model_vocab;
  c->eos_ = eos_token_id;
  c->capacity_ = std::max<size_t>(capacity, 1);
  try {
    c->info_ = std::make_unique<xgrammar::TokenizerInfo>(grammar_vocabulary(tok, model_vocab), xgrammar::VocabType::RAW,
                                                         int(model_vocab), std::vector<int32_t>{eos_token_id});
    c->compiler_ = std::make_unique<xgrammar::GrammarCompiler>(*c->info_, /*max_threads=*/8, /*cache_enabled=*/false);
  } catch (const std::exception& e) {
    return Status::errorf("structured outputs: cannot build xgrammar's tokenizer info: {}", short_message(e.what()));
  }
  return c;
}

Result<std::shared_ptr<const xgrammar::CompiledGrammar>> GrammarCache::get(const StructuredOutput& so) {
  std::string key = fmt::format("{}|{}|", int(so.kind), so.any_whitespace ? 1 : 0);
  key += so.spec;
  for (const std::string& c : so.choices) key += '\0' + c;
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    ++hits_;
    return lru_.front().second;
  }
  DSI_ASSIGN_OR_RETURN(std::shared_ptr<const xgrammar::CompiledGrammar> g, compile(so));
  ++compiles_;
  lru_.emplace_front(key, g);
  index_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return g;
}

Result<std::shared_ptr<const xgrammar::CompiledGrammar>> GrammarCache::compile(const StructuredOutput& so) {
  using Kind = StructuredOutput::Kind;
  const std::optional<int> ws = so.any_whitespace ? std::optional<int>(kMaxJsonWhitespace) : std::nullopt;
  try {
    switch (so.kind) {
      case Kind::kJsonObject:
        // Any object: strict_mode off, else xgrammar would forbid properties the schema does not list (all).
        return std::make_shared<const xgrammar::CompiledGrammar>(compiler_->CompileJSONSchema(
            R"({"type": "object"})", so.any_whitespace, std::nullopt, std::nullopt, /*strict_mode=*/false, ws));
      case Kind::kJsonSchema:
        return std::make_shared<const xgrammar::CompiledGrammar>(compiler_->CompileJSONSchema(
            so.spec, so.any_whitespace, std::nullopt, std::nullopt, /*strict_mode=*/true, ws));
      case Kind::kRegex:
        return std::make_shared<const xgrammar::CompiledGrammar>(compiler_->CompileRegex(so.spec));
      case Kind::kChoice:
        if (so.choices.empty()) return Status::errorf("{}: the choice list is empty", so.field);
        return std::make_shared<const xgrammar::CompiledGrammar>(compiler_->CompileGrammar(choice_grammar(so.choices)));
      case Kind::kGrammar:
        // vLLM's rule: EBNF (GBNF style, root rule "root") when it has "::=", else Lark (root rule "start").
        if (so.spec.find("::=") != std::string::npos)
          return std::make_shared<const xgrammar::CompiledGrammar>(compiler_->CompileGrammar(so.spec, "root"));
        return std::make_shared<const xgrammar::CompiledGrammar>(compiler_->CompileLark(so.spec));
      case Kind::kStructuralTag:
        return std::make_shared<const xgrammar::CompiledGrammar>(compiler_->CompileStructuralTag(so.spec));
      case Kind::kToolCalls:  // resolved to a structural tag by the engine (structured::resolve_tool_calls)
        return Status::errorf("{}: tool-call constraint not resolved for a model family", so.field);
      case Kind::kNone:
        break;
    }
  } catch (const std::exception& e) {
    return Status::errorf("{}: invalid {} (xgrammar: {})", so.field, kind_name(so.kind), short_message(e.what()));
  }
  return Status::errorf("{}: no structured-output constraint to compile", so.field);
}

}  // namespace dsinfer::structured
