// `dsinfer generate`: offline generation. Either a JSONL file in the OpenAI Batch API request format
// (--input/--output: one output record per input line, in input order; bad lines get an error record and the
// rest still run) or one prompt (--prompt, optionally --chat). Progress on stderr, a summary at the end.
// Finished records reach the disk as they complete (batch_output.h); SIGINT / SIGTERM stop the run, record the
// unfinished lines as "aborted" errors and keep everything finished; --resume skips what an earlier run did.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/dsinfer/batch_output.h"
#include "apps/dsinfer/commands.h"
#include "apps/dsinfer/engine_flags.h"
#include "dsinfer/batch.h"
#include "dsinfer/engine.h"

namespace dsinfer::cli {

namespace {

volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C kills at once (finished records are already on disk)
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void usage(FILE* f) {
  std::fprintf(f,
               "usage: dsinfer generate --model DIR (--input requests.jsonl --output results.jsonl [--resume] | --prompt TEXT [--chat])\n"
               "%s"
               "  --prompt:  --max-tokens N (64)  --temperature X (0)  --top-p X  --top-k N  --ignore-eos\n"
               "  --chat:    the prompt is one user message of a chat; --thinking on|off (default: the model's chat\n"
               "             defaults, DIR/chat_defaults.json, else on as in DeepSeek's API)\n"
               "  --resume:  reuse the successful records of an interrupted run (OUTPUT and OUTPUT.partial), run the\n"
               "             rest; a line whose request changed since (same custom_id, other body) runs again\n"
               "Input lines: {\"custom_id\": \"...\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\" or\n"
               "\"/v1/completions\", \"body\": {\"messages\": [...] | \"prompt\": \"text\" | [token ids], sampling fields}}.\n"
               "Finished records are flushed to OUTPUT.partial as they complete; OUTPUT is written (input order) at the\n"
               "end. SIGINT/SIGTERM stop the run: unfinished lines get \"aborted\" error records (exit 130/143).\n",
               engine_flags_help().c_str());
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double idx = q * double(v.size() - 1);
  const size_t lo = size_t(idx), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

// "p50/p90/p99 ms" of latencies in seconds, or "n/a" when there are none.
std::string latency_ms(const std::vector<double>& v) {
  if (v.empty()) return "n/a";
  return fmt::format("{:.1f}/{:.1f}/{:.1f} ms", 1e3 * percentile(v, .5), 1e3 * percentile(v, .9), 1e3 * percentile(v, .99));
}

struct Options {
  EngineOptions eo;
  std::string input, output, prompt, thinking;  // thinking: "on" / "off" / "" (the model's default)
  bool chat = false, resume = false, has_prompt = false;
  Request single;  // --prompt
};

// --prompt TEXT --chat: one user message as a /v1/chat/completions body, parsed like any request; the sampling
// flags of the command line replace the body's defaults.
bool chat_request(const Options& o, Request* out, std::string* error) {
  nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", o.prompt}}}}};
  if (!o.thinking.empty()) body["thinking"] = {{"type", o.thinking == "on" ? "enabled" : "disabled"}};
  const SamplingParams sampling = out->sampling;
  if (!parse_request(body.dump(), Endpoint::kChatCompletions, out, error)) return false;
  out->sampling = sampling;
  return true;
}

// Returns -1 to go on, otherwise the exit code.
int parse_options(int argc, char** argv, Options& o) {
  o.single.sampling.max_tokens = 64;
  o.single.sampling.temperature = 0.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (const FlagParse f = parse_engine_flag("generate", argc, argv, i, o.eo); f != FlagParse::kNotEngineFlag) {
      if (f == FlagParse::kError) return 2;
      continue;
    }
    if (a == "--chat") { o.chat = true; continue; }
    if (a == "--resume") { o.resume = true; continue; }
    if (a == "--ignore-eos") { o.single.sampling.ignore_eos = true; continue; }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "generate: option '%s' needs a value (or is unknown)\n", a.c_str());
      usage(stderr);
      return 2;
    }
    const std::string v = argv[++i];
    bool ok = true;
    if (a == "--input") o.input = v;
    else if (a == "--output") o.output = v;
    else if (a == "--prompt") {
      o.prompt = v;
      o.has_prompt = true;
      if (v.empty()) {
        std::fprintf(stderr, "generate: --prompt expects a non-empty text, found ''\n");
        return 2;
      }
    } else if (a == "--thinking") {
      o.thinking = v;
      if (v != "on" && v != "off") {
        std::fprintf(stderr, "generate: --thinking expects on or off, found '%s'\n", v.c_str());
        return 2;
      }
    }
    else if (a == "--max-tokens") {
      int64_t max_tokens = 0;
      ok = parse_int_flag("generate", a, v, 1, LLONG_MAX, &max_tokens);
      o.single.sampling.max_tokens = max_tokens;
    }
    else if (a == "--temperature") ok = parse_real_flag("generate", a, v, 0, 1e6, &o.single.sampling.temperature);
    else if (a == "--top-p") ok = parse_real_flag("generate", a, v, 0, 1, &o.single.sampling.top_p);
    else if (a == "--top-k") ok = parse_int_flag("generate", a, v, -1, INT32_MAX, &o.single.sampling.top_k);
    else {
      std::fprintf(stderr, "generate: unknown option '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
    if (!ok) return 2;
  }
  if (o.eo.model_dir.empty() || (o.input.empty() == !o.has_prompt) || (!o.input.empty() && o.output.empty())) {
    std::fprintf(stderr, "generate: needs --model and either --input with --output, or --prompt\n");
    usage(stderr);
    return 2;
  }
  if (!o.thinking.empty() && !o.chat) {
    std::fprintf(stderr, "generate: --thinking applies to --prompt with --chat (a request body sets \"thinking\")\n");
    return 2;
  }
  if (o.resume && o.input.empty()) {
    std::fprintf(stderr, "generate: --resume needs --input/--output\n");
    return 2;
  }
  return -1;
}

struct Line {
  std::string custom_id;
  std::string fingerprint;            // request_fingerprint() of the input line (success records carry it)
  std::optional<std::string> record;  // filled when done (success or error)
  bool failed = false;
  std::string error;                  // the message of an error record
};

// Reads the input file (before the model is loaded, so that a bad path fails at once).
bool read_input(const std::string& path, std::vector<std::string>* texts) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::fprintf(stderr, "generate: input %s is a directory\n", path.c_str());
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "generate: cannot open %s\n", path.c_str());
    return false;
  }
  for (std::string text; std::getline(in, text);) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    texts->push_back(std::move(text));
  }
  if (in.bad()) {
    std::fprintf(stderr, "generate: error reading %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  Options o;
  if (int rc = parse_options(argc, argv, o); rc >= 0) return rc;
  const bool batch = o.prompt.empty();
  const bool writer = writes_results();  // one process per rank: rank 0 alone writes the results
  std::string err;
  if (int32_t rank = 0, world = 1; o.resume && process_rank(&rank, &world, &err) && world > 1) {
    std::fprintf(stderr, "generate: --resume is not implemented with one process per rank (WORLD_SIZE=%d): only rank "
                         "0 reads the earlier output\n", int(world));
    return 2;
  }
  std::vector<std::string> texts;
  BatchOutput output;
  if (batch && (!check_output_is_not_input(o.input, o.output, &err) || !read_input(o.input, &texts) ||
                (writer && !output.open(o.output, o.resume, &err)))) {
    if (!err.empty()) std::fprintf(stderr, "generate: %s\n", err.c_str());
    return 2;
  }
  std::unique_ptr<Engine> engine = Engine::create(o.eo, &err);
  if (!engine) {
    std::fprintf(stderr, "generate: %s\n", err.c_str());
    return 2;
  }
  std::fprintf(stderr, "model %s on %s, max_model_len %lld, steps %s\n", o.eo.model_dir.c_str(),
               engine->backend_name().c_str(), (long long)engine->max_model_len(), engine->step_mode().c_str());

  // ---- requests ----
  std::vector<Line> lines;
  std::map<uint64_t, size_t> line_of;
  bool write_failed = false;
  auto finish_line = [&](size_t li, std::string record, bool failed) {
    lines[li].record = std::move(record);
    lines[li].failed = failed;
    if (batch && writer && !write_failed && !output.add(*lines[li].record, &err)) {
      write_failed = true;
      std::fprintf(stderr, "generate: %s\n", err.c_str());
    }
  };
  auto fail = [&](size_t li, const std::string& code, const std::string& msg) {
    lines[li].error = msg;
    finish_line(li, batch_error_line(li + 1, lines[li].custom_id, code, msg), true);
  };
  // Constrained lines compile their grammars on the engine's pool (Engine::prepare_async) and are queued when
  // ready, in input order among the ready ones; the other lines run meanwhile, so a slow grammar holds only its own.
  struct Deferred {
    size_t li;
    Request request;
    std::shared_future<PrepareResult> ready;
  };
  std::deque<Deferred> deferred;
  auto admit_ready = [&](bool block) {
    if (block && !deferred.empty()) deferred.front().ready.wait_for(std::chrono::milliseconds(20));
    for (auto it = deferred.begin(); it != deferred.end();) {
      if (it->ready.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      const PrepareResult& pr = it->ready.get();
      const size_t li = it->li;
      uint64_t id = 0;
      if (!pr.ok)
        fail(li, "invalid_request", fmt::format("line {}: {}", li + 1, pr.error));
      else if (id = engine->submit(it->request, &err); !id)
        fail(li, "invalid_request", fmt::format("line {}: {}", li + 1, err));
      else
        line_of[id] = li;
      it = deferred.erase(it);
    }
  };
  size_t resumed = 0, changed = 0;
  if (!batch) {
    if (o.chat) {
      if (!chat_request(o, &o.single, &err)) {
        std::fprintf(stderr, "generate: %s\n", err.c_str());
        return 2;
      }
    } else {
      o.single.prompt_text = o.prompt;
    }
    lines.push_back({"prompt", "", std::nullopt, false, ""});
    const uint64_t id = engine->submit(o.single, &err);
    if (!id) {
      std::fprintf(stderr, "generate: %s\n", err.c_str());
      return 2;
    }
    line_of[id] = 0;
  } else {
    std::set<std::string> seen_ids;
    lines.resize(texts.size());
    for (size_t li = 0; li < texts.size() && !write_failed; ++li) {
      const size_t lineno = li + 1;
      BatchLine bl;
      const bool ok = parse_batch_line(texts[li], lineno, &bl, &err);
      lines[li].custom_id = bl.custom_id;
      if (!ok) {
        fail(li, "invalid_request", err);
        continue;
      }
      lines[li].fingerprint = request_fingerprint(texts[li]);  // after the parse: its nesting limit was checked
      if (!seen_ids.insert(bl.custom_id).second) {
        fail(li, "invalid_request", fmt::format("line {}: duplicate custom_id \"{}\"", lineno, bl.custom_id));
        continue;
      }
      if (auto it = output.resumed().find(bl.custom_id); it != output.resumed().end()) {
        if (it->second.fingerprint == lines[li].fingerprint) {
          lines[li].record = it->second.line;  // already in the partial / output file: not written again
          ++resumed;
          continue;
        }
        ++changed;  // the request differs from the one that made the record (or the record has no fingerprint)
      }
      if (bl.request.structured.active()) {
        std::shared_future<PrepareResult> ready = engine->prepare_async(bl.request);
        deferred.push_back({li, std::move(bl.request), std::move(ready)});
        continue;
      }
      const uint64_t id = engine->submit(bl.request, &err);
      if (!id) {
        fail(li, "invalid_request", fmt::format("line {}: {}", lineno, err));
        continue;
      }
      line_of[id] = li;
    }
    texts.clear();
    if (resumed) std::fprintf(stderr, "resume: %zu records reused from an earlier run\n", resumed);
    if (changed)
      std::fprintf(stderr, "resume: %zu lines changed since the earlier run (a different request under the same "
                   "custom_id): run again, their old records are replaced\n", changed);
  }

  // ---- run ----
  install_stop_handlers();
  const bool tty = isatty(STDERR_FILENO);
  const size_t total = line_of.size() + deferred.size();
  size_t done = 0;
  int64_t in_tokens = 0, out_tokens = 0;
  std::vector<double> ttft, tpot;
  double last_report = 0;
  const double t_start = engine->now_s();
  std::vector<RequestResult> single;
  while ((engine->has_unfinished() || !deferred.empty()) && !g_signal && !write_failed) {
    admit_ready(!engine->has_unfinished());
    if (!engine->has_unfinished()) continue;
    if (!engine->step(&err)) {
      // A model failure ends the run; every request still pending gets the error, finished ones keep results.
      std::fprintf(stderr, "generate: step failed: %s\n", err.c_str());
      for (auto& [id, li] : line_of)
        if (!lines[li].record) fail(li, "engine_error", err);
      for (const Deferred& d : deferred) fail(d.li, "engine_error", err);
      break;
    }
    for (RequestResult& r : engine->take_finished()) {
      const size_t li = line_of[r.id];
      in_tokens += r.prompt_tokens;
      out_tokens += r.completion_tokens;
      ++done;
      if (!r.error.empty()) {
        fail(li, "model_error", fmt::format("line {}: {}", li + 1, r.error));
        continue;
      }
      if (r.first_token_s >= 0) ttft.push_back(r.first_token_s - r.arrival_s);
      // Per-output-token latency after the first token, per sample of the request.
      const int64_t per_sample = r.completion_tokens / std::max<int64_t>(1, int64_t(r.completions.size()));
      if (per_sample > 1 && r.first_token_s >= 0) tpot.push_back((r.finish_s - r.first_token_s) / double(per_sample - 1));
      const std::string record = batch_success_line(li + 1, lines[li].custom_id, r);
      finish_line(li, with_fingerprint(record, lines[li].fingerprint), false);
      if (!batch) single.push_back(std::move(r));
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
  const int sig = g_signal;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (sig || write_failed) {
    // Unfinished lines are recorded as aborted; a rerun with --resume computes exactly these.
    const std::string why = sig ? fmt::format("interrupted by {} before this request finished; rerun with --resume",
                                              sig == SIGINT ? "SIGINT" : "SIGTERM")
                                : "the run stopped because the output could not be written";
    size_t aborted = 0;
    for (size_t li = 0; li < lines.size(); ++li)
      if (!lines[li].record) {
        lines[li].record = batch_error_line(li + 1, lines[li].custom_id, "aborted", fmt::format("line {}: {}", li + 1, why));
        lines[li].failed = true;
        ++aborted;
      }
    if (sig) std::fprintf(stderr, "generate: interrupted: %zu finished, %zu aborted\n", done, aborted);
  }

  // ---- output ----
  size_t failed = 0;
  for (const Line& l : lines) failed += l.failed;
  int rc = failed ? 1 : 0;
  if (!batch) {
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
      std::fprintf(stderr, "generate: %s\n", lines[0].error.c_str());
    }
    if (std::fflush(stdout) != 0) rc = 2;
  } else if (!write_failed) {
    std::vector<std::string> records;
    records.reserve(lines.size());
    for (Line& l : lines) records.push_back(std::move(*l.record));
    if (writer && !output.finish(records, &err)) {
      std::fprintf(stderr, "generate: %s\n", err.c_str());
      rc = 2;
    }
  } else {
    rc = 2;
  }
  std::fprintf(stderr,
               "summary: %zu requests (%zu failed%s), %lld input tokens, %lld output tokens, %.2f s wall, "
               "%.1f output tok/s, %.1f total tok/s\n"
               "         TTFT p50/p90/p99 %s, per-token latency p50/p90/p99 %s\n",
               lines.size(), failed, resumed ? fmt::format(", {} resumed", resumed).c_str() : "", (long long)in_tokens,
               (long long)out_tokens, wall, wall > 0 ? double(out_tokens) / wall : 0.0,
               wall > 0 ? double(in_tokens + out_tokens) / wall : 0.0, latency_ms(ttft).c_str(), latency_ms(tpot).c_str());
  const EngineStats es = engine->stats();
  if (es.graphs_at_start + es.graphs_in_run > 0)
    std::fprintf(stderr, "         step graphs: %lld captured at start-up (graph warm-up %.2f s), %lld during the run%s\n",
                 (long long)es.graphs_at_start, es.graph_warmup_seconds, (long long)es.graphs_in_run,
                 es.drafter_graphs_at_start + es.drafter_graphs_in_run > 0
                     ? fmt::format("; drafter graphs: {} at start-up, {} during the run", es.drafter_graphs_at_start,
                                   es.drafter_graphs_in_run).c_str()
                     : "");
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
    std::fprintf(stderr, "         drafts verified per round %.3f, drafted per round %.3f; cost-model steps %lld (mean "
                 "verify length %.2f)\n", sm.rounds ? double(sm.verified_tokens - sm.rounds) / double(sm.rounds) : 0.0,
                 sm.rounds ? double(sm.drafted_tokens) / double(sm.rounds) : 0.0, (long long)sm.scheduled_rounds,
                 sm.scheduled_rounds ? double(sm.scheduled_verify_length) / double(sm.scheduled_rounds) : 0.0);
    std::fprintf(stderr, "         gate probes %lld, steps at rest %lld, step graphs captured %lld\n",
                 (long long)sm.gate_probes, (long long)sm.rest_steps, (long long)sm.graphs_captured);
    if (sm.one_wait_rounds > 0)
      std::fprintf(stderr, "         one-wait rounds %lld, their proposals used %lld; chained verify steps %lld, "
                   "wasted %lld\n", (long long)sm.one_wait_rounds, (long long)sm.one_wait_proposals,
                   (long long)sm.chained_steps, (long long)sm.chained_wasted);
  }
  const PrefixCacheMetrics pm = engine->stats().prefix_cache;
  if (pm.mode != "off")
    std::fprintf(stderr,
                 "prefix cache: %s, %lld lookups, %lld of %lld tokens hit (%lld exact hits, %lld bounded), %lld replayed, "
                 "%lld evictions, %lld snapshots (%.1f MiB of %.1f MiB)\n",
                 pm.mode.c_str(), (long long)pm.lookups, (long long)pm.hit_tokens, (long long)pm.lookup_tokens,
                 (long long)pm.exact_hits, (long long)pm.bounded_hits, (long long)pm.replayed_tokens, (long long)pm.evictions,
                 (long long)pm.snapshots, double(pm.snapshot_bytes) / 1048576.0, double(pm.snapshot_budget_bytes) / 1048576.0);
  if (pm.mode != "off" && pm.host_budget_bytes > 0)
    std::fprintf(stderr,
                 "prefix cache host tier: %lld blocks (%lld tokens) restored by hits, %lld spilled, %lld dropped, "
                 "%.1f MiB to host, %.1f MiB to device, %.1f MiB of %.1f MiB held\n",
                 (long long)pm.host_hit_blocks, (long long)pm.host_hit_tokens, (long long)pm.host_spills,
                 (long long)pm.host_evictions, double(pm.bytes_to_host) / 1048576.0, double(pm.bytes_to_device) / 1048576.0,
                 double(pm.host_bytes) / 1048576.0, double(pm.host_budget_bytes) / 1048576.0);
  if (sig) return 128 + sig;
  return rc;
}

}  // namespace dsinfer::cli
