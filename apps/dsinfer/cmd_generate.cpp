// `dsinfer generate`: offline generation. Either a JSONL file in the OpenAI Batch API request format
// (--input/--output: one output record per input line, in input order; bad lines get an error record and the
// rest still run) or one prompt (--prompt, optionally --chat). Progress on stderr, a summary at the end.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "apps/dsinfer/commands.h"
#include "apps/dsinfer/engine_flags.h"
#include "dsinfer/batch.h"
#include "dsinfer/engine.h"

namespace dsinfer::cli {

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: dsinfer generate --model DIR (--input requests.jsonl --output results.jsonl | --prompt TEXT [--chat])\n"
               "%s"
               "  --prompt:  --max-tokens N (64)  --temperature X (0)  --top-p X  --top-k N  --ignore-eos\n"
               "Input lines: {\"custom_id\": \"...\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\" or\n"
               "\"/v1/completions\", \"body\": {\"messages\": [...] | \"prompt\": \"text\" | [token ids], sampling fields}}.\n",
               engine_flags_help().c_str());
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double idx = q * double(v.size() - 1);
  const size_t lo = size_t(idx), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

struct Line {
  std::string custom_id;
  std::optional<std::string> record;  // filled when done (success or error)
  bool failed = false;
};

}  // namespace

