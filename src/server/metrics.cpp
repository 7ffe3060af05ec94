// Metrics (see metrics.h). Names follow vLLM's where one exists, with the dsinfer_ prefix.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace dsinfer::server {

void Histogram::observe(double x, uint64_t times) {
  size_t i = 0;
  while (i < bounds.size() && x > bounds[i]) ++i;
  counts[i] += times;
  sum += x * double(times);
  count += times;
}

namespace {

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};

void render_histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cum += h.counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cum);
  }
  cum += h.counts.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name, h.sum, name, h.count);
}

void render_value(std::string& out, const char* name, const char* type, const char* help, double v) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}

}  // namespace

Metrics::Metrics() : ttft_(kLatencyBuckets), itl_(kLatencyBuckets), e2e_(kLatencyBuckets) {}

void Metrics::count_http(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++http_[{endpoint, status}];
}

void Metrics::count_finished(const RequestResult& r, double e2e_s) {
  std::lock_guard<std::mutex> lk(mu_);
  prompt_tokens_ += r.prompt_tokens;
  generation_tokens_ += r.completion_tokens;
  for (const Completion& c : r.completions) ++finished_[c.finish_reason];
  e2e_.observe(e2e_s);
}

void Metrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lk(mu_);
  ttft_.observe(s);
}

void Metrics::observe_inter_token(double s, uint64_t tokens) {
  if (tokens == 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  itl_.observe(s / double(tokens), tokens);
}

void Metrics::set_engine_stats(const EngineStats& st, int32_t queued_in_server) {
  std::lock_guard<std::mutex> lk(mu_);
  engine_ = st;
  queued_ = queued_in_server;
}

EngineStats Metrics::engine_stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return engine_;
}

uint64_t Metrics::http_count(const std::string& endpoint, int status) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = http_.find({endpoint, status});
  return it == http_.end() ? 0 : it->second;
}

