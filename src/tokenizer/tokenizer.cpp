// Loading tokenizer.json and the encode / decode pipeline: added tokens -> Split regexes -> byte-level BPE.
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/json_limits.h"
#include "io/model_files.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer {
namespace {

using json = nlohmann::json;

// How far token ids may run past the number of vocab + added entries (unused ids in between are allowed).
constexpr int64_t kIdSlack = 1 << 16;

// j[key] when it is a string; `def` when absent; a marker when present but not a string (json::value()
// would throw there).
std::string string_or(const json& j, const char* key, const std::string& def) {
  if (!j.is_object() || !j.contains(key)) return def;
  return j[key].is_string() ? j[key].get<std::string>() : "<not a string>";
}

Status check_supported(const json& j) {
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& n = j["normalizer"];
    bool identity = n.is_object() && string_or(n, "type", "") == "Sequence" && n.contains("normalizers") &&
                    n["normalizers"].is_array() && n["normalizers"].empty();
    if (!identity) return Status::errorf("normalizer {} is not supported (only null or an empty Sequence)", n.dump());
  }
  if (j.contains("decoder") && !j["decoder"].is_null() &&
      !(j["decoder"].is_object() && string_or(j["decoder"], "type", "") == "ByteLevel"))
    return Status::errorf("decoder {} is not supported (only ByteLevel)", j["decoder"].dump());
  if (!j.contains("model") || !j["model"].is_object()) return Status::error("missing object \"model\"");
  const json& m = j["model"];
  if (string_or(m, "type", "BPE") != "BPE")
    return Status::errorf("model.type {} is not supported (only \"BPE\")", m["type"].dump());
  for (const char* k : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null()) return Status::errorf("model.{} = {} is not supported", k, m[k].dump());
  for (const char* k : {"byte_fallback", "ignore_merges", "fuse_unk"})
    if (m.contains(k) && m[k].is_boolean() && m[k].get<bool>()) return Status::errorf("model.{} = true is not supported", k);
  if (!m.contains("vocab") || !m["vocab"].is_object()) return Status::error("missing object \"model.vocab\"");
  if (!m.contains("merges") || !m["merges"].is_array()) return Status::error("missing array \"model.merges\"");
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::string& path) {
  auto text = io::read_regular_file(path);  // a FIFO or a directory is an error, not a blocking read
  if (!text.is_ok()) return Status::errorf("cannot open tokenizer file {:?}: {}", path, text.status().message());
  return from_json_text(*text, path);
}