int cmd_generate(int argc, char** argv) {
  EngineOptions eo;
  std::string input, output, prompt;
  bool chat = false;
  Request single_req;  // --prompt
  single_req.sampling.max_tokens = 64;
  single_req.sampling.temperature = 0.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return usage(), 0;
    if (const FlagParse f = parse_engine_flag("generate", argc, argv, i, eo); f != FlagParse::kNotEngineFlag) {
      if (f == FlagParse::kError) return usage(), 2;
      continue;
    }
    if (a == "--chat") { chat = true; continue; }
    if (a == "--ignore-eos") { single_req.sampling.ignore_eos = true; continue; }
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
    if (a == "--input") input = v;
    else if (a == "--output") output = v;
    else if (a == "--prompt") prompt = v;
    else if (!num(x)) return 2;
    else if (a == "--max-tokens") single_req.sampling.max_tokens = int64_t(x);
    else if (a == "--temperature") single_req.sampling.temperature = x;
    else if (a == "--top-p") single_req.sampling.top_p = x;
    else if (a == "--top-k") single_req.sampling.top_k = int32_t(x);
    else {
      std::fprintf(stderr, "generate: unknown option '%s'\n", a.c_str());
      return usage(), 2;
    }
  }
  if (eo.model_dir.empty() || (input.empty() == prompt.empty()) || (!input.empty() && output.empty())) {
    std::fprintf(stderr, "generate: needs --model and either --input with --output, or --prompt\n");
    return usage(), 2;
  }
  std::string err;
  std::unique_ptr<Engine> engine = Engine::create(eo, &err);
  if (!engine) {
    std::fprintf(stderr, "generate: %s\n", err.c_str());
    return 2;
  }
  std::fprintf(stderr, "model %s on %s, max_model_len %lld\n", eo.model_dir.c_str(), engine->backend_name().c_str(),
               (long long)engine->max_model_len());

  // ---- requests ----
  std::vector<Line> lines;
  std::map<uint64_t, size_t> line_of;
  auto fail = [&](size_t li, const std::string& code, const std::string& msg) {
    lines[li].record = batch_error_line(li + 1, lines[li].custom_id, code, msg);
    lines[li].failed = true;
  };
  if (!prompt.empty()) {
    if (chat) {
      single_req.endpoint = Endpoint::kChatCompletions;
      single_req.conversation = user_message_conversation(prompt);
    } else {
      single_req.prompt_text = prompt;
    }
    lines.push_back({"prompt", std::nullopt, false});
    const uint64_t id = engine->submit(single_req, &err);
    if (!id) {
      std::fprintf(stderr, "generate: %s\n", err.c_str());
      return 2;
    }
    line_of[id] = 0;
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
      lines.push_back({"", std::nullopt, false});
      const size_t li = lines.size() - 1;
      BatchLine bl;
      const bool ok = parse_batch_line(text, lineno, &bl, &err);
      lines[li].custom_id = bl.custom_id;
      if (!ok) {
        fail(li, "invalid_request", err);
        continue;
      }
      if (!seen_ids.insert(bl.custom_id).second) {
        fail(li, "invalid_request", fmt::format("line {}: duplicate custom_id \"{}\"", lineno, bl.custom_id));
        continue;
      }
      const uint64_t id = engine->submit(bl.request, &err);
      if (!id) {
        fail(li, "invalid_request", fmt::format("line {}: {}", lineno, err));
        continue;
      }
      line_of[id] = li;
    }
  }

  // ---- run ----
  const bool tty = isatty(STDERR_FILENO);
  const size_t total = line_of.size();
  size_t done = 0;
  int64_t in_tokens = 0, out_tokens = 0;
  std::vector<double> ttft, tpot;
  double last_report = 0;
  const double t_start = engine->now_s();
  std::vector<RequestResult> single;
  while (engine->has_unfinished()) {
    if (!engine->step(&err)) {
      // A model failure ends the run; every request still pending gets the error, finished ones keep results.
      std::fprintf(stderr, "generate: step failed: %s\n", err.c_str());
      for (auto& [id, li] : line_of)
        if (!lines[li].record) fail(li, "engine_error", err);
      break;
    }
    for (RequestResult& r : engine->take_finished()) {
      const size_t li = line_of[r.id];
      in_tokens += r.prompt_tokens;
      out_tokens += r.completion_tokens;
      if (r.first_token_s >= 0) ttft.push_back(r.first_token_s - r.arrival_s);
      // Per-output-token latency after the first token, per sample of the request.
      const int64_t per_sample = r.completion_tokens / std::max<int64_t>(1, int64_t(r.completions.size()));
      if (per_sample > 1 && r.first_token_s >= 0) tpot.push_back((r.finish_s - r.first_token_s) / double(per_sample - 1));
      lines[li].record = batch_success_line(li + 1, lines[li].custom_id, r);
      ++done;
      if (!prompt.empty()) single.push_back(std::move(r));
    }
    const double now = engine->now_s();
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
  const double wall = engine->now_s() - t_start;

  // ---- output ----
  size_t failed = 0;
  for (const Line& l : lines) failed += l.failed;
  if (!prompt.empty()) {
    if (!single.empty()) {
      const Completion& c = single[0].completions[0];
      if (!c.reasoning.empty()) std::printf("[reasoning] %s\n[answer] ", c.reasoning.c_str());
      if (engine->has_tokenizer()) {
        std::printf("%s\n", c.text.c_str());
      } else {
        std::string ids;
        for (int32_t t : c.token_ids) {
          if (!ids.empty()) ids += ' ';
          ids += std::to_string(t);
        }
        std::printf("%s\n", ids.c_str());
      }
    } else if (!lines.empty() && lines[0].failed) {
      std::printf("%s\n", err.c_str());
    }
  } else {
    std::ofstream out(output);
    if (!out) {
      std::fprintf(stderr, "generate: cannot write %s\n", output.c_str());
      return 2;
    }
    for (const Line& l : lines) out << (l.record ? *l.record : std::string("null")) << "\n";
  }
  std::fprintf(stderr,
               "summary: %zu requests (%zu failed), %lld input tokens, %lld output tokens, %.2f s wall, "
               "%.1f output tok/s, %.1f total tok/s\n"
               "         TTFT p50/p90/p99 %.1f/%.1f/%.1f ms, per-token latency p50/p90/p99 %.1f/%.1f/%.1f ms\n",
               lines.size(), failed, (long long)in_tokens, (long long)out_tokens, wall, wall > 0 ? double(out_tokens) / wall : 0.0,
               wall > 0 ? double(in_tokens + out_tokens) / wall : 0.0, 1e3 * percentile(ttft, .5), 1e3 * percentile(ttft, .9),
               1e3 * percentile(ttft, .99), 1e3 * percentile(tpot, .5), 1e3 * percentile(tpot, .9), 1e3 * percentile(tpot, .99));
  const SpeculativeMetrics sm = engine->speculative_metrics();
  if (sm.method != "off") {
    std::string per;
    for (size_t k = 0; k < sm.trials_per_position.size(); ++k)
      per += fmt::format("{}{:.3f}", k ? " " : "", sm.trials_per_position[k] ? double(sm.accepted_per_position[k]) /
                                                                                   double(sm.trials_per_position[k]) : 0.0);
    std::fprintf(stderr,
                 "speculative: %s, mean accepted length %.3f (tokens per decode round), acceptance per position [%s],\n"
                 "         verified tokens per step %.2f, verified per emitted token %.3f, draft time %.1f%% of steps\n",
                 sm.method.c_str(), sm.mean_accepted_length(), per.c_str(),
                 sm.steps ? double(sm.verified_tokens) / double(sm.steps) : 0.0,
                 sm.emitted_tokens ? double(sm.verified_tokens) / double(sm.emitted_tokens) : 0.0,
                 sm.step_seconds > 0 ? 100.0 * sm.draft_seconds / sm.step_seconds : 0.0);
  }
  return failed ? 1 : 0;
}

}  // namespace dsinfer::cli
