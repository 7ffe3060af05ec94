// kv_transfer.h: the P/D state transport over TCP.
#include "server/kv_transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace dsinfer::server::kv_transfer {

namespace {

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

constexpr uint32_t kVersion = 1;
constexpr size_t kAnswerHeaderBytes = 4 + 4 + 4 + 8 + 4 + 4 + 4;
constexpr size_t kChunkHeaderBytes = 12;
constexpr uint32_t kMaxIdBytes = 1024;

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xFF));
}
void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(char((v >> (8 * i)) & 0xFF));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Waits for `events` on fd for at most `timeout_s`; false on timeout or error.
bool wait_fd(int fd, short events, double timeout_s) {
  const auto t0 = Clock::now();
  while (true) {
    const double left = timeout_s - since(t0);
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, int(std::min(left, 0.1) * 1000) + 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

// Reads exactly n bytes (non-blocking fd): each wait at most io_timeout_s, all of it before `deadline`.
// "" when done; else why not.
std::string read_exact(int fd, char* out, size_t n, double io_timeout_s, Clock::time_point deadline,
                       uint64_t* counted) {
  size_t got = 0;
  while (got < n) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) return "the transfer's total timeout passed";
    if (!wait_fd(fd, POLLIN, std::min(io_timeout_s, left)))
      return fmt::format("no data for {} s", std::min(io_timeout_s, left));
    const ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r == 0) return fmt::format("the connection closed after {} of {} bytes", got, n);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return std::string("recv: ") + std::strerror(errno);
    }
    got += size_t(r);
    *counted += uint64_t(r);
  }
  return "";
}

bool write_all(int fd, const char* data, size_t n, double io_timeout_s, const std::atomic<bool>& stopping) {
  size_t off = 0;
  while (off < n) {
    if (stopping.load() || !wait_fd(fd, POLLOUT, io_timeout_s)) return false;
    const ssize_t w = ::send(fd, data + off, n - off, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (w <= 0) return false;
    off += size_t(w);
  }
  return true;
}

int connect_to(const std::string& host, int port, double timeout_s, std::string* error) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  if (port <= 0 || port > 65535 || ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    *error = fmt::format("connect: '{}:{}' is not an IPv4 address and port", host, port);
    return -1;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  if (rc != 0 && errno == EINPROGRESS) {
    int err = ETIMEDOUT;
    socklen_t len = sizeof err;
    if (wait_fd(fd, POLLOUT, timeout_s)) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
    errno = err;
  }
  if (rc != 0) {
    *error = fmt::format("connect to {}:{}: {}", host, port, std::strerror(errno));
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// A TCP connection (a non-blocking socket) as a Stream.
class TcpStream final : public Stream {
 public:
  explicit TcpStream(int fd) : fd_(fd) {}
  std::string read_exact(char* out, size_t n, double io_timeout_s, Clock::time_point deadline,
                         uint64_t* counted) override {
    return dsinfer::server::kv_transfer::read_exact(fd_, out, n, io_timeout_s, deadline, counted);
  }
  bool write_all(const char* data, size_t n, double io_timeout_s, const std::atomic<bool>& stopping) override {
    return dsinfer::server::kv_transfer::write_all(fd_, data, n, io_timeout_s, stopping);
  }

 private:
  int fd_;
};

}  // namespace

std::string encode_request(std::string_view id) {
  std::string s = "DSKQ";
  put_u32(s, kVersion);
  put_u32(s, uint32_t(id.size()));
  s.append(id);
  return s;
}

std::string encode_answer(std::string_view blob, size_t chunk_bytes) {
  chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  const size_t chunks = (blob.size() + chunk_bytes - 1) / chunk_bytes;
  std::string s = "DSKA";
  put_u32(s, kVersion);
  put_u32(s, 0);
  put_u64(s, blob.size());
  put_u32(s, uint32_t(chunk_bytes));
  put_u32(s, uint32_t(chunks));
  put_u32(s, crc32c(blob));
  for (size_t i = 0; i < chunks; ++i) {
    const std::string_view c = blob.substr(i * chunk_bytes, chunk_bytes);
    put_u32(s, uint32_t(i));
    put_u32(s, uint32_t(c.size()));
    put_u32(s, crc32c(c));
    s.append(c);
  }
  return s;
}

Sender::~Sender() { stop(); }

bool Sender::start(const std::string& host, int port, std::string* error) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  if (port < 0 || port > 65535 || ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    *error = fmt::format("kv transfer: '{}:{}' is not an IPv4 address and port", host, port);
    return false;
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = sizeof a;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listen_fd_, 64) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    *error = fmt::format("kv transfer: cannot listen on {}:{}: {}", host, port, std::strerror(errno));
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    return false;
  }
  port_ = ntohs(a.sin_port);
  accept_thread_ = std::thread([this] { accept_loop(); });
  return true;
}