// Merges: "a b" strings (old format) or ["a", "b"] pairs (new format); rank = position.
template <class Vocab>
Status read_merges(const json& merges, const Vocab& vocab, MergeTable& table) {
  table.build(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& mj = merges[r];
    std::string a, b;
    if (mj.is_string()) {
      const std::string& s = mj.get_ref<const std::string&>();
      size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return Status::errorf("model.merges[{}] {:?} is not \"left right\"", r, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      a = mj[0].get<std::string>();
      b = mj[1].get<std::string>();
    } else {
      return Status::errorf("model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", r);
    }
    auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end())
      return Status::errorf("model.merges[{}]: {:?} or {:?} is not in the vocab", r, a, b);
    if (im == vocab.end())
      return Status::errorf("model.merges[{}]: merged token {:?} is not in the vocab", r, a + b);
    table.insert(ia->second, ib->second, static_cast<uint32_t>(r), im->second);
  }
  return Status::ok();
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json_text(std::string_view text, std::string_view source) {
  auto ctx = [&](const Status& s) { return s.with_context(fmt::format("tokenizer {:?}", source)); };
  if (Status s = io::check_json_depth(text, "file"); !s) return ctx(s);
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return ctx(Status::error("not valid JSON"));
  if (!j.is_object()) return ctx(Status::error("top level is not a JSON object"));
  try {
    if (Status s = check_supported(j); !s) return ctx(s);
  } catch (const json::exception& e) {
    return ctx(Status::errorf("malformed field: {}", e.what()));
  }

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  try {
    const json& m = j["model"];
    int32_t max_id = -1;
    t->vocab_.reserve(m["vocab"].size());
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
        return ctx(Status::errorf("model.vocab[{:?}] is not a non-negative 32-bit integer id", it.key()));
      int32_t id = it.value().get<int32_t>();
      t->vocab_.emplace(it.key(), id);
      max_id = std::max(max_id, id);
    }
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      if (!j["added_tokens"].is_array()) return ctx(Status::error("\"added_tokens\" is not an array"));
      size_t k = 0;
      for (const json& a : j["added_tokens"]) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string() || a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() > INT32_MAX)
          return ctx(Status::errorf("added_tokens[{}] needs an integer \"id\" >= 0 and a string \"content\"", k));
        AddedToken tok;
        tok.id = a["id"].get<int32_t>();
        tok.content = a["content"].get<std::string>();
        if (utf8_first_invalid(tok.content) != std::string::npos)
          return ctx(Status::errorf("added_tokens[{}].content is not valid UTF-8", k));
        tok.special = a.value("special", false);
        tok.lstrip = a.value("lstrip", false);
        tok.rstrip = a.value("rstrip", false);
        tok.normalized = a.value("normalized", !tok.special);
        tok.single_word = a.value("single_word", false);
        max_id = std::max(max_id, tok.id);
        t->added_.push_back(std::move(tok));
        ++k;
      }
    }
    // Ids index a dense table: one far beyond the number of entries is a corrupt file, not a reason to allocate
    // gigabytes (or to overflow max_id + 1).
    const int64_t entries = int64_t(t->vocab_.size() + t->added_.size());
    if (int64_t(max_id) >= entries + kIdSlack) {
      for (size_t k = 0; k < t->added_.size(); ++k)
        if (int64_t(t->added_[k].id) >= entries + kIdSlack)
          return ctx(Status::errorf("added_tokens[{}].id = {} is far outside the vocabulary ({} entries; ids must be "
                                    "below {})", k, t->added_[k].id, entries, entries + kIdSlack));
      for (const auto& [tok, id] : t->vocab_)
        if (int64_t(id) >= entries + kIdSlack)
          return ctx(Status::errorf("model.vocab[{:?}] = {} is far outside the vocabulary ({} entries; ids must be "
                                    "below {})", tok, id, entries, entries + kIdSlack));
    }
    // Raw bytes per id; added tokens override vocab entries with the same id (HF looks added tokens up first).
    std::vector<std::string> bytes(static_cast<size_t>(max_id + 1));
    for (const auto& [tok, id] : t->vocab_) bytes[id] = byte_level_to_bytes(tok);
    t->is_special_.assign(bytes.size(), 0);
    for (const AddedToken& a : t->added_) {
      bytes[a.id] = byte_level_to_bytes(a.content);
      t->is_special_[a.id] = a.special;
      t->added_ids_.emplace(a.content, a.id);
    }
    t->id_offsets_.reserve(bytes.size() + 1);
    for (const std::string& b : bytes) {
      t->id_offsets_.push_back(static_cast<uint32_t>(t->id_bytes_.size()));
      t->id_bytes_ += b;
    }
    t->id_offsets_.push_back(static_cast<uint32_t>(t->id_bytes_.size()));

    // Initial symbols: the single-byte tokens.
    std::array<int32_t, 256> byte_ids;
    for (int b = 0; b < 256; ++b) {
      std::string s;
      utf8_append(byte_to_codepoint(static_cast<uint8_t>(b)), s);
      auto it = t->vocab_.find(s);
      byte_ids[b] = it == t->vocab_.end() ? -1 : it->second;
    }
    int32_t unk_id = -1;
    if (m.contains("unk_token") && m["unk_token"].is_string()) {
      auto it = t->vocab_.find(m["unk_token"].get<std::string>());
      if (it == t->vocab_.end()) return ctx(Status::errorf("model.unk_token {} is not in the vocab", m["unk_token"].dump()));
      unk_id = it->second;
    }
    MergeTable table;
    if (Status ms = read_merges(m["merges"], t->vocab_, table); !ms) return ctx(ms);
    t->bpe_ = std::make_unique<BpeModel>(byte_ids, std::move(table), unk_id);

    DSI_ASSIGN_OR_RETURN(Pretokenizer pre, [&]() -> Result<Pretokenizer> {
      auto p = Pretokenizer::from_json(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json());
      if (!p.is_ok()) return ctx(p.status());
      return p;
    }());
    t->pre_ = std::make_unique<Pretokenizer>(std::move(pre));
  } catch (const json::exception& e) {
    return ctx(Status::errorf("malformed field: {}", e.what()));
  }
  std::vector<const AddedToken*> raw, normalized;
  for (const AddedToken& a : t->added_) (a.normalized ? normalized : raw).push_back(&a);
  t->raw_matcher_ = AddedTokenMatcher(raw);
  t->normalized_matcher_ = AddedTokenMatcher(normalized);
  return t;
}

