// Router (see handlers.h): every path of the server and its errors.
#include "server/handlers.h"

#include <ctime>
#include <limits>
#include <nlohmann/json.hpp>

namespace dsinfer::server {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* reason_phrase_type(int status) {
  switch (status) {
    case 400: case 405: case 413: case 431: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 503: return "service_unavailable";
    default: return "internal_error";
  }
}

std::string sse(const std::string& data) { return "data: " + data + "\n\n"; }

constexpr const char* kDrainingMessage = "the server is draining: it finishes its requests in flight, then exits";

}  // namespace

std::string error_json(const std::string& message, const std::string& type, const std::string& param, const std::string& code) {
  return dump({{"error",
                {{"message", message},
                 {"type", type},
                 {"param", param.empty() ? json(nullptr) : json(param)},
                 {"code", code.empty() ? json(nullptr) : json(code)}}}});
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Runs over the expected key's length whatever the input; the length difference is folded in.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ b[i]);
  return diff == 0;
}

Router::Router(EngineLoop& loop, Metrics& metrics, const ServerOptions& options, PdWorker* pd)
    : loop_(loop), metrics_(metrics), pd_(pd), opts_(options), model_name_(loop.engine().model_name()),
      created_(int64_t(std::time(nullptr))) {
  // Read once, before the engine thread starts (the Engine is not thread-safe; these do not change).
  info_.model_name = model_name_;
  info_.backend = loop.engine().backend_name();
  info_.step_mode = loop.engine().step_mode();
  info_.max_model_len = loop.max_model_len();
  info_.max_waiting_requests = options.max_waiting_requests;
  info_.role = pd ? pd_role_name(pd->role()) : "both";
  const EngineStats st = loop.engine().stats();
  info_.state_block_size = st.state_block_size;
  info_.state_block_bytes = st.state_block_bytes;
  info_.state_slot_bytes = st.state_slot_bytes;
  if (const Result<LoadFormat> f = parse_load_format(options.get_load_format); f.is_ok()) load_format_ = f.value();
}

void Router::send_error(ResponseWriter& w, const std::string& endpoint, int status, const std::string& message,
                        const std::string& type, const std::string& param, const std::string& code, const Headers& extra) {
  metrics_.count_http(endpoint, status);
  w.send(status, "application/json", error_json(message, type.empty() ? reason_phrase_type(status) : type, param, code), extra);
}

std::string Router::models_json() const {
  return dump({{"object", "list"},
               {"data", json::array({{{"id", model_name_},
                                      {"object", "model"},
                                      {"created", created_},
                                      {"owned_by", "dsinfer"},
                                      {"max_model_len", loop_.max_model_len()}}})}});
}