void BlobServer::drop_expired() {
  const auto now = Clock::now();
  for (auto it = held_.begin(); it != held_.end();) it = it->second.expires <= now ? held_.erase(it) : std::next(it);
}

void BlobServer::offer(const std::string& id, std::string blob, double ttl_s) {
  std::lock_guard<std::mutex> lk(mu_);
  drop_expired();
  held_[id] = {std::move(blob), after(ttl_s)};
}

size_t BlobServer::held() {
  std::lock_guard<std::mutex> lk(mu_);
  drop_expired();
  return held_.size();
}

void BlobServer::set_faults(const SenderFaults& f) {
  std::lock_guard<std::mutex> lk(mu_);
  faults_ = f;
}

bool BlobServer::take(const std::string& id, std::string* blob) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = held_.find(id);
  if (it == held_.end() || it->second.expires <= Clock::now()) return false;
  *blob = std::move(it->second.blob);
  held_.erase(it);
  return true;
}

void Sender::stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  while (serving_.load() > 0) wait_fd(-1, 0, 0.01);  // connection threads see stopping_ within an io slice
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void Sender::accept_loop() {
  while (!stopping_.load()) {
    if (!wait_fd(listen_fd_, POLLIN, 0.1)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    ++serving_;
    std::thread([this, fd] {
      TcpStream stream(fd);
      serve(stream, stopping_);
      ::close(fd);
      --serving_;
    }).detach();
  }
}

bool BlobServer::serve(Stream& s, const std::atomic<bool>& stopping) {
  const auto deadline = after(opts_.total_timeout_s);
  char head[12];
  uint64_t counted = 0;
  if (!s.read_exact(head, sizeof head, opts_.io_timeout_s, deadline, &counted).empty()) return false;
  const uint32_t id_len = get_u32(head + 8);
  if (std::memcmp(head, "DSKQ", 4) != 0 || get_u32(head + 4) != kVersion || id_len > kMaxIdBytes) return false;
  std::string id(id_len, '\0');
  if (!s.read_exact(id.data(), id_len, opts_.io_timeout_s, deadline, &counted).empty()) return false;
  SenderFaults f;
  {
    std::lock_guard<std::mutex> lk(mu_);
    f = faults_;
  }
  if (f.stall) {
    while (!stopping.load() && Clock::now() < deadline) wait_fd(-1, 0, 0.05);
    return false;
  }
  std::string blob, answer;
  if (take(id, &blob)) {
    answer = encode_answer(blob, opts_.chunk_bytes);
  } else {
    answer = "DSKA";
    put_u32(answer, kVersion);
    put_u32(answer, 1);
    answer.append(kAnswerHeaderBytes - answer.size(), '\0');
  }
  if (f.corrupt_byte >= 0 && size_t(f.corrupt_byte) < answer.size()) answer[size_t(f.corrupt_byte)] ^= 0x01;
  const bool cut = f.truncate_after >= 0 && size_t(f.truncate_after) < answer.size();
  if (cut) answer.resize(size_t(f.truncate_after));
  if (!s.write_all(answer.data(), answer.size(), opts_.io_timeout_s, stopping)) return false;
  bytes_sent_ += answer.size();
  return !cut;
}

namespace {

// Reads the chunks announced by the header into out->blob; "" when all arrived intact.
std::string read_chunks(Stream& s, uint64_t total, uint32_t chunk_bytes, uint32_t chunks, const TransferOptions& o,
                        Clock::time_point deadline, FetchResult* out) {
  out->blob.resize(size_t(total));
  uint64_t off = 0;
  for (uint32_t i = 0; i < chunks; ++i) {
    char h[kChunkHeaderBytes];
    std::string e = s.read_exact(h, sizeof h, o.io_timeout_s, deadline, &out->bytes_received);
    if (!e.empty()) return fmt::format("chunk {} of {}: header: {}", i, chunks, e);
    const uint32_t index = get_u32(h);
    const uint32_t len = get_u32(h + 4);
    const uint64_t want = std::min<uint64_t>(chunk_bytes, total - off);
    if (index != i || len != want)
      return fmt::format("chunk {} of {}: header says index {} length {} (want {} bytes)", i, chunks, index, len, want);
    e = s.read_exact(out->blob.data() + off, len, o.io_timeout_s, deadline, &out->bytes_received);
    if (!e.empty()) return fmt::format("chunk {} of {}: {}", i, chunks, e);
    const uint32_t crc = crc32c(std::string_view(out->blob.data() + off, len));
    if (crc != get_u32(h + 8))
      return fmt::format("chunk {} of {}: checksum mismatch (got {:08x}, header {:08x})", i, chunks, crc,
                         get_u32(h + 8));
    off += len;
  }
  return off == total ? "" : fmt::format("chunks hold {} bytes, the header announced {}", off, total);
}

}  // namespace

FetchResult failed_fetch(FetchResult out, const std::string& why, Clock::time_point t0) {
  out.ok = false;
  out.blob.clear();
  out.error = why;
  out.seconds = since(t0);
  return out;
}

FetchResult fetch(const std::string& host, int port, const std::string& id, const TransferOptions& o) {
  const auto t0 = Clock::now();
  const auto deadline = after(o.total_timeout_s);
  if (id.size() > kMaxIdBytes)
    return failed_fetch({}, fmt::format("the id is {} bytes long (at most {})", id.size(), kMaxIdBytes), t0);
  std::string err;
  const int fd = connect_to(host, port, o.connect_timeout_s, &err);
  if (fd < 0) return failed_fetch({}, err, t0);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  TcpStream stream(fd);
  return fetch_over(stream, id, o, t0, deadline);
}

FetchResult fetch_over(Stream& s, const std::string& id, const TransferOptions& o, Clock::time_point t0,
                       Clock::time_point deadline) {
  FetchResult out;
  auto fail = [&](const std::string& why) { return failed_fetch(std::move(out), why, t0); };
  if (id.size() > kMaxIdBytes) return fail(fmt::format("the id is {} bytes long (at most {})", id.size(), kMaxIdBytes));
  const std::string req = encode_request(id);
  const std::atomic<bool> never{false};
  if (!s.write_all(req.data(), req.size(), o.io_timeout_s, never)) return fail("sending the request failed");
  char h[kAnswerHeaderBytes];
  std::string err = s.read_exact(h, sizeof h, o.io_timeout_s, deadline, &out.bytes_received);
  if (!err.empty()) return fail("answer header: " + err);
  if (std::memcmp(h, "DSKA", 4) != 0 || get_u32(h + 4) != kVersion)
    return fail("answer header: not a dsinfer kv answer");
  if (get_u32(h + 8) == 1) return fail(fmt::format("the sender holds no state '{}' (unknown, expired or taken)", id));
  if (get_u32(h + 8) != 0) return fail(fmt::format("answer header: status {}", get_u32(h + 8)));
  const uint64_t total = get_u64(h + 12);
  const uint32_t chunk_bytes = get_u32(h + 20);
  const uint32_t chunks = get_u32(h + 24);
  if (total > o.max_blob_bytes)
    return fail(fmt::format("the sender announced {} bytes (at most {})", total, o.max_blob_bytes));
  if (chunk_bytes == 0 || uint64_t(chunks) != (total + chunk_bytes - 1) / chunk_bytes)
    return fail(fmt::format("answer header: {} chunks of {} bytes cannot hold {} bytes", chunks, chunk_bytes, total));
  err = read_chunks(s, total, chunk_bytes, chunks, o, deadline, &out);
  if (!err.empty()) return fail(err);
  if (crc32c(out.blob) != get_u32(h + 28)) return fail("whole-blob checksum mismatch");
  out.ok = true;
  out.seconds = since(t0);
  return out;
}

}  // namespace dsinfer::server::kv_transfer
