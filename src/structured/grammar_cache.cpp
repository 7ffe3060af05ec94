// GrammarCache (see grammar_cache.h): one xgrammar GrammarCompiler per tokenizer, our own LRU on top (the
// compiler's internal cache is off so memory has one bound: the entry count and bytes here).
#include "structured/grammar_cache.h"

#include "structured/bitmask_row.h"

#include <xgrammar/xgrammar.h>

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>

namespace dsinfer::structured {

namespace {

constexpr const char* kDsmlMarker = "｜DSML｜";

std::mutex g_hook_mu;
std::function<void(const StructuredOutput&)> g_compile_hook;  // set_compile_hook_for_testing

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
                                                           int32_t eos_token_id, size_t capacity,
                                                           size_t capacity_bytes) {
  if (model_vocab < int64_t(tok.vocab_size()))
    return Status::errorf("structured outputs: the model's vocab_size {} is below the tokenizer's {} ids", model_vocab,
                          tok.vocab_size());
  if (eos_token_id < 0 || eos_token_id >= model_vocab)
    return Status::errorf("structured outputs: eos_token_id {} is outside the vocabulary [0, {})", eos_token_id, model_vocab);
  std::unique_ptr<GrammarCache> c(new GrammarCache());
  c->vocab_ = model_vocab;
  c->eos_ = eos_token_id;
  c->capacity_ = std::max<size_t>(capacity, 1);
  c->capacity_bytes_ = capacity_bytes;
  try {
    c->info_ = std::make_unique<xgrammar::TokenizerInfo>(grammar_vocabulary(tok, model_vocab), xgrammar::VocabType::RAW,
                                                         int(model_vocab), std::vector<int32_t>{eos_token_id});
    c->compiler_ = std::make_unique<xgrammar::GrammarCompiler>(*c->info_, /*max_threads=*/8, /*cache_enabled=*/false);
  } catch (const std::exception& e) {
    return Status::errorf("structured outputs: cannot build xgrammar's tokenizer info: {}", short_message(e.what()));
  }
  return c;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lru_.size();
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  GrammarCacheStats s = stats_;
  s.entries = int64_t(lru_.size());
  return s;
}

Result<std::shared_ptr<const xgrammar::CompiledGrammar>> GrammarCache::get(const StructuredOutput& so) {
  size_t source = so.spec.size();
  for (const std::string& c : so.choices) source += c.size() + 1;
  if (source > kMaxGrammarSourceBytes)
    return Status::errorf("{}: the {} is {} bytes; the limit is {} bytes", so.field, kind_name(so.kind), source,
                          kMaxGrammarSourceBytes);
  std::string key = fmt::format("{}|{}|{}|", int(so.kind), so.any_whitespace ? 1 : 0, so.bounded_numbers ? 1 : 0);
  key += so.spec;
  for (const std::string& c : so.choices) key += '\0' + c;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return lru_.front().grammar;
    }
  }
  // Compiled outside the lock: other threads' requests (and cache hits) do not wait for this one.
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::shared_ptr<const xgrammar::CompiledGrammar>> compiled = compile(so);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.compiles;
  stats_.compile_seconds += seconds;
  if (!compiled) return compiled.status();
  std::shared_ptr<const xgrammar::CompiledGrammar> g = *compiled;
  if (index_.count(key)) return g;  // compiled by another thread meanwhile
  const size_t bytes = g->MemorySizeBytes() + key.size();
  lru_.push_front(Entry{key, g, bytes});
  index_[key] = lru_.begin();
  stats_.bytes += bytes;
  while (lru_.size() > 1 && (lru_.size() > capacity_ || stats_.bytes > capacity_bytes_)) {
    stats_.bytes -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return g;
}

Status GrammarCache::check_admits_output(const xgrammar::CompiledGrammar& g, const StructuredOutput& so) const {
  xgrammar::GrammarMatcher m(g);
  std::vector<int32_t> row(size_t((vocab_ + 31) / 32), 0);
  int64_t shape[1];
  DLTensor t = bitmask_row_tensor(row, shape);
  m.FillNextTokenBitmask(&t);
  for (int32_t w : row)
    if (w != 0) return Status::ok();
  return Status::errorf(
      "{}: the {} admits no output (no token can start a match, and it does not match the "
      "empty string)",
      so.field, kind_name(so.kind));
}