std::string Metrics::render(bool draining) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string out;
  out += "# HELP dsinfer_http_requests_total HTTP requests by endpoint and status code.\n"
         "# TYPE dsinfer_http_requests_total counter\n";
  for (const auto& [key, n] : http_)
    out += fmt::format("dsinfer_http_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  out += "# HELP dsinfer_request_success_total Finished completions (choices) by finish reason.\n"
         "# TYPE dsinfer_request_success_total counter\n";
  for (const auto& [reason, n] : finished_)
    out += fmt::format("dsinfer_request_success_total{{finished_reason=\"{}\"}} {}\n", reason, n);
  render_value(out, "dsinfer_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", double(prompt_tokens_));
  render_value(out, "dsinfer_generation_tokens_total", "counter", "Generated tokens of finished requests.",
               double(generation_tokens_));
  render_histogram(out, "dsinfer_time_to_first_token_seconds", "Time from request arrival to its first token.", ttft_);
  render_histogram(out, "dsinfer_inter_token_latency_seconds", "Time between consecutive output tokens.", itl_);
  render_histogram(out, "dsinfer_e2e_request_latency_seconds", "Time from request arrival to its end.", e2e_);
  render_value(out, "dsinfer_num_requests_running", "gauge", "Requests with a sequence holding state.",
               engine_.running_requests);
  render_value(out, "dsinfer_num_requests_waiting", "gauge", "Requests queued (engine and server inbox).",
               engine_.waiting_requests + queued_);
  render_value(out, "dsinfer_state_cache_usage_ratio", "gauge", "Fraction of state-cache blocks in use.",
               engine_.state_blocks > 0 ? double(engine_.state_blocks_used) / engine_.state_blocks : 0.0);
  render_value(out, "dsinfer_state_cache_blocks_used", "gauge", "State-cache blocks in use.", engine_.state_blocks_used);
  render_value(out, "dsinfer_state_cache_slots_used", "gauge", "State-cache sequence slots in use.", engine_.state_slots_used);
  render_value(out, "dsinfer_state_cache_bytes_used", "gauge", "State-cache bytes in use.", double(engine_.state_bytes_used));
  render_value(out, "dsinfer_state_cache_bytes_free", "gauge", "State-cache bytes free (budget minus used).",
               double(std::max<int64_t>(0, engine_.state_bytes_budget - engine_.state_bytes_used)));
  render_value(out, "dsinfer_server_draining", "gauge", "1 while the server drains (new requests get 503).",
               draining ? 1.0 : 0.0);
  render_value(out, "dsinfer_num_preemptions_total", "counter", "Sequences preempted (recomputed later).",
               double(engine_.num_preemptions));
  const PrefixCacheMetrics& pc = engine_.prefix_cache;
  render_value(out, "dsinfer_prefix_cache_lookups_total", "counter", "Admissions that looked up a cached prefix.",
               double(pc.lookups));
  render_value(out, "dsinfer_prefix_cache_queried_tokens_total", "counter", "Tokens of the admissions that looked up.",
               double(pc.lookup_tokens));
  render_value(out, "dsinfer_prefix_cache_hit_tokens_total", "counter", "Prefill tokens skipped by prefix-cache hits.",
               double(pc.hit_tokens));
  render_value(out, "dsinfer_prefix_cache_exact_hits_total", "counter", "Hits resumed from a state snapshot.",
               double(pc.exact_hits));
  render_value(out, "dsinfer_prefix_cache_bounded_hits_total", "counter", "Hits resumed by sliding-window replay.",
               double(pc.bounded_hits));
  render_value(out, "dsinfer_prefix_cache_replayed_tokens_total", "counter", "Tokens recomputed by bounded replay.",
               double(pc.replayed_tokens));
  render_value(out, "dsinfer_prefix_cache_evictions_total", "counter", "Cached blocks evicted (LRU).", double(pc.evictions));
  render_value(out, "dsinfer_prefix_cache_blocks", "gauge", "Blocks held by the prefix cache.", double(pc.cached_blocks));
  render_value(out, "dsinfer_prefix_cache_snapshot_bytes", "gauge", "Bytes of state snapshots held.",
               double(pc.snapshot_bytes));
  render_value(out, "dsinfer_prefix_cache_host_hit_blocks_total", "counter", "Blocks restored from the host tier by hits.",
               double(pc.host_hit_blocks));
  render_value(out, "dsinfer_prefix_cache_host_hit_tokens_total", "counter", "Tokens of the blocks restored from the host tier.",
               double(pc.host_hit_tokens));
  render_value(out, "dsinfer_prefix_cache_host_spills_total", "counter", "Evicted blocks moved to the host tier.",
               double(pc.host_spills));
  render_value(out, "dsinfer_prefix_cache_host_evictions_total", "counter", "Blocks dropped from the host tier (LRU).",
               double(pc.host_evictions));
  render_value(out, "dsinfer_prefix_cache_host_bytes_to_host_total", "counter", "Bytes copied device to host tier.",
               double(pc.bytes_to_host));
  render_value(out, "dsinfer_prefix_cache_host_bytes_to_device_total", "counter", "Bytes copied host tier to device.",
               double(pc.bytes_to_device));
  render_value(out, "dsinfer_prefix_cache_host_bytes", "gauge", "Bytes of blocks held in the host tier.",
               double(pc.host_bytes));
  // Structured outputs: grammar compiles (cache misses) and their wall time, the compiled-grammar cache.
  const GrammarMetrics& gm = engine_.grammar;
  render_value(out, "dsinfer_grammar_compiles_total", "counter", "Structured-output grammars compiled (cache misses).",
               double(gm.compiles));
  render_value(out, "dsinfer_grammar_compile_seconds_total", "counter", "Wall time spent compiling grammars.",
               gm.compile_seconds);
  render_value(out, "dsinfer_grammar_cache_hits_total", "counter", "Constrained requests served from the cache.",
               double(gm.cache_hits));
  render_value(out, "dsinfer_grammar_cache_bytes", "gauge", "Bytes of compiled grammars held by the cache.",
               double(gm.cache_bytes));
  // Speculative decoding (vLLM's spec_decode_* counters); all zero when it is off.
  const SpeculativeMetrics& sp = engine_.speculative;
  render_value(out, "dsinfer_spec_decode_num_drafts_total", "counter", "Decode rounds of one sequence with drafts.",
               double(sp.rounds));
  render_value(out, "dsinfer_spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed.",
               double(sp.drafted_tokens));
  render_value(out, "dsinfer_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.",
               double(sp.accepted_tokens));
  render_value(out, "dsinfer_spec_decode_num_emitted_tokens_total", "counter",
               "Tokens emitted by speculative rounds (accepted drafts + correction / bonus).", double(sp.emitted_tokens));
  out += "# HELP dsinfer_spec_decode_num_accepted_tokens_per_pos_total Drafts accepted at each draft position.\n"
         "# TYPE dsinfer_spec_decode_num_accepted_tokens_per_pos_total counter\n";
  for (size_t k = 0; k < sp.accepted_per_position.size(); ++k)
    out += fmt::format("dsinfer_spec_decode_num_accepted_tokens_per_pos_total{{position=\"{}\"}} {}\n", k,
                       sp.accepted_per_position[k]);
  return out;
}

}  // namespace dsinfer::server
