// `dsinfer generate`: offline generation. Either a JSONL file in the OpenAI Batch API request format
// (--input/--output: one output record per input line, in input order; bad lines get an error record and the
// rest still run) or one prompt (--prompt, optionally --chat). Progress on stderr, a summary at the end.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "apps/dsinfer/commands.h"
#include "runtime/engine.h"
#include "runtime/openai_format.h"

namespace dsinfer::cli {

using nlohmann::json;

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: dsinfer generate --model DIR (--input requests.jsonl --output results.jsonl | --prompt TEXT [--chat])\n"
               "  engine:   --backend cpu|cuda  --numerics official|hf  --load-format auto|dummy  --tokenizer FILE\n"
               "            --max-num-seqs N (64)  --max-num-batched-tokens N (2048)  --max-model-len N  --seed N\n"
               "            --state-memory-gb X\n"
               "  --prompt:  --max-tokens N (64)  --temperature X (0)  --top-p X  --top-k N  --ignore-eos\n"
               "Input lines: {\"custom_id\": \"...\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\" or\n"
               "\"/v1/completions\", \"body\": {\"messages\": [...] | \"prompt\": \"text\" | [token ids], sampling fields}}.\n");
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double idx = q * double(v.size() - 1);
  const size_t lo = size_t(idx), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

struct Line {
  json custom_id;
  std::optional<json> record;  // filled when done (success or error)
  bool failed = false;
};

