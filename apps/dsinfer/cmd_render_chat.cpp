// `dsinfer render-chat`: chat requests in (OpenAI Batch JSONL lines or bare /v1/chat/completions bodies), one
// JSON line out per input line: the DeepSeek-V4 prompt text the engine would run and its token ids, or an error
// record naming the problem. With --parse-output, each line also carries a model output ("output": text, or
// "output_token_ids": [...]) and the record is the parsed assistant message (reasoning, content, tool calls).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/dsinfer/commands.h"
#include "dsinfer/batch.h"
#include "dsinfer/chat.h"

namespace dsinfer::cli {
namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: dsinfer render-chat (--tokenizer tokenizer.json | --model DIR) [--input FILE] [--output FILE] [--parse-output]\n"
    "  --model DIR: the chat encoding (V4 / V4.1) from DIR/config.json, the token ids from DIR/tokenizer.json (unless\n"
    "    --tokenizer names another) and the chat defaults from DIR/chat_defaults.json (thinking on or off for requests\n"
    "    that do not say); a DIR without tokenizer.json renders without token ids (prompt_token_ids null)\n"
    "  input (default stdin): one chat request per line, an OpenAI Batch line {\"custom_id\", \"body\", ...} or a bare\n"
    "    /v1/chat/completions body {\"messages\": ...}\n"
    "  output (default stdout): per line {\"custom_id\", \"prompt\", \"prompt_token_ids\", \"special_ranges\"}, or\n"
    "    {\"custom_id\", \"error\": {\"message\"}}; exit code 1 when some line failed\n"
    "  --parse-output: lines also hold \"output\" (model text after the prompt; or a list of text pieces streamed in\n"
    "    order) or \"output_token_ids\"; records are {\"custom_id\", \"message\": {\"reasoning_content\", \"content\",\n"
    "    \"tool_calls\"}, \"parse_error\"?}\n";

struct Args {
  std::string tokenizer, input, output, model;
  ChatEncoding enc = ChatEncoding::kDeepSeekV4;
  bool parse_output = false;
};

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson message_json(const ChatOutput& o) {
  ojson calls = ojson::array();
  for (const ToolCallResult& t : o.tool_calls)
    calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
  return {{"role", "assistant"}, {"reasoning_content", o.reasoning_content}, {"content", o.content}, {"tool_calls", calls}};
}

// One input line -> one output record; false when the line failed.
bool process(const std::string& line, size_t n, const Args& a, const ChatTemplate* tmpl, ojson& rec) {
  rec = ojson::object();
  auto fail = [&](const std::string& m) {
    rec["error"] = {{"message", m}};
    return false;
  };
  ojson j = ojson::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return fail(fmt::format("line {}: not a JSON object", n));
  std::string error;
  Request req;
  if (j.contains("body")) {
    BatchLine bl;
    const bool ok = parse_batch_line(line, n, &bl, &error);
    rec["custom_id"] = bl.custom_id.empty() ? ojson(nullptr) : ojson(bl.custom_id);
    if (!ok) return fail(error);
    req = std::move(bl.request);
  } else {
    rec["custom_id"] = nullptr;
    ojson body = j;
    body.erase("output");
    body.erase("output_token_ids");
    if (!parse_request(dump(body), Endpoint::kChatCompletions, &req, &error)) return fail(fmt::format("line {}: {}", n, error));
  }
  if (req.endpoint != Endpoint::kChatCompletions) return fail(fmt::format("line {}: not a chat request (no 'messages')", n));
  if (!a.model.empty() && !apply_model_chat_defaults(a.model, &req, &error)) return fail(fmt::format("line {}: {}", n, error));
  if (!a.parse_output) {
    ChatPrompt p;
    if (!(tmpl ? tmpl->render(req, &p, &error) : render_chat_text(req, &p, &error, a.enc))) return fail(fmt::format("line {}: {}", n, error));
    ojson ranges = ojson::array();
    for (const auto& [b, e] : p.special_ranges) ranges.push_back({b, e});
    rec["prompt"] = p.text;
    rec["prompt_token_ids"] = tmpl ? ojson(p.token_ids) : ojson(nullptr);
    rec["special_ranges"] = std::move(ranges);
    return true;
  }
  ChatOutput out;
  if (j.contains("output_token_ids")) {
    const ojson& ids = j["output_token_ids"];
    std::vector<int32_t> v;
    for (size_t k = 0; ids.is_array() && k < ids.size(); ++k) {
      if (!ids[k].is_number_integer() || ids[k].get<int64_t>() < INT32_MIN || ids[k].get<int64_t>() > INT32_MAX)
        return fail(fmt::format("line {}: output_token_ids[{}] is not a token id", n, k));
      v.push_back(ids[k].get<int32_t>());
    }
    if (!ids.is_array()) return fail(fmt::format("line {}: output_token_ids must be an array of token ids", n));
    if (!tmpl) return fail(fmt::format("line {}: output_token_ids need --tokenizer", n));
    if (!tmpl->parse_output_ids(req, v, &out, &error)) return fail(fmt::format("line {}: {}", n, error));
  } else if (j.contains("output") && (j["output"].is_string() || j["output"].is_array())) {
    std::vector<std::string> pieces;
    if (j["output"].is_string()) pieces.push_back(j["output"].get<std::string>());
    for (size_t k = 0; j["output"].is_array() && k < j["output"].size(); ++k) {
      if (!j["output"][k].is_string()) return fail(fmt::format("line {}: output[{}] is not a string", n, k));
      pieces.push_back(j["output"][k].get<std::string>());
    }
    out = parse_chat_output(req, pieces, a.enc);
  } else {
    return fail(fmt::format("line {}: --parse-output needs \"output\" (text or list of texts) or \"output_token_ids\"", n));
  }
  rec["message"] = message_json(out);
  if (!out.error.empty()) rec["parse_error"] = out.error;
  return true;
}

}  // namespace

