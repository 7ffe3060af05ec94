// `dsinfer serve`: the OpenAI-compatible HTTP server (include/dsinfer/server.h) on one engine. Listens on
// 127.0.0.1 unless told otherwise. SIGTERM drains it (/health 503 at once, new requests 503 after --drain-grace
// seconds, requests in flight finish within --drain-timeout more), then it stops; SIGINT, or a second signal while draining, stops it at once
// (requests in flight end with finish reason "abort"). Exit 0 either way.
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "apps/dsinfer/commands.h"
#include "apps/dsinfer/engine_flags.h"
#include "dsinfer/engine.h"
#include "dsinfer/server.h"

namespace dsinfer::cli {

namespace {

// To stdout when asked for (--help), else to stderr after a usage error.
void usage(FILE* f = stderr) {
  const server::ServerOptions d;
  std::fprintf(f,
               "usage: dsinfer serve --model DIR [--host %s] [--port %d] [--api-key KEY] [engine flags]\n"
               "  --host: an IP address (IPv4 or IPv6) or a host name such as localhost; --port 0 picks a free port\n"
               "%s"
               "  server:   --api-key KEY (or env DSINFER_API_KEY): /v1/* needs 'Authorization: Bearer KEY'\n"
               "            --max-waiting-requests N (%d, then 503)  --max-connections N (%d)\n"
               "            --max-body-bytes N (%zu, then 413)  --max-n N (%d)\n"
               "            --request-timeout S (%d: a request's header and body must arrive within S seconds, "
               "then 408)\n"
               "            --drain-timeout S (%d: on SIGTERM, requests in flight get S seconds to finish; new ones "
               "get 503)\n"
               "            --drain-grace S (%d: on SIGTERM, /health is 503 for S seconds before new requests are "
               "refused;\n"
               "            set it to a router's health-check interval)\n"
               "            --get-load-format vllm|sglang (%s: GET /get_load as vllm-router or SGLang's gateway reads it)\n"
               "  P/D:      --role prefill|decode|both (%s; prefill / decode speak vLLM's kv_transfer_params as\n"
               "            vllm-router --vllm-pd-disaggregation drives them, and turn on --enable-prefix-caching)\n"
               "            --kv-transfer-host IP (%s)  --kv-transfer-port N (prefill: where decoders pull; 0 = any)\n"
               "            --kv-transfer-ttl S (%g)  --kv-transfer-timeout S (%g: a pull, in all)\n"
               "            --kv-transfer-backend tcp|ucx (%s; both workers of a pair alike; ucx loads libucp)\n"
               "Endpoints: POST /v1/chat/completions, POST /v1/completions (\"stream\": true for server-sent events),\n"
               "GET /v1/models, GET /health (503 while draining), GET /live, GET /metrics (Prometheus); for routers\n"
               "(docs/fleet.md): GET /get_load (/load), /get_model_info (/model_info),\n"
               "/get_server_info (/server_info), /health_generate; POST /tokenize, /detokenize, /flush_cache.\n",
               d.host.c_str(), d.port, engine_flags_help().c_str(), d.max_waiting_requests, d.max_connections,
               d.max_body_bytes, d.max_n, d.request_timeout_s, d.drain_timeout_s, d.drain_grace_s,
               d.get_load_format.c_str(), d.role.c_str(),
               d.kv_transfer_host.c_str(), d.kv_transfer_ttl_s, d.kv_transfer_timeout_s, d.kv_transfer_backend.c_str());
}

// After a usage error: the usage on stderr, exit code 2.
int usage_error() {
  usage(stderr);
  return 2;
}

// The address to bind for --host: an IP address as is, a host name (localhost) resolved to its first IPv4 address
// (else its first address; clients resolving "localhost" try IPv4 too). False (with the reason naming the flag and
// value) when it is neither.
bool resolve_host(const std::string& host, std::string* address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) {
    std::fprintf(stderr, "serve: --host '%s' is not an IP address or a known host name: %s\n", host.c_str(),
                 rc ? gai_strerror(rc) : "no address");
    return false;
  }
  const addrinfo* pick = res;
  for (const addrinfo* p = res; p; p = p->ai_next)
    if (p->ai_family == AF_INET) {
      pick = p;
      break;
    }
  char buf[NI_MAXHOST];
  const int nrc = getnameinfo(pick->ai_addr, pick->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
  freeaddrinfo(res);
  if (nrc != 0) {
    std::fprintf(stderr, "serve: --host '%s': %s\n", host.c_str(), gai_strerror(nrc));
    return false;
  }
  *address = buf;
  return true;
}

// SIGTERM: readiness off for grace_s seconds (requests still admitted), then stop admitting and wait for the
// requests in flight (at most timeout_s seconds more, or until another signal); then return for stop().
void drain(server::Server& srv, const sigset_t& sigs, int grace_s, int timeout_s) {
  std::fprintf(stderr, "serve: SIGTERM received, draining %d request(s) in flight (/health 503 now; new requests get "
               "503 after %d s; at most %d s more)\n", int(srv.in_flight()), grace_s, timeout_s);
  srv.begin_drain();
  const timespec slice{0, 50 * 1000 * 1000};  // poll every 50 ms
  const auto grace_end = std::chrono::steady_clock::now() + std::chrono::seconds(grace_s);
  while (std::chrono::steady_clock::now() < grace_end) {
    if (const int s = sigtimedwait(&sigs, nullptr, &slice); s > 0) {
      std::fprintf(stderr, "serve: %s received while draining, stopping now\n", s == SIGINT ? "SIGINT" : "SIGTERM");
      return;
    }
  }
  srv.refuse_new();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (srv.in_flight() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "serve: drain timed out with %d request(s) in flight; aborting them\n",
                   int(srv.in_flight()));
      return;
    }
    if (const int s = sigtimedwait(&sigs, nullptr, &slice); s > 0) {
      std::fprintf(stderr, "serve: %s received while draining, stopping now\n", s == SIGINT ? "SIGINT" : "SIGTERM");
      return;
    }
  }
  std::fprintf(stderr, "serve: drained, stopping\n");
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  int32_t rank = 0, world = 1;
  std::string launch_err;
  if (!process_rank(&rank, &world, &launch_err)) {
    std::fprintf(stderr, "serve: %s\n", launch_err.c_str());
    return 2;
  }
  if (world > 1) {
    std::fprintf(stderr, "serve: WORLD_SIZE=%d RANK=%d: a server's requests reach one process, so one process per "
                 "rank cannot serve them; use one process driving N ranks: dsinfer serve --gpus N\n", int(world),
                 int(rank));
    return 2;
  }
  EngineOptions eo;
  server::ServerOptions so;
  if (const char* key = std::getenv("DSINFER_API_KEY")) so.api_key = key;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (const FlagParse f = parse_engine_flag("serve", argc, argv, i, eo); f != FlagParse::kNotEngineFlag) {
      if (f == FlagParse::kError) return 2;  // the message names the flag and the value
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "serve: option '%s' needs a value (or is unknown)\n", a.c_str());
      return usage_error();
    }
    const std::string v = argv[++i];
    const auto seconds = [&](double* out) {  // whole seconds >= 1 into a double field
      long long n = 0;
      if (!parse_int_flag("serve", a, v, 1, INT32_MAX, &n)) return false;
      *out = double(n);
      return true;
    };
    bool ok = true;
    if (a == "--host") so.host = v;
    else if (a == "--api-key") so.api_key = v;
    else if (a == "--role") so.role = v;
    else if (a == "--get-load-format") so.get_load_format = v;
    else if (a == "--kv-transfer-host") so.kv_transfer_host = v;
    else if (a == "--kv-transfer-fault") so.kv_transfer_fault = v;  // tests only (docs/fleet.md)
    else if (a == "--kv-transfer-backend") so.kv_transfer_backend = v;
    else if (a == "--kv-transfer-port") ok = parse_int_flag("serve", a, v, 0, 65535, &so.kv_transfer_port);
    else if (a == "--kv-transfer-ttl") ok = seconds(&so.kv_transfer_ttl_s);
    else if (a == "--kv-transfer-timeout") ok = seconds(&so.kv_transfer_timeout_s);
    else if (a == "--port") ok = parse_int_flag("serve", a, v, 0, 65535, &so.port);
    else if (a == "--max-waiting-requests") ok = parse_int_flag("serve", a, v, 0, INT32_MAX, &so.max_waiting_requests);
    else if (a == "--max-connections") ok = parse_int_flag("serve", a, v, 0, INT32_MAX, &so.max_connections);
    else if (a == "--max-body-bytes") ok = parse_int_flag("serve", a, v, 0, INT32_MAX, &so.max_body_bytes);
    else if (a == "--max-n") ok = parse_int_flag("serve", a, v, 0, INT32_MAX, &so.max_n);
    else if (a == "--request-timeout") ok = parse_int_flag("serve", a, v, 0, INT32_MAX, &so.request_timeout_s);
    else if (a == "--drain-timeout") ok = parse_int_flag("serve", a, v, 0, INT32_MAX, &so.drain_timeout_s);
    else if (a == "--drain-grace") ok = parse_int_flag("serve", a, v, 0, INT32_MAX, &so.drain_grace_s);
    else {
      std::fprintf(stderr, "serve: unknown option '%s'\n", a.c_str());
      return usage_error();
    }
    if (!ok) return 2;  // parse_int_flag printed the flag and the value
  }
  so.request_timeout_s = std::max(so.request_timeout_s, 1);
  if (eo.model_dir.empty()) {
    std::fprintf(stderr, "serve: needs --model DIR\n");
    return usage_error();
  }
  if (so.role != "both" && so.role != "prefill" && so.role != "decode") {
    std::fprintf(stderr, "serve: --role '%s': expected prefill, decode or both\n", so.role.c_str());
    return usage_error();
  }
  // A prefix state leaves and enters an engine through its prefix cache.
  if (so.role != "both" && (eo.enable_prefix_caching.empty() || eo.enable_prefix_caching == "off"))
    eo.enable_prefix_caching = "exact";
  const std::string given_host = so.host;
  if (!resolve_host(so.host, &so.host)) return 2;
  // SIGINT / SIGTERM are taken by sigwait below: block them before any thread starts so that every thread
  // inherits the mask. A client that vanishes must not kill the process with SIGPIPE.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string err;
  std::unique_ptr<Engine> engine = Engine::create(eo, &err);
  if (!engine) {
    std::fprintf(stderr, "serve: %s\n", err.c_str());
    return 2;
  }
  const std::string backend = engine->backend_name();
  const long long max_len = (long long)engine->max_model_len();
  server::Server srv(std::move(engine), so);
  if (!srv.start(&err)) {
    std::fprintf(stderr, "serve: %s\n", err.c_str());
    return 2;
  }
  // An IPv6 address goes in brackets in a URL (RFC 3986): http://[::1]:8000.
  const std::string url_host = given_host.find(':') != std::string::npos ? "[" + given_host + "]" : given_host;
  std::fprintf(stderr, "serve: model %s on %s, max_model_len %lld%s\nserve: listening on http://%s:%d\n",
               eo.model_dir.c_str(), backend.c_str(), max_len, so.api_key.empty() ? "" : ", API key required",
               url_host.c_str(), srv.port());
  if (so.role != "both")
    std::fprintf(stderr, "serve: role %s%s\n", so.role.c_str(),
                 so.role == "prefill"
                     ? (", prefix states pulled from " + so.kv_transfer_host + ":" + std::to_string(srv.kv_transfer_port())).c_str()
                     : "");
  int sig = 0;
  sigwait(&sigs, &sig);
  if (sig == SIGTERM) drain(srv, sigs, so.drain_grace_s, so.drain_timeout_s);
  else std::fprintf(stderr, "serve: SIGINT received, stopping\n");
  srv.stop();
  return 0;
}

}  // namespace dsinfer::cli
