// dsinfer._core.Tokenizer (dsinfer::Tokenizer) and render_chat: the chat template as `dsinfer render-chat --model`
// applies it (the model's chat encoding and chat defaults, its tokenizer.json for the ids), on include/dsinfer/.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dsinfer/chat.h"
#include "dsinfer/request.h"
#include "dsinfer/tokenizer.h"
#include "python/src/module.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dsinfer::python {
namespace {

class PyTokenizer {
 public:
  explicit PyTokenizer(const std::string& path) {
    std::string error;
    tok_ = Tokenizer::load(path, &error);
    if (!tok_) throw std::invalid_argument(error);
  }
  std::vector<int32_t> encode(const std::string& text, bool special_tokens) const {
    std::vector<int32_t> ids;
    std::string error;
    if (!tok_->encode(text, &ids, &error, special_tokens)) throw std::invalid_argument(error);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
    std::string text, error;
    if (!tok_->decode(ids, &text, &error, skip_special_tokens)) throw std::invalid_argument(error);
    return text;
  }
  size_t vocab_size() const { return tok_->vocab_size(); }

 private:
  std::unique_ptr<Tokenizer> tok_;
};

struct RenderedChat {
  std::string prompt;
  std::optional<std::vector<int32_t>> token_ids;  // None without a tokenizer
  std::vector<std::pair<size_t, size_t>> special_ranges;
};

// body_json: a /v1/chat/completions body. model_dir: the chat encoding and defaults (and tokenizer.json when
// tokenizer_path is empty), as render-chat --model; without model_dir, V4's encoding and no defaults.
RenderedChat render_chat(const std::string& body_json, const std::string& model_dir,
                         const std::string& tokenizer_path) {
  std::string error;
  ChatEncoding enc = ChatEncoding::kDeepSeekV4;
  if (!model_dir.empty() && !chat_encoding_of_model(model_dir, &enc, &error)) throw std::invalid_argument(error);
  Request req;
  if (!parse_request(body_json, Endpoint::kChatCompletions, &req, &error)) throw std::invalid_argument(error);
  if (!model_dir.empty() && !apply_model_chat_defaults(model_dir, &req, &error)) throw std::invalid_argument(error);
  std::string tok = tokenizer_path;
  if (tok.empty() && !model_dir.empty() && std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    tok = (std::filesystem::path(model_dir) / "tokenizer.json").string();
  std::unique_ptr<ChatTemplate> tmpl;
  if (!tok.empty()) {
    tmpl = ChatTemplate::load(tok, &error, enc);
    if (!tmpl) throw std::invalid_argument(error);
  }
  ChatPrompt p;
  if (!(tmpl ? tmpl->render(req, &p, &error) : render_chat_text(req, &p, &error, enc)))
    throw std::invalid_argument(error);
  RenderedChat out{std::move(p.text), std::nullopt, std::move(p.special_ranges)};
  if (tmpl) out.token_ids = std::move(p.token_ids);
  return out;
}

}  // namespace

void bind_tokenizer_and_chat(nb::module_& m) {
  nb::class_<PyTokenizer>(m, "Tokenizer", "A Hugging Face tokenizer.json (the engine's byte-level BPE).")
      .def(nb::init<const std::string&>(), "path"_a, "Load a tokenizer.json; ValueError naming the problem.")
      .def("encode", &PyTokenizer::encode, "text"_a, "special_tokens"_a = true,
           "Token ids of text; special_tokens=False reads added-token spellings as plain text.")
      .def("decode", &PyTokenizer::decode, "ids"_a, "skip_special_tokens"_a = false,
           "Text of ids; ValueError naming the first id outside the vocabulary.")
      .def_prop_ro("vocab_size", &PyTokenizer::vocab_size);
  nb::class_<RenderedChat>(m, "RenderedChat", "A rendered chat prompt.")
      .def_ro("prompt", &RenderedChat::prompt)
      .def_ro("token_ids", &RenderedChat::token_ids)
      .def_ro("special_ranges", &RenderedChat::special_ranges);
  m.def("render_chat", &render_chat, "body_json"_a, "model_dir"_a = "", "tokenizer_path"_a = "",
        "Render a /v1/chat/completions body as `dsinfer render-chat --model model_dir` does.");
}

}  // namespace dsinfer::python
