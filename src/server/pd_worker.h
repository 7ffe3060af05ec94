// Prefill/decode disaggregation in `dsinfer serve --role` (docs/fleet.md, docs/decisions.md 2026-12-02 "P/D"), on
// vLLM's kv_transfer_params round trip as vllm-router's --vllm-pd-disaggregation drives it:
//  - prefill: a request with {do_remote_decode: true} runs as usual (the router asks for one token); when it ends, the
//    engine exports the prompt's prefix state (Engine::export_prefix_state) and a kv_transfer::Sender holds it under
//    a fresh id until the decode worker pulls it or its TTL passes; the answer's kv_transfer_params say where.
//  - decode: a request with {do_remote_prefill: true, remote_host, remote_port, remote_request_id} pulls that state
//    on its connection thread (kv_transfer::fetch: chunked, CRC-32C, bounded waits), the engine thread imports it
//    (Engine::import_prefix_state) just before it submits the request, which then resumes as an exact prefix hit.
//    Any failure (pull, import) is counted and the request is prefilled locally: nothing is lost.
//  - both (the default): kv_transfer_params are ignored.
// The transport (`--kv-transfer-backend`): TCP (kv_transfer::Sender / fetch) or UCX (kv_transfer::UcxSender /
// fetch_ucx, server/pd_transport_ucx.h), the same framing, checks, timeouts and faults over either.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "dsinfer/engine.h"
#include "dsinfer/server.h"
#include "server/kv_transfer.h"
#include "server/pd_transport_ucx.h"

namespace dsinfer::server {

enum class PdRole { kBoth, kPrefill, kDecode };
enum class PdTransport { kTcp, kUcx };
Result<PdTransport> parse_pd_transport(const std::string& name);  // "tcp", "ucx" (checked to load)
Result<PdRole> parse_pd_role(const std::string& name);  // "both", "prefill", "decode"
const char* pd_role_name(PdRole r);

// One request's side of a transfer (the decode answer's "dsinfer_pd" object: the TTFT split and the bytes).
struct PdRecord {
  bool pulled = false, imported = false;
  std::string fallback;           // why the request was prefilled locally ("" when it resumed from the state)
  uint64_t wire_bytes = 0;        // bytes read from the prefill worker (transport framing included)
  uint64_t state_bytes = 0;       // the blob
  int64_t state_tokens = 0;       // tokens the decoder did not compute
  double transfer_s = 0, import_s = 0;
  double prefill_s = -1, export_s = -1;  // the prefill worker's, from its kv_transfer_params (-1: unknown)
};

class PdWorker {
 public:
  explicit PdWorker(const ServerOptions& opts);
  ~PdWorker();
  // Parses the role and the fault spec; a prefill worker starts listening for pulls. False with the reason.
  bool start(std::string* error);
  void stop();
  PdRole role() const { return role_; }
  // The prefill leg is a non-streamed request (the answer carries the params); the decode leg may stream.
  bool exports(const Request& r) const {
    return role_ == PdRole::kPrefill && r.has_kv_transfer && r.kv_transfer.do_remote_decode && !r.stream;
  }
  bool imports(const Request& r) const { return role_ == PdRole::kDecode && r.has_kv_transfer && r.kv_transfer.do_remote_prefill; }

  // Prefill side, on the engine thread once request `r` has finished: its prompt's state exported and held; returns
  // the answer's kv_transfer_params (JSON text), "null" when there is no state to hand over (then the decoder
  // prefills).
  std::string export_state(Engine& engine, const RequestResult& r);
  // Decode side, on the connection thread: pulls what `p` names (bounded by the transfer timeouts). The blob, empty
  // on failure (rec->fallback says why).
  std::string pull(const KvTransferParams& p, PdRecord* rec);
  // Decode side, on the engine thread before the request is submitted.
  void import_state(Engine& engine, const std::string& blob, PdRecord* rec);

  // Prometheus lines (dsinfer_kv_transfer_*) for GET /metrics.
  std::string metrics_text() const;
  kv_transfer::BlobServer* sender() { return sender_.get(); }

 private:
  ServerOptions opts_;
  PdRole role_ = PdRole::kBoth;
  PdTransport transport_ = PdTransport::kTcp;
  std::unique_ptr<kv_transfer::BlobServer> sender_;
  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex mu_;
  uint64_t exports_ok_ = 0, exports_none_ = 0, exported_bytes_ = 0;
  uint64_t pulls_ok_ = 0, pulls_failed_ = 0, pulled_bytes_ = 0;
  uint64_t imports_ok_ = 0, imports_failed_ = 0, imported_tokens_ = 0;
  double transfer_s_ = 0;
};

}  // namespace dsinfer::server
