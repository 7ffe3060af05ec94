// `dsinfer tokenize` / `dsinfer detokenize`: JSON lines in, JSON lines out (one text <-> one id array per line),
// on the public tokenizer API (include/dsinfer/tokenizer.h). A bad line gets {"error": "..."} on stdout (so
// output line k always answers input line k) and a message on stderr; the other lines still run, and the
// exit code is 1 when any line failed.
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/dsinfer/commands.h"
#include "dsinfer/tokenizer.h"

namespace dsinfer::cli {
namespace {

struct Args {
  std::string tokenizer;
  bool plain = false;
  bool skip_special = false;
};

// Returns 0 on success, -1 after --help, otherwise the exit code (after printing usage / the error).
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

// One input line -> its output JSON, or false with *error.
bool convert(const Tokenizer& tok, const Args& a, bool detok, const std::string& line, std::string* out, std::string* error) {
  // One rule with generate / serve (request bodies): nlohmann's parser, whose message says what is wrong (a lone
  // UTF-16 surrogate escape such as "\ud800", invalid UTF-8, a syntax error) and where.
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    return fail(error, std::string("not valid JSON: ") + e.what());
  }
  std::vector<int32_t> ids;
  if (!detok) {
    if (!j.is_string()) return fail(error, "expected a JSON string, got " + std::string(j.type_name()));
    if (!tok.encode(j.get_ref<const std::string&>(), &ids, error, !a.plain)) return false;
    *out = nlohmann::json(ids).dump();
    return true;
  }
  if (!j.is_array()) return fail(error, "expected a JSON array of token ids, got " + std::string(j.type_name()));
  for (size_t k = 0; k < j.size(); ++k) {
    if (!j[k].is_number_integer() || j[k].get<int64_t>() < INT32_MIN || j[k].get<int64_t>() > INT32_MAX ||
        (j[k].is_number_unsigned() && j[k].get<uint64_t>() > uint64_t(INT32_MAX)))
      return fail(error, fmt::format("element {} is not a 32-bit integer token id", k));
    ids.push_back(j[k].get<int32_t>());
  }
  std::string text;
  if (!tok.decode(ids, &text, error, a.skip_special)) return false;
  *out = nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return true;
}

int run(int argc, char** argv, bool detok) {
  Args a;
  if (int rc = parse_args(argc, argv, detok, a)) return rc < 0 ? 0 : rc;
  std::string err;
  std::unique_ptr<Tokenizer> tok = Tokenizer::load(a.tokenizer, &err);
  if (!tok) {
    std::fprintf(stderr, "dsinfer %s: %s\n", argv[0], err.c_str());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line, out;
  size_t lineno = 0, failed = 0;
  while (std::getline(std::cin, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!convert(*tok, a, detok, line, &out, &err)) {
      ++failed;
      const std::string msg = fmt::format("stdin line {}: {}", lineno, err);
      std::fprintf(stderr, "dsinfer %s: %s\n", argv[0], msg.c_str());
      out = nlohmann::json{{"error", msg}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    out += '\n';
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) break;
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "dsinfer %s: error writing the output\n", argv[0]);
    return 2;
  }
  if (failed) std::fprintf(stderr, "dsinfer %s: %zu of %zu lines failed\n", argv[0], failed, lineno);
  return failed ? 1 : 0;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) { return run(argc, argv, false); }
int cmd_detokenize(int argc, char** argv) { return run(argc, argv, true); }

}  // namespace dsinfer::cli