void Router::handle(const HttpRequest& req, ResponseWriter& w) {
  struct Route {
    const char* path;
    const char* method;
  };
  static const Route kRoutes[] = {{"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
                                  {"/health", "GET"}, {"/live", "GET"}, {"/metrics", "GET"},
                                  // what routers read from a worker (server/fleet.h, docs/fleet.md)
                                  {"/get_load", "GET"}, {"/load", "GET"}, {"/get_model_info", "GET"},
                                  {"/model_info", "GET"}, {"/get_server_info", "GET"}, {"/server_info", "GET"},
                                  {"/tokenize", "POST"}, {"/detokenize", "POST"}, {"/flush_cache", "POST"},
                                  {"/health_generate", "GET"}, {"/v1/chat/completions/render", "POST"},
                                  {"/v1/completions/render", "POST"}};
  const Route* route = nullptr;
  for (const Route& r : kRoutes)
    if (req.path == r.path) route = &r;
  if (!route) return send_error(w, "other", 404, "no route for " + req.method + " " + req.path, "", "", "not_found");
  const std::string endpoint = route->path;
  if (req.method != route->method && !(req.method == "HEAD" && std::string(route->method) == "GET"))
    return send_error(w, endpoint, 405, req.method + " is not allowed on " + endpoint + " (use " + route->method + ")", "",
                      "", "method_not_allowed", {{"Allow", route->method}});
  if (endpoint.rfind("/v1/", 0) == 0 && !opts_.api_key.empty()) {
    const std::string prefix = "Bearer ";
    const bool bearer = req.authorization.rfind(prefix, 0) == 0;
    if (!bearer || !constant_time_equal(req.authorization.substr(bearer ? prefix.size() : 0), opts_.api_key))
      return send_error(w, endpoint, 401, "invalid or missing API key (send 'Authorization: Bearer <key>')", "", "",
                        "invalid_api_key", {{"WWW-Authenticate", "Bearer"}});
  }
  if (endpoint == "/v1/completions") return completions(req, Endpoint::kCompletions, endpoint, w);
  if (endpoint == "/v1/chat/completions") return completions(req, Endpoint::kChatCompletions, endpoint, w);
  if (endpoint == "/v1/completions/render" || endpoint == "/v1/chat/completions/render" || endpoint == "/tokenize")
    return tokenize(req, endpoint, w);
  if (endpoint == "/detokenize") return detokenize(req, w);
  if (endpoint == "/flush_cache") return flush_cache(w);
  if (endpoint == "/health_generate") return health_generate(w);
  get(endpoint, w);
}

void Router::tokenize(const HttpRequest& hr, const std::string& endpoint, ResponseWriter& w) {
  const json body = json::parse(hr.body, nullptr, false);
  if (!body.is_object()) return send_error(w, endpoint, 400, "the " + endpoint + " body must be a JSON object", "");
  const bool chat = endpoint == "/tokenize" ? body.contains("messages") : endpoint == "/v1/chat/completions/render";
  const Endpoint ep = chat ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  if (endpoint == "/tokenize" && !chat && !body.contains("prompt"))
    return send_error(w, endpoint, 400, "a /tokenize body needs 'prompt' (completions) or 'messages' (chat)", "",
                      "prompt");
  Request req;
  std::string err, param;
  if (!parse_request(hr.body, ep, &req, &err, &param)) return send_error(w, endpoint, 400, err, "", param);
  if (!serves_model(req, endpoint, w)) return;
  std::vector<int32_t> ids;
  if (!loop_.engine().tokenize(req, &ids, &err, &param)) return send_error(w, endpoint, 400, err, "", param);
  metrics_.count_http(endpoint, 200);
  if (endpoint == "/tokenize") {
    w.send(200, "application/json",
           dump({{"count", ids.size()}, {"max_model_len", loop_.max_model_len()}, {"tokens", ids}, {"token_strs", nullptr}}));
    return;
  }
  // vLLM's render: the request as the engine would run it (a chat request: one; completions: one per prompt).
  const json rendered = {{"model", model_name_}, {"token_ids", ids}, {"features", nullptr}};
  w.send(200, "application/json", dump(chat ? rendered : json::array({rendered})));
}

void Router::detokenize(const HttpRequest& hr, ResponseWriter& w) {
  const std::string endpoint = "/detokenize";
  const json body = json::parse(hr.body, nullptr, false);
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
    return send_error(w, endpoint, 400, "a /detokenize body is a JSON object with 'tokens', an array of token ids", "",
                      "tokens");
  std::vector<int32_t> ids;
  for (const json& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return send_error(w, endpoint, 400, "'tokens' must hold token ids (non-negative integers), found " + dump(t),
                        "", "tokens");
    ids.push_back(t.get<int32_t>());
  }
  std::string text, err;
  if (!loop_.engine().detokenize(ids, &text, &err)) return send_error(w, endpoint, 400, err, "", "tokens");
  metrics_.count_http(endpoint, 200);
  w.send(200, "application/json", dump({{"prompt", text}}));
}

void Router::flush_cache(ResponseWriter& w) {
  const std::string endpoint = "/flush_cache";
  int64_t dropped = -1;
  std::string err = "the server is shutting down";
  loop_.run_on_engine([&](Engine& e) { dropped = e.flush_prefix_cache(&err); });
  // SGLang answers 400 when requests are running or waiting (nothing flushed); so do we, with the reason.
  if (dropped < 0) return send_error(w, endpoint, 400, "the prefix cache was not flushed: " + err, "", "", "not_flushed");
  metrics_.count_http(endpoint, 200);
  w.send(200, "application/json", dump({{"flushed", true}, {"dropped_blocks", dropped}}));
}

void Router::health_generate(ResponseWriter& w) {
  const std::string endpoint = "/health_generate";
  if (loop_.refusing())
    return send_error(w, endpoint, 503, kDrainingMessage, "",
                      "", "server_draining", {{"Retry-After", "1"}});
  auto job = std::make_shared<Job>();
  std::string err, param;
  // One token from a one-token prompt: works with or without a tokenizer.
  const bool parsed = parse_request(R"({"prompt": [0], "max_tokens": 1, "temperature": 0})", Endpoint::kCompletions,
                                    &job->request, &err, &param);
  if (!parsed) return send_error(w, endpoint, 500, "internal error: " + err, "");
  loop_.submit(job);
  Event e;
  do {
    if (!next_event(job, e, w)) return metrics_.count_http(endpoint, 499);
  } while (e.kind == Event::Kind::kStarted || e.kind == Event::Kind::kToken);
  if (e.kind == Event::Kind::kError)
    return send_error(w, endpoint, 503, "a 1-token generation failed: " + e.message, "", "", "generation_failed");
  metrics_.count_http(endpoint, 200);
  w.send(200, "application/json", "{}");
}

bool Router::serves_model(const Request& req, const std::string& endpoint, ResponseWriter& w) {
  if (req.model.empty() || req.model == model_name_) return true;
  send_error(w, endpoint, 404, "the model '" + req.model + "' does not exist (this server serves '" + model_name_ + "')",
             "", "model", "model_not_found");
  return false;
}

WorkerLoad Router::worker_load() const {
  WorkerLoad l;
  l.in_flight = loop_.in_flight();
  l.draining = loop_.draining();
  l.stats = metrics_.engine_stats();
  return l;
}


void Router::get(const std::string& endpoint, ResponseWriter& w) {
  const char* kJson = "application/json";
  if (endpoint == "/health") {
    // Readiness: a router stops sending here on 503 (draining, or an engine that cannot run).
    if (const std::string down = loop_.unavailable_reason(); !down.empty())
      return send_error(w, endpoint, 503, "the engine cannot serve requests: " + down, "", "", "engine_unavailable");
    if (loop_.draining())
      return send_error(w, endpoint, 503, kDrainingMessage, "",
                        "", "server_draining", {{"Retry-After", "1"}});
    metrics_.count_http(endpoint, 200);
    w.send(200, kJson, "{}");
    return;
  }
  metrics_.count_http(endpoint, 200);
  if (endpoint == "/live") w.send(200, kJson, "{}");
  else if (endpoint == "/metrics")
    w.send(200, "text/plain; version=0.0.4; charset=utf-8",
           metrics_.render(loop_.draining()) + (pd_ ? pd_->metrics_text() : std::string()));
  else if (endpoint == "/v1/models") w.send(200, kJson, models_json());
  else if (endpoint == "/get_load" && load_format_ == LoadFormat::kSglang)
    w.send(200, kJson, sglang_load_json(worker_load(), info_.state_block_size));
  else if (endpoint == "/get_load" || endpoint == "/load") w.send(200, kJson, load_json(worker_load()));
  else if (endpoint == "/get_model_info" || endpoint == "/model_info") w.send(200, kJson, model_info_json(info_));
  else w.send(200, kJson, server_info_json(info_, worker_load()));  // /get_server_info, /server_info
}

bool Router::next_event(const std::shared_ptr<Job>& job, Event& e, ResponseWriter& w) {
  while (!job->channel->pop(e, std::chrono::milliseconds(50)))
    if (w.client_gone()) {
      loop_.cancel(job);
      return false;
    }
  return true;
}

void Router::completions(const HttpRequest& hr, Endpoint ep, const std::string& endpoint, ResponseWriter& w) {
  // Draining and refusing: refused before any work, with Retry-After, so that a router retries it on another replica.
  if (loop_.refusing())
    return send_error(w, endpoint, 503,
                      "the server is draining (shutting down after its requests in flight); retry elsewhere", "", "",
                      "server_draining", {{"Retry-After", "1"}});
  auto job = std::make_shared<Job>();
  Request& req = job->request;
  std::string err, param;
  if (!parse_request(hr.body, ep, &req, &err, &param)) return send_error(w, endpoint, 400, err, "", param);
  if (!serves_model(req, endpoint, w)) return;
  if (req.sampling.n > opts_.max_n)
    return send_error(w, endpoint, 400, fmt::format("n must be at most {} on this server, got {}", opts_.max_n, req.sampling.n), "", "n");
  if (int64_t(req.sampling.stop.size()) > opts_.max_stop_strings)
    return send_error(w, endpoint, 400, fmt::format("'stop' may hold at most {} strings, got {}", opts_.max_stop_strings,
                                                    req.sampling.stop.size()), "", "stop");
  for (size_t i = 0; i < req.sampling.stop.size(); ++i)
    if (req.sampling.stop[i].size() > opts_.max_stop_bytes)
      return send_error(w, endpoint, 400, fmt::format("'stop[{}]' is {} bytes long; the limit is {}", i,
                                                      req.sampling.stop[i].size(), opts_.max_stop_bytes), "", "stop");
  // The grammar compiles on the engine's compile pool (the one generate uses) while this connection waits for it:
  // the engine thread then finds it cached, and a slow compile delays only this request.
  if (req.structured.active()) {
    const PrepareResult prepared = loop_.engine().prepare_async(req).get();
    if (!prepared.ok) return send_error(w, endpoint, 400, prepared.error, "", prepared.error_param);
  }
  const EngineStats st = metrics_.engine_stats();
  if (loop_.in_flight() - st.running_requests >= opts_.max_waiting_requests)
    return send_error(w, endpoint, 503, fmt::format("the server is overloaded ({} requests waiting); retry later",
                                                    loop_.in_flight() - st.running_requests), "", "", "overloaded",
                      {{"Retry-After", "1"}});
  if (pd_ && pd_->exports(req)) job->export_state = true;
  if (pd_ && pd_->imports(req)) {  // pulled here, on this connection's thread: the engine thread never waits for it
    job->pd_import = true;
    job->pd.prefill_s = req.kv_transfer.prefill_s;
    job->pd.export_s = req.kv_transfer.export_s;
    job->import_blob = pd_->pull(req.kv_transfer, &job->pd);
  }
  loop_.submit(job);
  Event e;
  if (!next_event(job, e, w)) return metrics_.count_http(endpoint, 499);
  if (e.kind != Event::Kind::kStarted) {
    const Headers retry = e.http_status == 503 ? Headers{{"Retry-After", "1"}} : Headers{};
    return send_error(w, endpoint, e.http_status, e.message, e.error_type, e.param, "", retry);
  }
  if (req.stream) return stream(job, e.request_id, endpoint, w);
  while (true) {
    if (!next_event(job, e, w)) return metrics_.count_http(endpoint, 499);
    if (e.kind == Event::Kind::kError) return send_error(w, endpoint, e.http_status, e.message, e.error_type);
    if (e.kind != Event::Kind::kDone) continue;
    metrics_.count_http(endpoint, 200);
    w.send(200, "application/json", answer_json(*job, e.result));
    return;
  }
}

std::string Router::answer_json(const Job& job, const RequestResult& r) const {
  if (!job.export_state && !job.pd_import) return r.response_json;
  json a = json::parse(r.response_json);
  if (job.export_state) a["kv_transfer_params"] = json::parse(job.kv_transfer_params);
  if (job.pd_import) {
    const PdRecord& p = job.pd;
    a["dsinfer_pd"] = {{"resumed", p.imported},
                       {"fallback", p.fallback.empty() ? json(nullptr) : json(p.fallback)},
                       {"state_tokens", p.state_tokens},
                       {"state_bytes", p.state_bytes},
                       {"wire_bytes", p.wire_bytes},
                       {"prefill_s", p.prefill_s},
                       {"export_s", p.export_s},
                       {"transfer_s", p.transfer_s},
                       {"import_s", p.import_s},
                       {"first_decode_s", r.first_token_s >= 0 ? r.first_token_s - r.arrival_s : -1.0}};
  }
  return dump(a);
}

void Router::stream(const std::shared_ptr<Job>& job, uint64_t id, const std::string& endpoint, ResponseWriter& w) {
  StreamFormatter f(loop_.engine(), job->request, id);
  auto gone = [&] {
    loop_.cancel(job);  // the client is gone: free the request's state now
    metrics_.count_http(endpoint, 499);
  };
  if (!w.begin_stream(200, "text/event-stream")) return gone();
  for (const std::string& c : f.start())
    if (!w.write(sse(c))) return gone();
  Event e;
  while (true) {
    if (!next_event(job, e, w)) return metrics_.count_http(endpoint, 499);
    std::string out;
    if (e.kind == Event::Kind::kToken) {
      const std::string c = f.chunk(e.token);
      if (c.empty()) continue;
      out = sse(c);
    } else if (e.kind == Event::Kind::kDone) {
      const std::string u = f.usage_chunk(e.result);
      if (!u.empty()) out = sse(u);
      out += sse("[DONE]");
    } else {  // an engine failure after the head went out: an error event, then the end of the stream
      out = sse(error_json(e.message, e.error_type, "", "")) + sse("[DONE]");
    }
    if (!w.write(out)) return gone();
    if (e.kind != Event::Kind::kToken) break;
  }
  metrics_.count_http(endpoint, 200);
  w.end_stream();
}

}  // namespace dsinfer::server
