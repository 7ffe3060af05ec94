// The OpenAI-compatible HTTP server behind `dsinfer serve`: POST /v1/chat/completions and /v1/completions (JSON
// or server-sent-event streams), GET /v1/models, /health, /metrics. HTTP/1.1 with keep-alive from Boost.Beast
// (header-only: the binary needs no HTTP library at run time), one thread per connection, and one engine thread
// that owns the Engine (server/engine_loop.h). Connection threads never wait for the engine thread; the engine
// thread never waits for a client.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dsinfer/engine.h"

namespace dsinfer::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                        // 0: an ephemeral port (see Server::port())
  std::string api_key;                    // non-empty: /v1/* needs "Authorization: Bearer <key>"
  size_t max_body_bytes = 8u << 20;       // larger bodies: 413
  size_t max_header_bytes = 16u << 10;    // larger header blocks: 431
  int32_t max_waiting_requests = 256;     // queued (not yet running) requests beyond this: 503 + Retry-After
  int32_t max_connections = 1024;         // open connections beyond this: 503, closed
  int32_t max_n = 16;                     // limits on request fields (400 naming the field)
  int32_t max_stop_strings = 16;
  size_t max_stop_bytes = 256;
  int idle_timeout_s = 60;                // keep-alive connections idle this long are closed
  int request_timeout_s = 30;             // a request's header and body must arrive within this (else 408)
  int write_timeout_s = 30;               // a client that accepts no data this long is dropped (and aborted)
  int drain_timeout_s = 60;               // SIGTERM (`dsinfer serve`): requests in flight get this long to finish
  int drain_grace_s = 0;                  // SIGTERM: /health is 503 this long before new requests are refused
  // Prefill/decode disaggregation (docs/fleet.md), vLLM's kv_transfer_params round trip: "both" serves whole requests
  // (kv_transfer_params ignored); "prefill" exports a request's prefix state when asked (do_remote_decode) and holds
  // it for the decode worker's pull on kv_transfer_host:kv_transfer_port (0: an ephemeral port); "decode" pulls the
  // state a request names (do_remote_prefill) and resumes from it, or prefills locally when that fails. Both need
  // the engine's prefix caching (snapshots).
  std::string role = "both";
  std::string kv_transfer_host = "127.0.0.1";  // the prefill worker's pull address (bound and announced)
  int kv_transfer_port = 0;
  double kv_transfer_ttl_s = 60;               // an exported state nobody pulled is dropped after this
  double kv_transfer_timeout_s = 30;           // a pull, in all (each wait for data: at most 5 s of it)
  std::string kv_transfer_fault;               // tests only, prefill side: "truncate:N", "corrupt:N" (byte N), "stall"
  // How prefix states move: "tcp" (kv_transfer's sockets) or "ucx" (the same framing over UCX endpoints,
  // server/pd_transport_ucx.h; libucp loaded at run time). Both workers of a pair must use the same one.
  std::string kv_transfer_backend = "tcp";
  // GET /get_load's shape (docs/fleet.md): "vllm", the object {"load": n, ...} vllm-router reads; "sglang", the list
  // of per-DP-rank objects whose "num_tokens" SGLang's gateway sums. Same path, so the fleet's router picks it.
  std::string get_load_format = "vllm";
};

class Server {
 public:
  Server(std::unique_ptr<Engine> engine, ServerOptions options);
  ~Server();  // stop()
  // Binds and listens, then starts the engine thread and the accept thread. False with the reason (naming the
  // address) in *error when it cannot listen.
  bool start(std::string* error);
  int port() const;  // the bound port (after start)
  int kv_transfer_port() const;  // role prefill: where decode workers pull prefix states (after start); else 0
  // Graceful drain (SIGTERM in `dsinfer serve`; docs/fleet.md), two steps that return at once and cannot be undone.
  // begin_drain(): GET /health answers 503 with Retry-After and every answer closes its connection, so a router
  // marks the replica down at its next health check; requests are still admitted (the router's in-flight choices
  // land). refuse_new() (implies begin_drain): new requests answer 503 server_draining with Retry-After (a router
  // retries them elsewhere). Requests in flight run to their end; in_flight() reaching 0 says the server may stop()
  // without aborting anything.
  void begin_drain();
  void refuse_new();
  int32_t in_flight() const;  // requests accepted and not yet answered in full by the engine
  // Stops accepting, aborts requests in flight (streams end with finish_reason "abort"), closes
  // connections, joins every thread. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsinfer::server
