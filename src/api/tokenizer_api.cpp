// include/dsinfer/tokenizer.h on top of tokenizer::Tokenizer.
#include "dsinfer/tokenizer.h"

#include "tokenizer/tokenizer.h"

namespace dsinfer {

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path, std::string* error) {
  auto t = tokenizer::Tokenizer::from_file(path);
  if (!t.is_ok()) {
    if (error) *error = t.status().message();
    return nullptr;
  }
  std::unique_ptr<Tokenizer> out(new Tokenizer());
  out->impl_ = std::move(t).value();
  return out;
}

bool Tokenizer::encode(std::string_view text, std::vector<int32_t>* ids, std::string* error, bool special_tokens) const {
  Status s = impl_->encode(text, *ids, special_tokens ? tokenizer::EncodeMode::kWithAddedTokens
                                                       : tokenizer::EncodeMode::kPlainText);
  if (!s && error) *error = s.message();
  return s.is_ok();
}

bool Tokenizer::decode(std::span<const int32_t> ids, std::string* text, std::string* error, bool skip_special_tokens) const {
  auto r = impl_->decode(ids, skip_special_tokens);
  if (!r.is_ok()) {
    if (error) *error = r.status().message();
    return false;
  }
  *text = std::move(r).value();
  return true;
}

size_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }

}  // namespace dsinfer
