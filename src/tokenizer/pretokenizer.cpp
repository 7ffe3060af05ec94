// HF pre-tokenizer Split sequence on PCRE2 with JIT, and the Oniguruma -> PCRE2 pattern rewrite.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "tokenizer/unicode_delta.h"

namespace dsinfer::tokenizer {
namespace {

// Oniguruma's \s (Unicode White_Space), as PCRE2 class items.
constexpr std::string_view kWhiteSpaceItems =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// The GPT-2 pattern HF's ByteLevel pre-tokenizer uses when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string rewrite_pattern_for_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      if ((e == 'p' || e == 'P') && i + 2 < p.size()) {
        // \pX or \p{X}; only one-letter general categories get a delta.
        char cat = 0;
        size_t len = 0;
        if (p[i + 2] == '{' && i + 4 < p.size() && p[i + 4] == '}') {
          cat = p[i + 3];
          len = 5;
        } else if (p[i + 2] != '{') {
          cat = p[i + 2];
          len = 3;
        }
        std::string_view delta = cat ? unicode16_delta(cat) : std::string_view();
        if (!delta.empty() && (e == 'p' || !in_class)) {
          std::string items = std::string("\\p{") + cat + "}" + std::string(delta);
          if (in_class) out += items;
          else out += (e == 'p' ? "[" : "[^") + items + "]";
          i += len - 1;
          continue;
        }
      } else if (e == 's' || (e == 'S' && !in_class)) {
        if (in_class) out += kWhiteSpaceItems;
        else out += (e == 's' ? "[" : "[^") + std::string(kWhiteSpaceItems) + "]";
        ++i;
        continue;
      }
      out.push_back(c);
      out.push_back(e);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:name:]
      size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

// One compiled Split step.
class RegexSplit {
 public:
  enum class Behavior { kIsolated, kRemoved };
  static Result<std::unique_ptr<RegexSplit>> create(const std::string& pattern, Behavior b, bool invert) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    std::string rewritten = rewrite_pattern_for_pcre2(pattern);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                     PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return Status::errorf("pre_tokenizer regex {:?} does not compile (PCRE2 at offset {}): {}", pattern,
                            static_cast<size_t>(err_off), reinterpret_cast<const char*>(msg));
    }
    auto s = std::unique_ptr<RegexSplit>(new RegexSplit());
    s->code_ = code;
    s->behavior_ = b;
    s->invert_ = invert;
    s->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    s->md_ = pcre2_match_data_create_from_pattern(code, nullptr);
    s->mctx_ = pcre2_match_context_create(nullptr);
    if (s->jit_) {
      s->stack_ = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
      pcre2_jit_stack_assign(s->mctx_, nullptr, s->stack_);
    }
    if (!s->md_ || !s->mctx_) return Status::error("pre_tokenizer: out of memory creating PCRE2 match data");
    return s;
  }
  ~RegexSplit() {
    if (md_) pcre2_match_data_free(md_);
    if (mctx_) pcre2_match_context_free(mctx_);
    if (stack_) pcre2_jit_stack_free(stack_);
    if (code_) pcre2_code_free(code_);
  }

  // Splits piece `r` of `text`, appending the kept sub-pieces.
  Status apply(std::string_view text, Span r, std::vector<Span>& out) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + r.first);
    const size_t len = r.second - r.first;
    size_t pos = 0, prev = 0;
    while (pos < len) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, len, pos, PCRE2_NO_UTF_CHECK, md_, mctx_)
                    : pcre2_match(code_, subject, len, pos, PCRE2_NO_UTF_CHECK, md_, mctx_);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        return Status::errorf("pre_tokenizer regex match failed at byte {}: {}", r.first + pos,
                              reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_);
      size_t ms = ov[0], me = ov[1];
      if (me == ms) {  // empty match: no split; step over one code point
        pos = ms + 1;
        while (pos < len && (subject[pos] & 0xC0) == 0x80) ++pos;
        continue;
      }
      if (ms > prev) emit(r.first + prev, r.first + ms, false, out);
      emit(r.first + ms, r.first + me, true, out);
      prev = pos = me;
    }
    if (prev < len) emit(r.first + prev, r.second, false, out);
    return Status::ok();
  }

 private:
  RegexSplit() = default;
  void emit(size_t b, size_t e, bool is_match, std::vector<Span>& out) const {
    if (invert_) is_match = !is_match;
    if (behavior_ == Behavior::kRemoved && is_match) return;
    out.emplace_back(static_cast<uint32_t>(b), static_cast<uint32_t>(e));
  }

  pcre2_code* code_ = nullptr;
  pcre2_match_data* md_ = nullptr;
  pcre2_match_context* mctx_ = nullptr;
  pcre2_jit_stack* stack_ = nullptr;
  bool jit_ = false;
  bool invert_ = false;
  Behavior behavior_ = Behavior::kIsolated;
};

