// `dsinfer tokenize` / `dsinfer detokenize`: JSON lines in, JSON lines out (one text <-> one id array per line).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/dsinfer/commands.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {
namespace {

struct Args {
  std::string tokenizer;
  bool plain = false;
  bool skip_special = false;
};

// Returns 0 on success, otherwise the exit code (after printing usage / the error).
int parse_args(int argc, char** argv, bool detok, Args& a) {
  const char* usage = detok ? "usage: dsinfer detokenize --tokenizer tokenizer.json [--skip-special]\n"
                              "  stdin: one JSON array of token ids per line; stdout: one JSON string per line\n"
                            : "usage: dsinfer tokenize --tokenizer tokenizer.json [--plain]\n"
                              "  stdin: one JSON string per line; stdout: one JSON array of token ids per line\n"
                              "  --plain: added-token spellings in the text are ordinary text\n";
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--tokenizer" && i + 1 < argc) a.tokenizer = argv[++i];
    else if (!detok && s == "--plain") a.plain = true;
    else if (detok && s == "--skip-special") a.skip_special = true;
    else if (s == "--help" || s == "-h") { std::fputs(usage, stdout); return -1; }
    else { std::fprintf(stderr, "dsinfer %s: unknown argument '%s'\n%s", argv[0], s.c_str(), usage); return 2; }
  }
  if (a.tokenizer.empty()) { std::fprintf(stderr, "dsinfer %s: --tokenizer is required\n%s", argv[0], usage); return 2; }
  return 0;
}

int run(int argc, char** argv, bool detok) {
  Args a;
  if (int rc = parse_args(argc, argv, detok, a)) return rc < 0 ? 0 : rc;
  auto tok = tokenizer::Tokenizer::from_file(a.tokenizer);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "dsinfer %s: %s\n", argv[0], tok.status().message().c_str());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line, out;
  std::vector<int32_t> ids;
  size_t lineno = 0;
  while (std::getline(std::cin, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    auto fail = [&](const std::string& why) {
      std::fprintf(stderr, "dsinfer %s: stdin line %zu: %s\n", argv[0], lineno, why.c_str());
      return 1;
    };
    if (j.is_discarded()) return fail("not valid JSON");
    if (!detok) {
      if (!j.is_string()) return fail("expected a JSON string, got " + std::string(j.type_name()));
      ids.clear();
      Status s = (*tok)->encode(j.get_ref<const std::string&>(), ids,
                                a.plain ? tokenizer::EncodeMode::kPlainText : tokenizer::EncodeMode::kWithAddedTokens);
      if (!s.is_ok()) return fail(s.message());
      out = nlohmann::json(ids).dump();
    } else {
      if (!j.is_array()) return fail("expected a JSON array of token ids, got " + std::string(j.type_name()));
      ids.clear();
      for (size_t k = 0; k < j.size(); ++k) {
        if (!j[k].is_number_integer() || j[k].get<int64_t>() < INT32_MIN || j[k].get<int64_t>() > INT32_MAX)
          return fail(fmt::format("element {} is not a 32-bit integer token id", k));
        ids.push_back(j[k].get<int32_t>());
      }
      auto text = (*tok)->decode(ids, a.skip_special);
      if (!text.is_ok()) return fail(text.status().message());
      out = nlohmann::json(*text).dump();
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) { return run(argc, argv, false); }
int cmd_detokenize(int argc, char** argv) { return run(argc, argv, true); }

}  // namespace dsinfer::cli
