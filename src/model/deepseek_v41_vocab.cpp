// Engram compressed vocabulary (see deepseek_v41_vocab.h).
#include "model/deepseek_v41_vocab.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "io/model_files.h"

namespace dsinfer::model {

namespace {

// GPT-2 byte-level alphabet: code point of each byte's printable stand-in.
std::vector<char32_t> byte_level_chars() {
  std::vector<char32_t> cs(256, 0);
  std::vector<bool> direct(256, false);
  for (int b = '!'; b <= '~'; ++b) direct[size_t(b)] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[size_t(b)] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[size_t(b)] = true;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) cs[size_t(b)] = direct[size_t(b)] ? char32_t(b) : next++;
  return cs;
}

// The ByteLevel decoder on one token: its bytes when every char is a byte stand-in, else its own UTF-8.
std::string byte_level_decode(const std::string& token, const std::map<char32_t, uint8_t>& inverse) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(token);
  std::string out;
  for (int32_t i = 0; i < u.length(); i = u.moveIndex32(i, 1)) {
    auto it = inverse.find(char32_t(u.char32At(i)));
    if (it == inverse.end()) return token;
    out.push_back(char(it->second));
  }
  return out;
}

// Rust String::from_utf8_lossy (U+FFFD per maximal invalid subpart); ICU's converter follows the same rule.
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  icu::UnicodeString::fromUTF8(bytes).toUTF8String(out);
  return out;
}

bool is_mark(UChar32 c) {
  const int8_t t = u_charType(c);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK;
}

}  // namespace

std::string engram_normalize(const std::string& text) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(st);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(st);
  if (U_FAILURE(st)) return text;
  icu::UnicodeString u = nfd->normalize(nfkc->normalize(icu::UnicodeString::fromUTF8(text), st), st);
  std::u32string cps;
  for (int32_t i = 0; i < u.length(); i = u.moveIndex32(i, 1)) {
    const UChar32 c = u.char32At(i);
    if (is_mark(c)) continue;
    UChar in[2], lower[8];
    int32_t n = 0;
    U16_APPEND_UNSAFE(in, n, c);
    UErrorCode ls = U_ZERO_ERROR;
    const int32_t m = u_strToLower(lower, 8, in, n, "", &ls);  // full, context-free per character (Rust to_lowercase)
    for (int32_t k = 0; k < m;) {
      UChar32 lc;
      U16_NEXT(lower, k, m, lc);
      cps.push_back(char32_t(lc));
    }
  }
  std::u32string collapsed;  // [ \t\r\n]+ -> " "
  for (char32_t c : cps) {
    const bool ws = c == U' ' || c == U'\t' || c == U'\r' || c == U'\n';
    if (ws && !collapsed.empty() && collapsed.back() == U' ') continue;  // every ' ' here ends a run
    collapsed.push_back(ws ? U' ' : c);
  }
  if (collapsed == U" ") return " ";  // the sentinel keeps a lone space through Strip
  size_t b = 0, e = collapsed.size();
  while (b < e && u_isUWhiteSpace(UChar32(collapsed[b]))) ++b;
  while (e > b && u_isUWhiteSpace(UChar32(collapsed[e - 1]))) --e;
  icu::UnicodeString r;
  for (size_t i = b; i < e; ++i) r.append(UChar32(collapsed[i]));
  std::string out;
  r.toUTF8String(out);
  return out;
}

Result<EngramVocab> build_engram_vocab(const std::string& path) {
  auto text = io::read_regular_file(path);
  if (!text.is_ok())
    return Status::errorf("{} (the Engram layers need the model's tokenizer.json)", text.status().message());
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("model") || !j["model"].contains("vocab") || !j["model"]["vocab"].is_object())
    return Status::errorf("{}: expected a tokenizer.json with model.vocab", path);
  const std::string type = j["model"].value("type", std::string());
  const bool byte_level = j.contains("decoder") && j["decoder"].is_object() && j["decoder"].value("type", "") == "ByteLevel";
  if (!byte_level && !(j.contains("decoder") && j["decoder"].is_null()) && j.contains("decoder"))
    return Status::errorf("{}: decoder '{}' is not supported for the Engram vocabulary (expected ByteLevel or none)", path,
                          j["decoder"].dump());
  if (!byte_level && type != "WordLevel")
    return Status::errorf("{}: model type '{}' without a ByteLevel decoder is not supported", path, type);
  std::map<int64_t, std::string> tokens;  // id -> spelling (id_to_token)
  for (const auto& [tok, id] : j["model"]["vocab"].items()) tokens[id.get<int64_t>()] = tok;
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) tokens[a.value("id", int64_t(-1))] = a.value("content", std::string());
  std::map<char32_t, uint8_t> inverse;
  const auto chars = byte_level_chars();
  for (int b = 0; b < 256; ++b) inverse[chars[size_t(b)]] = uint8_t(b);
  EngramVocab v;
  const int64_t n = tokens.empty() ? 0 : tokens.rbegin()->first + 1;
  std::unordered_map<std::string, int64_t> first;
  for (int64_t id = 0; id < n; ++id) {
    auto it = tokens.find(id);
    const std::string spelling = it == tokens.end() ? std::string() : it->second;
    const std::string text = byte_level ? utf8_lossy(byte_level_decode(spelling, inverse)) : spelling;
    std::string key = text.find("\xEF\xBF\xBD") != std::string::npos ? spelling : engram_normalize(text);
    if (key.empty()) key = text;
    auto [pos, fresh] = first.emplace(key, int64_t(first.size()));
    v.token_map.push_back(pos->second);
  }
  v.size = int64_t(first.size());
  return v;
}

Result<EngramVocab> load_engram_vocab(const io::ModelConfig& cfg, const std::string& model_dir) {
  const auto& v = cfg.v41;
  DSI_ASSIGN_OR_RETURN(EngramVocab vocab, build_engram_vocab(model_dir + "/tokenizer.json"));
  if (vocab.size != v.engram_compressed_vocab_size)
    return Status::errorf("{}/tokenizer.json: the Engram compressed vocabulary has {} entries, config.json says "
                          "engram_compressed_vocab_size = {} (the hash multipliers derive from it)", model_dir,
                          vocab.size, v.engram_compressed_vocab_size);
  if (int64_t(vocab.token_map.size()) <= v.engram_pad_id)
    return Status::errorf("{}/tokenizer.json: engram_pad_id {} is not a token of the tokenizer", model_dir,
                          v.engram_pad_id);
  return vocab;
}

}  // namespace dsinfer::model
