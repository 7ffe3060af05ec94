// Prefill/decode disaggregation, the state transport (docs/decisions.md 2026-12-02 "P/D"): a prefill worker holds a
// sequence's exported state as an opaque blob under an id and serves it over TCP; the decode worker named in the
// request's kv_transfer_params pulls it. Chunked, each chunk and the whole blob checksummed (CRC-32C), every wait
// bounded (connect, each read, the whole transfer). Any failure is a FetchResult with the reason and never a
// partial blob: the caller then prefills locally, so no request is lost. What the blob holds (the state layout's
// bytes) is the engine's business; this file moves bytes only. The framing runs over a Stream: plain POSIX sockets
// here (no HTTP), a UCX endpoint in server/pd_transport_ucx.h (`serve --kv-transfer-backend ucx`).
//
// Wire (little-endian). Request: "DSKQ" u32 version=1, u32 id length, id bytes.
// Answer: "DSKA" u32 version, u32 status (0 ok, 1 unknown or expired id), u64 blob bytes, u32 chunk bytes,
// u32 chunk count, u32 CRC-32C of the whole blob; then per chunk: u32 index, u32 length, u32 CRC-32C, the bytes.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "core/crc32c.h"

namespace dsinfer::server::kv_transfer {

using dsinfer::crc32c;  // core/crc32c.h

struct TransferOptions {
  size_t chunk_bytes = 1u << 20;
  double connect_timeout_s = 2;
  double io_timeout_s = 5;       // no byte for this long: the transfer failed
  double total_timeout_s = 60;   // the whole transfer
  uint64_t max_blob_bytes = uint64_t(8) << 30;  // a larger announced blob is refused before any allocation
};

// The bytes of one answer, as Sender writes them (tests build broken variants from it).
std::string encode_answer(std::string_view blob, size_t chunk_bytes);
std::string encode_request(std::string_view id);

// Test-only faults of a sender: send only the first `truncate_after` bytes of the answer and close; flip one bit
// of answer byte `corrupt_byte`; accept and never answer (`stall`).
struct SenderFaults {
  int64_t truncate_after = -1;
  int64_t corrupt_byte = -1;
  bool stall = false;
};

using Clock = std::chrono::steady_clock;

// A connected byte stream the framing runs over: a TCP socket here, a UCX endpoint in server/pd_transport_ucx.h.
class Stream {
 public:
  virtual ~Stream() = default;
  // Reads exactly n bytes: each wait at most io_timeout_s, all of it before `deadline`; every byte read is added to
  // *counted. "" when done; else why not (a timeout, the peer gone after k of n bytes, a transport error).
  virtual std::string read_exact(char* out, size_t n, double io_timeout_s, Clock::time_point deadline,
                                 uint64_t* counted) = 0;
  // Writes all n bytes (each wait at most io_timeout_s); false when it cannot or `stopping` turns true.
  virtual bool write_all(const char* data, size_t n, double io_timeout_s, const std::atomic<bool>& stopping) = 0;
};

// What every sender shares, whatever its transport: the blobs it holds (each fetched once or dropped after its
// TTL), its test faults, and serving one pull on a connected stream (the request read, the answer or the fault
// written). Sender (TCP, below) and UcxSender (server/pd_transport_ucx.h) add the listening.
class BlobServer {
 public:
  explicit BlobServer(TransferOptions options) : opts_(options) {}
  virtual ~BlobServer() = default;
  // Listens on host:port (0: an ephemeral port). False with the reason naming the address.
  virtual bool start(const std::string& host, int port, std::string* error) = 0;
  virtual int port() const = 0;
  virtual void stop() = 0;  // idempotent; joins its threads
  virtual const char* transport() const = 0;  // "tcp", "ucx"
  // Holds `blob` under `id` until it is fetched once or `ttl_s` passes (then a fetch gets status 1).
  void offer(const std::string& id, std::string blob, double ttl_s);
  size_t held();  // blobs held now (the expired ones are dropped first, as on every offer)
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  void set_faults(const SenderFaults& f);

 protected:
  // One pull on `s`; `stopping` ends every wait early. True when a whole answer was written (no fault cut it).
  bool serve(Stream& s, const std::atomic<bool>& stopping);
  TransferOptions opts_;

 private:
  struct Entry {
    std::string blob;
    Clock::time_point expires;
  };
  bool take(const std::string& id, std::string* blob);
  void drop_expired();  // under mu_

  std::atomic<uint64_t> bytes_sent_{0};
  mutable std::mutex mu_;
  std::map<std::string, Entry> held_;
  SenderFaults faults_;
};

// The TCP sender: an accept thread, one thread per connection.
class Sender final : public BlobServer {
 public:
  explicit Sender(TransferOptions options = {}) : BlobServer(options) {}
  ~Sender() override;  // stop()
  bool start(const std::string& host, int port, std::string* error) override;
  int port() const override { return port_; }
  void stop() override;
  const char* transport() const override { return "tcp"; }

 private:
  void accept_loop();

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int32_t> serving_{0};
  std::thread accept_thread_;
};

struct FetchResult {
  bool ok = false;
  std::string blob;             // the whole blob when ok; empty otherwise
  std::string error;            // why not (names the stage: connect, header, chunk i, checksum, timeout)
  uint64_t bytes_received = 0;  // wire bytes read, also on failure
  double seconds = 0;
};

// Pulls blob `id` from host:port over TCP. Never throws; every failure is !ok with the reason.
FetchResult fetch(const std::string& host, int port, const std::string& id, const TransferOptions& options = {});
// One pull on a connected stream (any transport): the request written, the answer read and checked. `t0` is when
// the pull began (FetchResult::seconds counts from it); `deadline` bounds all of it.
FetchResult fetch_over(Stream& s, const std::string& id, const TransferOptions& o, Clock::time_point t0,
                       Clock::time_point deadline);
// A FetchResult for a pull that failed with `why` (blob cleared, seconds since t0).
FetchResult failed_fetch(FetchResult out, const std::string& why, Clock::time_point t0);

}  // namespace dsinfer::server::kv_transfer
