// Request handling independent of the HTTP library: routing, authentication, OpenAI error objects, limits,
// and the completions endpoints (JSON responses and server-sent-event streams). The connection code
// (http_server.cpp) parses HTTP and hands each request here with a ResponseWriter for its socket.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "dsinfer/server.h"
#include "server/engine_loop.h"
#include "server/fleet.h"
#include "server/metrics.h"

namespace dsinfer::server {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // the target without the query string
  std::string authorization;  // the Authorization header ("" when absent)
  std::string body;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response. False when the client is gone.
  virtual bool send(int status, const std::string& content_type, const std::string& body, const Headers& extra = {}) = 0;
  // A streamed response: the head (chunked transfer encoding), then pieces, then the end.
  virtual bool begin_stream(int status, const std::string& content_type) = 0;
  virtual bool write(const std::string& data) = 0;
  virtual bool end_stream() = 0;
  // True when the client has closed the connection (polled while a request waits for the engine).
  virtual bool client_gone() = 0;
};

// The OpenAI error object {"error": {"message", "type", "param", "code"}}.
std::string error_json(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code);
// Compares without an early exit (the time does not depend on where the strings differ).
bool constant_time_equal(const std::string& a, const std::string& b);

class Router {
 public:
  Router(EngineLoop& loop, Metrics& metrics, const ServerOptions& options, PdWorker* pd = nullptr);
  void handle(const HttpRequest& req, ResponseWriter& w);
  // An error response, counted in the metrics under `endpoint`.
  void send_error(ResponseWriter& w, const std::string& endpoint, int status, const std::string& message,
                  const std::string& type, const std::string& param = "", const std::string& code = "",
                  const Headers& extra = {});

 private:
  void completions(const HttpRequest& req, Endpoint ep, const std::string& endpoint, ResponseWriter& w);
  void stream(const std::shared_ptr<Job>& job, uint64_t id, const std::string& endpoint, ResponseWriter& w);
  // Waits for the job's next event; false (and the job cancelled) when the client went away.
  bool next_event(const std::shared_ptr<Job>& job, Event& e, ResponseWriter& w);
  std::string models_json() const;
  // False (after a 404 model_not_found) when the request names another model than the one served.
  bool serves_model(const Request& req, const std::string& endpoint, ResponseWriter& w);
  void get(const std::string& endpoint, ResponseWriter& w);  // every GET endpoint but /health_generate
  // vLLM's POST /tokenize (a completions "prompt" or chat "messages" body) and the render endpoints that
  // vllm-router calls before each request (POST /v1/chat/completions/render, /v1/completions/render: the prompt
  // token ids), and POST /detokenize ("tokens").
  void tokenize(const HttpRequest& req, const std::string& endpoint, ResponseWriter& w);
  void detokenize(const HttpRequest& req, ResponseWriter& w);
  void flush_cache(ResponseWriter& w);      // SGLang's POST /flush_cache: the prefix cache, when idle
  void health_generate(ResponseWriter& w);  // SGLang's GET /health_generate: a 1-token generation
  WorkerLoad worker_load() const;
  // The answer of a finished non-streamed request, with the P/D fields of its role added.
  std::string answer_json(const Job& job, const RequestResult& r) const;

  EngineLoop& loop_;
  Metrics& metrics_;
  PdWorker* pd_ = nullptr;
  ServerOptions opts_;
  std::string model_name_;
  int64_t created_ = 0;
  WorkerInfo info_;  // what /get_model_info and /get_server_info describe
  LoadFormat load_format_ = LoadFormat::kVllm;  // ServerOptions::get_load_format (Server::start refuses a bad one)
};

}  // namespace dsinfer::server