// Validates one Batch API line; returns the body or an error message.
Result<json> parse_line(const std::string& text, size_t lineno, json& custom_id) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    return Status::errorf("line {}: not valid JSON: {}", lineno, e.what());
  }
  if (!j.is_object()) return Status::errorf("line {}: must be a JSON object", lineno);
  if (j.contains("custom_id")) custom_id = j["custom_id"];
  if (!custom_id.is_string()) return Status::errorf("line {}: 'custom_id' must be a string", lineno);
  if (j.contains("method") && j["method"] != "POST")
    return Status::errorf("line {}: 'method' must be \"POST\", found {}", lineno, j["method"].dump());
  if (!j.contains("body") || !j["body"].is_object()) return Status::errorf("line {}: 'body' must be a JSON object", lineno);
  json body = j["body"];
  if (j.contains("url")) {
    const json& url = j["url"];
    if (url == "/v1/chat/completions") {
      if (!body.contains("messages")) return Status::errorf("line {}: a /v1/chat/completions body needs 'messages'", lineno);
    } else if (url == "/v1/completions") {
      if (!body.contains("prompt")) return Status::errorf("line {}: a /v1/completions body needs 'prompt'", lineno);
    } else {
      return Status::errorf("line {}: unsupported url {} (expected /v1/chat/completions or /v1/completions)", lineno, url.dump());
    }
  }
  if (body.contains("stream") && body["stream"] == true) return Status::errorf("line {}: 'stream' is not supported in batch mode", lineno);
  return body;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  runtime::EngineConfig ec;
  std::string input, output, prompt;
  bool chat = false, ignore_eos = false;
  json overrides = json::object();
  double state_gb = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(), 0;
    if (a == "--chat") { chat = true; continue; }
    if (a == "--ignore-eos") { ignore_eos = true; continue; }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "generate: option '%s' needs a value (or is unknown)\n", a.c_str());
      return usage(), 2;
    }
    const std::string v = argv[++i];
    auto num = [&](double& out) {
      char* end = nullptr;
      out = std::strtod(v.c_str(), &end);
      if (v.empty() || *end) {
        std::fprintf(stderr, "generate: %s expects a number, found '%s'\n", a.c_str(), v.c_str());
        return false;
      }
      return true;
    };
    double x = 0;
    if (a == "--model") ec.runner.model_dir = v;
    else if (a == "--input") input = v;
    else if (a == "--output") output = v;
    else if (a == "--prompt") prompt = v;
    else if (a == "--backend") ec.runner.backend = v;
    else if (a == "--numerics") ec.runner.numerics = v;
    else if (a == "--load-format") ec.runner.load_format = v;
    else if (a == "--tokenizer") ec.tokenizer_path = v;
    else if (!num(x)) return 2;
    else if (a == "--max-num-seqs") ec.max_num_seqs = int32_t(x);
    else if (a == "--max-num-batched-tokens") ec.max_num_batched_tokens = int64_t(x);
    else if (a == "--max-model-len") ec.max_model_len = int64_t(x);
    else if (a == "--seed") ec.seed = uint64_t(x);
    else if (a == "--state-memory-gb") state_gb = x;
    else if (a == "--max-tokens") overrides["max_tokens"] = int64_t(x);
    else if (a == "--temperature") overrides["temperature"] = x;
    else if (a == "--top-p") overrides["top_p"] = x;
    else if (a == "--top-k") overrides["top_k"] = int64_t(x);
    else {
      std::fprintf(stderr, "generate: unknown option '%s'\n", a.c_str());
      return usage(), 2;
    }
  }
  if (ec.runner.model_dir.empty() || (input.empty() == prompt.empty()) || (!input.empty() && output.empty())) {
    std::fprintf(stderr, "generate: needs --model and either --input with --output, or --prompt\n");
    return usage(), 2;
  }
  ec.state_budget_bytes = int64_t(state_gb * double(int64_t(1) << 30));
  auto eng = runtime::Engine::create(ec);
  if (!eng) {
    std::fprintf(stderr, "generate: %s\n", eng.status().message().c_str());
    return 2;
  }
  runtime::Engine& engine = **eng;
  std::fprintf(stderr, "model %s on %s, max_model_len %lld\n", ec.runner.model_dir.c_str(), engine.runner().name().c_str(),
               (long long)engine.max_model_len());

  // ---- requests ----
  std::vector<Line> lines;
  std::map<scheduler::RequestId, size_t> line_of;
  const std::string model_name = std::filesystem::path(ec.runner.model_dir).filename().string();
  const int64_t created = int64_t(std::time(nullptr));
  auto fail = [&](size_t li, const std::string& code, const std::string& msg) {
    lines[li].record = runtime::batch_error_record("batch_req_" + std::to_string(li + 1), lines[li].custom_id, code, msg);
    lines[li].failed = true;
  };
  if (!prompt.empty()) {
    json body = {{"max_tokens", 64}, {"temperature", 0.0}};
    if (chat) body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
    else body["prompt"] = prompt;
    if (ignore_eos) body["ignore_eos"] = true;
    body.update(overrides);
    lines.push_back({json("prompt"), std::nullopt, false});
    auto id = engine.add(body);
    if (!id) {
      std::fprintf(stderr, "generate: %s\n", id.status().message().c_str());
      return 2;
    }
    line_of[*id] = 0;
  } else {
    std::ifstream in(input);
    if (!in) {
      std::fprintf(stderr, "generate: cannot open %s\n", input.c_str());
      return 2;
    }
    std::set<std::string> seen_ids;
    std::string text;
    for (size_t lineno = 1; std::getline(in, text); ++lineno) {
      if (!text.empty() && text.back() == '\r') text.pop_back();
      lines.push_back({json(nullptr), std::nullopt, false});
      const size_t li = lines.size() - 1;
      auto body = parse_line(text, lineno, lines[li].custom_id);
      if (!body) {
        fail(li, "invalid_request", body.status().message());
        continue;
      }
      if (!seen_ids.insert(lines[li].custom_id.get<std::string>()).second) {
        fail(li, "invalid_request", fmt::format("line {}: duplicate custom_id {}", lineno, lines[li].custom_id.dump()));
        continue;
      }
      auto id = engine.add(*body);
      if (!id) {
        fail(li, "invalid_request", fmt::format("line {}: {}", lineno, id.status().message()));
        continue;
      }
      line_of[*id] = li;
    }
  }

  // ---- run ----
  const bool tty = isatty(STDERR_FILENO);
  const size_t total = line_of.size();
  size_t done = 0;
  int64_t in_tokens = 0, out_tokens = 0;
  std::vector<double> ttft, tpot;
  double last_report = 0;
  const double t_start = engine.now_s();
  std::vector<runtime::RequestOutput> single;
  while (engine.has_unfinished()) {
    if (Status s = engine.step(); !s) {
      // A model failure ends the run; every request still pending gets the error, finished ones keep results.
      std::fprintf(stderr, "generate: step failed: %s\n", s.message().c_str());
      for (auto& [id, li] : line_of)
        if (!lines[li].record) fail(li, "engine_error", s.message());
      break;
    }
    for (runtime::RequestOutput& r : engine.take_finished()) {
      const size_t li = line_of[r.id];
      in_tokens += r.prompt_tokens;
      out_tokens += r.completion_tokens;
      if (r.first_token_s >= 0) ttft.push_back(r.first_token_s - r.arrival_s);
      // Per-output-token latency after the first token, per sample of the request.
      const int64_t per_sample = r.completion_tokens / std::max<int64_t>(1, int64_t(r.choices.size()));
      if (per_sample > 1 && r.first_token_s >= 0) tpot.push_back((r.finish_s - r.first_token_s) / double(per_sample - 1));
      json body = runtime::response_body(r, model_name, engine.tokenizer(), created);
      lines[li].record = runtime::batch_success_record("batch_req_" + std::to_string(li + 1), lines[li].custom_id, body);
      ++done;
      if (!prompt.empty()) single.push_back(std::move(r));
    }
    const double now = engine.now_s();
    if (tty || now - last_report > 5.0 || done == total) {
      const double el = now - t_start;
      if (tty) {
        const int width = 30, fill = total ? int(double(width) * double(done) / double(total)) : width;
        std::fprintf(stderr, "\r[%s%s] %zu/%zu requests  %.1f tok/s  ", std::string(size_t(fill), '#').c_str(),
                     std::string(size_t(width - fill), ' ').c_str(), done, total, el > 0 ? double(out_tokens) / el : 0.0);
      } else if (now - last_report > 5.0 || done == total) {
        std::fprintf(stderr, "progress: %zu/%zu requests, %lld output tokens, %.1f s\n", done, total, (long long)out_tokens, el);
      }
      last_report = now;
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  const double wall = engine.now_s() - t_start;

  // ---- output ----
  size_t failed = 0;
  for (const Line& l : lines) failed += l.failed;
  if (!prompt.empty()) {
    if (!single.empty()) {
      const runtime::Choice& c = single[0].choices[0];
      if (!c.reasoning.empty()) std::printf("[reasoning] %s\n[answer] ", c.reasoning.c_str());
      if (engine.tokenizer()) {
        std::printf("%s\n", c.text.c_str());
      } else {
        std::string ids;
        for (int32_t t : c.token_ids) {
          if (!ids.empty()) ids += ' ';
          ids += std::to_string(t);
        }
        std::printf("%s\n", ids.c_str());
      }
    } else if (!lines.empty() && lines[0].record) {
      std::printf("%s\n", (*lines[0].record)["error"]["message"].get<std::string>().c_str());
    }
  } else {
    std::ofstream out(output);
    if (!out) {
      std::fprintf(stderr, "generate: cannot write %s\n", output.c_str());
      return 2;
    }
    for (const Line& l : lines) out << (l.record ? l.record->dump() : json(nullptr).dump()) << "\n";
  }
  std::fprintf(stderr,
               "summary: %zu requests (%zu failed), %lld input tokens, %lld output tokens, %.2f s wall, "
               "%.1f output tok/s, %.1f total tok/s\n"
               "         TTFT p50/p90/p99 %.1f/%.1f/%.1f ms, per-token latency p50/p90/p99 %.1f/%.1f/%.1f ms\n",
               lines.size(), failed, (long long)in_tokens, (long long)out_tokens, wall, wall > 0 ? double(out_tokens) / wall : 0.0,
               wall > 0 ? double(in_tokens + out_tokens) / wall : 0.0, 1e3 * percentile(ttft, .5), 1e3 * percentile(ttft, .9),
               1e3 * percentile(ttft, .99), 1e3 * percentile(tpot, .5), 1e3 * percentile(tpot, .9), 1e3 * percentile(tpot, .99));
  return failed ? 1 : 0;
}

}  // namespace dsinfer::cli
