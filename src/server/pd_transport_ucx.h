// The P/D state transport over UCX (`serve --kv-transfer-backend ucx`, docs/fleet.md): server/kv_transfer's framing
// (the same request and answer bytes: chunks, CRC-32C per chunk and over the blob, every wait bounded, the test
// faults) over UCX stream endpoints instead of TCP sockets. The prefill worker's UcxSender listens on a UCX
// listener (host:port, client-server connection establishment); the decode worker's fetch_ucx connects an
// endpoint there. Each connection and each fetch has a UCX worker of its own while it runs (one thread each; idle
// workers are pooled and reused), on one UCX context of the process. The blob is host memory on both sides: on the CUDA runner the engine has already copied the state
// off the device (CudaRunner::read_state) and copies it back on import (write_state), since Debian's UCX has no
// CUDA memory support.
//
// libucp is loaded at run time (dlopen of libucp.so.0; DSINFER_UCX_LIBRARY names another file), so the build needs
// only ucp.h (libucx-dev) and dsinfer starts and runs without UCX unless this transport is asked for; a build
// without ucp.h refuses it by name.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "core/status.h"
#include "server/kv_transfer.h"

namespace dsinfer::server::kv_transfer {

// Loads libucp and creates the process's UCX context once; ok, or why not (the library, the symbol, the status).
Status ucx_available();

class UcxSender final : public BlobServer {
 public:
  explicit UcxSender(TransferOptions options = {}) : BlobServer(options) {}
  ~UcxSender() override;  // stop()
  bool start(const std::string& host, int port, std::string* error) override;
  int port() const override { return port_; }
  void stop() override;
  const char* transport() const override { return "ucx"; }

 private:
  struct Listener;  // the UCX listener and its worker (pd_transport_ucx.cpp)
  void accept_loop(Listener* l);

  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int32_t> serving_{0};
  std::thread accept_thread_;
};

// Pulls blob `id` from the UcxSender on host:port. Never throws; every failure is !ok with the reason.
FetchResult fetch_ucx(const std::string& host, int port, const std::string& id, const TransferOptions& options = {});

}  // namespace dsinfer::server::kv_transfer