namespace {

using ojson = nlohmann::ordered_json;

// |x| < 10^15: 15 integer digits, and 6 fraction digits for numbers (xgrammar's range precision).
constexpr int64_t kNumberBound = 999'999'999'999'999;

bool is_numeric_type(const ojson& t) {
  if (t.is_string()) return t == "integer" || t == "number";
  if (t.is_array())
    for (const ojson& x : t)
      if (x == "integer" || x == "number") return true;
  return false;
}

// Gives every integer / number schema without a lower (upper) bound the bound -kNumberBound (kNumberBound), so a
// number literal has at most 15 integer digits. Values (const, enum, default, examples) are left alone.
void bound_numbers(ojson& s) {
  if (s.is_array()) {
    for (ojson& x : s) bound_numbers(x);
    return;
  }
  if (!s.is_object()) return;
  if (s.contains("type") && is_numeric_type(s["type"])) {
    if (!s.contains("minimum") && !s.contains("exclusiveMinimum")) s["minimum"] = -kNumberBound;
    if (!s.contains("maximum") && !s.contains("exclusiveMaximum")) s["maximum"] = kNumberBound;
  }
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (k == "const" || k == "enum" || k == "default" || k == "examples") continue;
    bound_numbers(it.value());
  }
}

// Any JSON object, its values any JSON with bounded numbers (json_object with bounded numbers).
const char* kBoundedAnyObject = R"({"type": "object", "additionalProperties": {"$ref": "#/$defs/any"},
  "$defs": {"any": {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "integer"}, {"type": "number"},
    {"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/any"}},
    {"type": "object", "additionalProperties": {"$ref": "#/$defs/any"}}]}}})";

}  // namespace

void set_compile_hook_for_testing(std::function<void(const StructuredOutput&)> hook) {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  g_compile_hook = std::move(hook);
}

Result<std::shared_ptr<const xgrammar::CompiledGrammar>> GrammarCache::compile(const StructuredOutput& so) {
  using Kind = StructuredOutput::Kind;
  std::function<void(const StructuredOutput&)> hook;
  {
    std::lock_guard<std::mutex> lock(g_hook_mu);
    hook = g_compile_hook;
  }
  if (hook) hook(so);
  const std::optional<int> ws = so.any_whitespace ? std::optional<int>(kMaxJsonWhitespace) : std::nullopt;
  std::optional<xgrammar::CompiledGrammar> g;
  try {
    switch (so.kind) {
      case Kind::kJsonObject:
      case Kind::kJsonSchema: {
        // json_object: any object; strict_mode off without number bounds, else xgrammar would forbid properties
        // the schema does not list (all). With bounds, the object's values are spelled out (kBoundedAnyObject).
        const bool any_object = so.kind == Kind::kJsonObject;
        std::string schema = any_object ? R"({"type": "object"})" : so.spec;
        if (so.bounded_numbers) {
          ojson j = ojson::parse(any_object ? std::string(kBoundedAnyObject) : so.spec);
          bound_numbers(j);
          schema = j.dump();
        }
        const bool strict = !any_object || so.bounded_numbers;
        g = compiler_->CompileJSONSchema(schema, so.any_whitespace, std::nullopt, std::nullopt, strict, ws);
        break;
      }
      case Kind::kRegex:
        g = compiler_->CompileRegex(so.spec);
        break;
      case Kind::kChoice:
        if (so.choices.empty()) return Status::errorf("{}: the choice list is empty", so.field);
        g = compiler_->CompileGrammar(choice_grammar(so.choices));
        break;
      case Kind::kGrammar:
        // vLLM's rule: EBNF (GBNF style, root rule "root") when it has "::=", else Lark (root rule "start").
        if (so.spec.find("::=") != std::string::npos)
          g = compiler_->CompileGrammar(so.spec, "root");
        else
          g = compiler_->CompileLark(so.spec);
        break;
      case Kind::kStructuralTag:
        g = compiler_->CompileStructuralTag(so.spec);
        break;
      case Kind::kToolCalls:  // resolved to a structural tag by the engine (structured::resolve_tool_calls)
        return Status::errorf("{}: tool-call constraint not resolved for a model family", so.field);
      case Kind::kNone:
        return Status::errorf("{}: no structured-output constraint to compile", so.field);
    }
  } catch (const std::exception& e) {
    return Status::errorf("{}: invalid {} (xgrammar: {})", so.field, kind_name(so.kind), short_message(e.what()));
  }
  DSI_RETURN_IF_ERROR(check_admits_output(*g, so));
  return std::make_shared<const xgrammar::CompiledGrammar>(std::move(*g));
}

}  // namespace dsinfer::structured