int cmd_render_chat(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--tokenizer" && i + 1 < argc) a.tokenizer = argv[++i];
    else if (s == "--model" && i + 1 < argc) a.model = argv[++i];
    else if (s == "--input" && i + 1 < argc) a.input = argv[++i];
    else if (s == "--output" && i + 1 < argc) a.output = argv[++i];
    else if (s == "--parse-output") a.parse_output = true;
    else if (s == "--help" || s == "-h") { std::fputs(kUsage, stdout); return 0; }
    else { std::fprintf(stderr, "dsinfer render-chat: unknown argument '%s'\n%s", s.c_str(), kUsage); return 2; }
  }
  if (a.tokenizer.empty() && a.model.empty()) { std::fprintf(stderr, "dsinfer render-chat: --tokenizer or --model is required\n%s", kUsage); return 2; }
  std::string error;
  if (!a.model.empty() && !chat_encoding_of_model(a.model, &a.enc, &error)) { std::fprintf(stderr, "dsinfer render-chat: %s\n", error.c_str()); return 2; }
  std::unique_ptr<ChatTemplate> tmpl;
  if (!a.tokenizer.empty()) {
    tmpl = ChatTemplate::load(a.tokenizer, &error, a.enc);
    if (!tmpl) { std::fprintf(stderr, "dsinfer render-chat: %s\n", error.c_str()); return 2; }
  } else if (const auto model_tok = std::filesystem::path(a.model) / "tokenizer.json"; std::filesystem::exists(model_tok)) {
    // The model's own tokenizer fills prompt_token_ids; one this tokenizer cannot read (e.g. a test fixture's
    // WordLevel vocabulary) leaves them null, said once.
    tmpl = ChatTemplate::load(model_tok.string(), &error, a.enc);
    if (!tmpl) std::fprintf(stderr, "dsinfer render-chat: no token ids (prompt_token_ids null): %s\n", error.c_str());
  }
  std::ifstream fin;
  if (!a.input.empty()) {
    fin.open(a.input, std::ios::binary);
    if (!fin) { std::fprintf(stderr, "dsinfer render-chat: cannot read %s\n", a.input.c_str()); return 2; }
  }
  std::ofstream fout;
  if (!a.output.empty()) {
    fout.open(a.output, std::ios::binary);
    if (!fout) { std::fprintf(stderr, "dsinfer render-chat: cannot write %s\n", a.output.c_str()); return 2; }
  }
  std::istream& in = a.input.empty() ? std::cin : fin;
  std::ostream& out = a.output.empty() ? std::cout : fout;
  std::string line;
  size_t n = 0, failed = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    ojson rec;
    if (!process(line, n, a, tmpl.get(), rec)) ++failed;
    out << dump(rec) << '\n';
  }
  out.flush();
  std::fprintf(stderr, "dsinfer render-chat: %zu lines (%zu failed)\n", n, failed);
  return failed ? 1 : 0;
}

}  // namespace dsinfer::cli