Status Tokenizer::encode_plain(std::string_view text, Span range, std::vector<int32_t>& out) const {
  if (range.first >= range.second) return Status::ok();
  pieces_.clear();
  DSI_RETURN_IF_ERROR(pre_->split(text, range, pieces_));
  for (const Span& p : pieces_) bpe_->encode_word(text.substr(p.first, p.second - p.first), out);
  return Status::ok();
}

Status Tokenizer::encode(std::string_view text, std::vector<int32_t>& out, EncodeMode mode) const {
  if (text.size() > UINT32_MAX) return Status::errorf("encode: text of {} bytes is longer than 4 GiB", text.size());
  if (size_t bad = utf8_first_invalid(text); bad != std::string_view::npos)
    return Status::errorf("encode: text is not valid UTF-8 (byte 0x{:02X} at offset {})",
                          static_cast<unsigned char>(text[bad]), bad);
  std::lock_guard<std::mutex> lock(mu_);
  const size_t out_size = out.size();
  auto fail = [&](Status s) { out.resize(out_size); return s; };
  const Span all{0, static_cast<uint32_t>(text.size())};
  if (mode == EncodeMode::kPlainText) {
    if (Status s = encode_plain(text, all, out); !s) return fail(s);
    return Status::ok();
  }
  // Pass 1: non-normalized added tokens on the raw text; pass 2: normalized ones inside each gap.
  matches_.clear();
  raw_matcher_.find(text, all, matches_);
  uint32_t pos = 0;
  auto gap = [&](Span g) -> Status {
    if (g.first >= g.second) return Status::ok();
    matches2_.clear();
    normalized_matcher_.find(text, g, matches2_);
    uint32_t p = g.first;
    for (const auto& m : matches2_) {
      DSI_RETURN_IF_ERROR(encode_plain(text, {p, m.begin}, out));
      out.push_back(m.token->id);
      p = m.end;
    }
    return encode_plain(text, {p, g.second}, out);
  };
  for (const auto& m : matches_) {
    if (Status s = gap({pos, m.begin}); !s) return fail(s);
    out.push_back(m.token->id);
    pos = m.end;
  }
  if (Status s = gap({pos, all.second}); !s) return fail(s);
  return Status::ok();
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, EncodeMode mode) const {
  std::vector<int32_t> ids;
  DSI_RETURN_IF_ERROR(encode(text, ids, mode));
  return ids;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (!is_valid_id(id)) return {};
  return std::string_view(id_bytes_).substr(id_offsets_[id], id_offsets_[id + 1] - id_offsets_[id]);
}

bool Tokenizer::is_special(int32_t id) const { return is_valid_id(id) && is_special_[id]; }

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string raw;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!is_valid_id(ids[i]))
      return Status::errorf("decode: token id {} at position {} is outside the vocabulary [0, {})", ids[i], i, vocab_size());
    if (skip_special_tokens && is_special_[ids[i]]) continue;
    raw += token_bytes(ids[i]);
  }
  std::string out;
  out.reserve(raw.size());
  utf8_append_lossy(raw, out);
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view content) const {
  std::string key(content);
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
  return std::nullopt;
}

}  // namespace dsinfer::tokenizer