Pretokenizer::Pretokenizer() = default;
Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;
Pretokenizer::~Pretokenizer() = default;

static Status add_step(const nlohmann::json& j, std::vector<std::unique_ptr<RegexSplit>>& splits) {
  if (j.is_null()) return Status::ok();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return Status::error("pre_tokenizer: expected an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return Status::error("pre_tokenizer Sequence: missing array \"pretokenizers\"");
    for (const auto& s : j["pretokenizers"]) DSI_RETURN_IF_ERROR(add_step(s, splits));
    return Status::ok();
  }
  if (type == "ByteLevel") {
    // Byte-level mapping itself is folded into the BPE model (bytes -> initial symbols).
    if (j.value("add_prefix_space", false))
      return Status::error("pre_tokenizer ByteLevel: add_prefix_space=true is not supported");
    if (j.value("use_regex", true)) {
      DSI_ASSIGN_OR_RETURN(auto s, RegexSplit::create(std::string(kGpt2Pattern), RegexSplit::Behavior::kIsolated, false));
      splits.push_back(std::move(s));
    }
    return Status::ok();
  }
  if (type == "Split") {
    if (!j.contains("pattern") || !j["pattern"].is_object())
      return Status::error("pre_tokenizer Split: missing object \"pattern\"");
    const auto& pat = j["pattern"];
    std::string pattern;
    if (pat.contains("Regex") && pat["Regex"].is_string()) pattern = pat["Regex"].get<std::string>();
    else if (pat.contains("String") && pat["String"].is_string()) pattern = escape_literal(pat["String"].get<std::string>());
    else return Status::error("pre_tokenizer Split: pattern needs a string \"Regex\" or \"String\"");
    std::string behavior = j.value("behavior", std::string("Isolated"));
    RegexSplit::Behavior b;
    if (behavior == "Isolated") b = RegexSplit::Behavior::kIsolated;
    else if (behavior == "Removed") b = RegexSplit::Behavior::kRemoved;
    else return Status::errorf("pre_tokenizer Split: behavior {:?} is not supported (Isolated, Removed)", behavior);
    DSI_ASSIGN_OR_RETURN(auto s, RegexSplit::create(pattern, b, j.value("invert", false)));
    splits.push_back(std::move(s));
    return Status::ok();
  }
  return Status::errorf("pre_tokenizer type {:?} is not supported (Sequence, Split, ByteLevel)", type);
}

Result<Pretokenizer> Pretokenizer::from_json(const nlohmann::json& j) {
  Pretokenizer p;
  try {
    DSI_RETURN_IF_ERROR(add_step(j, p.splits_));
  } catch (const nlohmann::json::exception& e) {
    return Status::errorf("pre_tokenizer: malformed field: {}", e.what());
  }
  return p;
}

Status Pretokenizer::split(std::string_view text, Span range, std::vector<Span>& out) {
  if (splits_.empty()) {
    out.push_back(range);
    return Status::ok();
  }
  // Ping-pong between scratch_ and the tail of `out`: step k splits every piece produced by step k-1.
  const size_t base = out.size();
  scratch_.clear();
  scratch_.push_back(range);
  for (size_t k = 0; k < splits_.size(); ++k) {
    const bool last = k + 1 == splits_.size();
    std::vector<Span>& dst = out;
    size_t dst_base = base;
    if (!last) {
      out.resize(base);  // use out's tail as temporary
    }
    for (const Span& piece : scratch_) DSI_RETURN_IF_ERROR(splits_[k]->apply(text, piece, dst));
    if (!last) {
      scratch_.assign(out.begin() + static_cast<ptrdiff_t>(dst_base), out.end());
      out.resize(base);
    }
  }
  return Status::ok();
}

}  // namespace dsinfer::tokenizer
