// Server (see server.h): sockets and HTTP/1.1 with Boost.Beast. The only file that includes Asio / Beast.
// Sockets are non-blocking and every wait is a poll() with a deadline, in short slices so that stop() is
// seen promptly: an idle keep-alive connection, a client that stops sending or stops reading cannot hold a
// thread (or a request's state) forever.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <list>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "dsinfer/server.h"
#include "server/handlers.h"

namespace dsinfer::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// Waits for `events` on fd until the deadline, in 100 ms slices; false on timeout, on stop (after `grace`
// more seconds) or on a socket error.
bool wait_fd(int fd, short events, double timeout_s, const std::atomic<bool>& stopping, double grace_s) {
  const auto start = Clock::now();
  while (true) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, 100);
    if (r > 0) return true;  // ready, or an error the next read / write reports
    if (r < 0 && errno != EINTR) return false;
    const double el = std::chrono::duration<double>(Clock::now() - start).count();
    if (el > timeout_s || (stopping.load() && el > grace_s)) return false;
  }
}

// A SyncReadStream / SyncWriteStream over a non-blocking socket with deadlines (Beast's synchronous calls
// have none of their own).
class TimedStream {
 public:
  TimedStream(tcp::socket& s, const ServerOptions& o, const std::atomic<bool>& stopping)
      : sock_(s), opts_(o), stopping_(stopping) {}
  using executor_type = tcp::socket::executor_type;
  executor_type get_executor() { return sock_.get_executor(); }

  template <class Buffers>
  size_t read_some(const Buffers& b, beast::error_code& ec) {
    double timeout = opts_.idle_timeout_s;
    if (deadline_) {
      const double left = std::chrono::duration<double>(*deadline_ - Clock::now()).count();
      if (left <= 0) {
        deadline_hit_ = true;
        ec = net::error::timed_out;
        return 0;
      }
      timeout = std::min(timeout, left);
    }
    const size_t n = io(ec, POLLIN, timeout, 0.0, [&] { return sock_.read_some(b, ec); });
    if (ec == net::error::timed_out && deadline_ && Clock::now() >= *deadline_) deadline_hit_ = true;
    return n;
  }
  // The whole request (header and body) must arrive within `seconds` from now, whatever the pace of its
  // bytes: a slow sender cannot hold the connection by trickling one byte per idle timeout.
  void start_deadline(double seconds) {
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    deadline_hit_ = false;
  }
  void clear_deadline() { deadline_.reset(); }
  bool deadline_hit() const { return deadline_hit_; }
  template <class Buffers>
  size_t write_some(const Buffers& b, beast::error_code& ec) {
    return io(ec, POLLOUT, opts_.write_timeout_s, 2.0, [&] { return sock_.write_some(b, ec); });
  }
  template <class Buffers>
  size_t read_some(const Buffers& b) { return throwing([&](beast::error_code& ec) { return read_some(b, ec); }); }
  template <class Buffers>
  size_t write_some(const Buffers& b) { return throwing([&](beast::error_code& ec) { return write_some(b, ec); }); }

 private:
  template <class Op>
  size_t io(beast::error_code& ec, short events, double timeout_s, double grace_s, Op op) {
    while (true) {
      const size_t n = op();
      if (ec != net::error::would_block && ec != net::error::try_again) return n;
      if (!wait_fd(sock_.native_handle(), events, timeout_s, stopping_, grace_s)) {
        ec = net::error::timed_out;
        return 0;
      }
    }
  }
  template <class F>
  size_t throwing(F f) {
    beast::error_code ec;
    const size_t n = f(ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
  tcp::socket& sock_;
  const ServerOptions& opts_;
  const std::atomic<bool>& stopping_;
  std::optional<Clock::time_point> deadline_;
  bool deadline_hit_ = false;
};

class BeastWriter : public ResponseWriter {
 public:
  BeastWriter(TimedStream& s, int fd, unsigned version, bool keep_alive, bool head)
      : s_(s), fd_(fd), version_(version), keep_alive_(keep_alive), head_(head) {}
  bool ok() const { return ok_; }
  bool keep_alive() const { return keep_alive_; }
  bool started() const { return started_; }

  bool send(int status, const std::string& content_type, const std::string& body, const Headers& extra) override {
    http::response<http::string_body> res{http::int_to_status(unsigned(status)), version_};
    res.set(http::field::server, "dsinfer");
    res.set(http::field::content_type, content_type);
    for (const auto& [k, v] : extra) res.set(k, v);
    res.keep_alive(keep_alive_);
    started_ = true;
    res.body() = head_ ? std::string() : body;
    res.prepare_payload();
    if (head_) res.content_length(body.size());
    beast::error_code ec;
    http::write(s_, res, ec);
    return ok_ = !ec;
  }
  bool begin_stream(int status, const std::string& content_type) override {
    http::response<http::empty_body> res{http::int_to_status(unsigned(status)), version_};
    res.set(http::field::server, "dsinfer");
    res.set(http::field::content_type, content_type);
    res.set(http::field::cache_control, "no-cache");
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends when the connection closes
    res.keep_alive(keep_alive_);
    res.chunked(chunked_);
    started_ = true;
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(s_, sr, ec);
    return ok_ = !ec;
  }
  bool write(const std::string& data) override {
    beast::error_code ec;
    if (chunked_) net::write(s_, http::make_chunk(net::buffer(data)), ec);
    else net::write(s_, net::buffer(data), ec);
    return ok_ = ok_ && !ec;
  }
  bool end_stream() override {
    beast::error_code ec;
    if (chunked_) net::write(s_, http::make_chunk_last(), ec);
    return ok_ = ok_ && !ec;
  }
  bool client_gone() override {
    if (!ok_) return true;
    pollfd p{fd_, short(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;  // readable with nothing to read: closed
  }

 private:
  TimedStream& s_;
  int fd_;
  unsigned version_;
  bool keep_alive_, head_;
  bool chunked_ = false, ok_ = true, started_ = false;
};

std::string serialize(const http::response<http::string_body>& res) {
  std::ostringstream os;
  os << res;
  return os.str();
}

}  // namespace

struct Server::Impl {
  ServerOptions opts;
  Metrics metrics;
  std::unique_ptr<PdWorker> pd;
  std::unique_ptr<EngineLoop> loop;
  std::unique_ptr<Router> router;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<int32_t> connections{0};
  std::thread accept_thread;
  struct Conn {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::list<std::unique_ptr<Conn>> conns;  // accept thread only, then stop()
  bool started = false, stopped = false;

  int reserve_fd = -1;  // a spare descriptor, freed to shed a connection at the process's descriptor limit

  void accept_loop();
  void serve(tcp::socket sock);
  void reject(tcp::socket& sock);
  void shed_at_fd_limit();
  bool read_request(TimedStream& s, beast::flat_buffer& buf, http::request_parser<http::string_body>& p, int fd,
                    bool* replied);
};

Server::Server(std::unique_ptr<Engine> engine, ServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(options);
  impl_->pd = std::make_unique<PdWorker>(impl_->opts);
  impl_->loop = std::make_unique<EngineLoop>(std::move(engine), &impl_->metrics, impl_->pd.get());
  impl_->router = std::make_unique<Router>(*impl_->loop, impl_->metrics, impl_->opts, impl_->pd.get());
}

Server::~Server() { stop(); }

int Server::port() const { return impl_->port; }

int Server::kv_transfer_port() const { return impl_->pd->sender() ? impl_->pd->sender()->port() : 0; }

void Server::begin_drain() { impl_->loop->begin_drain(); }

void Server::refuse_new() { impl_->loop->refuse_new(); }

int32_t Server::in_flight() const { return impl_->loop->in_flight(); }

bool Server::start(std::string* error) {
  const Status s = [&]() -> Status {
    Impl& m = *impl_;
    beast::error_code ec;
    const auto addr = net::ip::make_address(m.opts.host, ec);
    if (ec) return Status::errorf("host '{}' is not an IP address: {}", m.opts.host, ec.message());
    if (m.opts.port < 0 || m.opts.port > 65535) return Status::errorf("port {} is outside [0, 65535]", m.opts.port);
    const tcp::endpoint ep(addr, static_cast<unsigned short>(m.opts.port));
    m.acceptor.open(ep.protocol(), ec);
    if (!ec) m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) m.acceptor.bind(ep, ec);
    if (!ec) m.acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) m.acceptor.non_blocking(true, ec);
    if (ec) return Status::errorf("cannot listen on {}:{}: {}", m.opts.host, m.opts.port, ec.message());
    m.port = m.acceptor.local_endpoint().port();
    DSI_RETURN_IF_ERROR(parse_load_format(m.opts.get_load_format).status());
    std::string pd_error;
    if (!m.pd->start(&pd_error)) return Status::error(pd_error);
    m.reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    m.loop->start();
    m.accept_thread = std::thread([&m] { m.accept_loop(); });
    m.started = true;
    return Status::ok();
  }();
  if (!s && error) *error = s.message();
  return s.is_ok();
}

void Server::stop() {
  Impl& m = *impl_;
  if (m.stopped || !m.started) return;
  m.stopped = true;
  m.stopping = true;
  if (m.accept_thread.joinable()) m.accept_thread.join();
  m.loop->stop();  // aborts what is in flight: waiting handlers get their (aborted) results
  m.pd->stop();
  for (auto& c : m.conns) c->thread.join();
  m.conns.clear();
  beast::error_code ec;
  m.acceptor.close(ec);
  if (m.reserve_fd >= 0) ::close(m.reserve_fd);
  m.reserve_fd = -1;
}

void Server::Impl::accept_loop() {
  while (!stopping) {
    for (auto it = conns.begin(); it != conns.end();) {
      if ((*it)->done) {
        (*it)->thread.join();
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
    if (!wait_fd(acceptor.native_handle(), POLLIN, 0.2, stopping, 0.0)) continue;
    beast::error_code ec;
    tcp::socket sock(ioc);
    acceptor.accept(sock, ec);
    if (ec == net::error::no_descriptors || ec.value() == ENFILE || ec == net::error::no_memory) {
      shed_at_fd_limit();
      continue;
    }
    if (ec) continue;
    if (connections >= opts.max_connections) {
      reject(sock);
      continue;
    }
    ++connections;
    auto c = std::make_unique<Conn>();
    Conn* raw = c.get();
    // Shared with the thread's lambda, so that a thread that cannot start leaves the socket here to answer.
    auto held = std::make_shared<tcp::socket>(std::move(sock));
    try {
      c->thread = std::thread([this, raw, held] {
        serve(std::move(*held));
        --connections;
        raw->done = true;
      });
    } catch (const std::system_error&) {  // no thread to serve it (a process limit): refused like a full server
      --connections;
      reject(*held);
      continue;
    }
    conns.push_back(std::move(c));
  }
}

namespace {

std::string overloaded_reply(const std::string& message) {
  http::response<http::string_body> res{http::status::service_unavailable, 11};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::retry_after, "1");
  res.keep_alive(false);
  res.body() = error_json(message, "service_unavailable", "", "overloaded");
  res.prepare_payload();
  return serialize(res);
}

}  // namespace

void Server::Impl::reject(tcp::socket& sock) {
  metrics.count_http("other", 503);
  const std::string data = overloaded_reply("too many open connections; retry later");
  (void)::send(sock.native_handle(), data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);  // best effort
  beast::error_code ec;
  sock.close(ec);
}

void Server::Impl::shed_at_fd_limit() {
  // accept() failed for want of a file descriptor, so the pending connection stays queued and the listening
  // socket stays readable: retrying at once would spin a core while clients time out. Free the reserve
  // descriptor, take the connection, answer 503 and close it, then take the reserve back; without a reserve,
  // back off for a moment.
  if (reserve_fd >= 0) {
    ::close(reserve_fd);
    reserve_fd = -1;
    const int fd = ::accept4(acceptor.native_handle(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      metrics.count_http("other", 503);
      const std::string data = overloaded_reply("the server is out of file descriptors; retry later");
      (void)::send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);  // best effort
      ::close(fd);
    }
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  if (reserve_fd < 0) {
    pollfd none{-1, 0, 0};
    (void)::poll(&none, 0, 50);  // back off 50 ms
  }
}

namespace {

bool client_went_away(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == net::error::eof ||
         ec == net::error::timed_out || ec == net::error::connection_reset || ec == net::error::broken_pipe ||
         ec == net::error::connection_aborted;
}

// After an error reply to a request whose body was not read: stop sending, then read and drop what the client
// still sends for a moment, so that closing does not reset the connection before it has read the reply.
void drain(tcp::socket& sock) {
  beast::error_code ec;
  sock.shutdown(tcp::socket::shutdown_send, ec);
  char scratch[16384];
  size_t total = 0;
  const auto start = Clock::now();
  while (total < (1u << 20) && Clock::now() - start < std::chrono::milliseconds(500)) {
    pollfd p{sock.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(sock.native_handle(), scratch, sizeof scratch, MSG_DONTWAIT);
    if (n <= 0) break;
    total += size_t(n);
  }
}

}  // namespace

// Reads one request; on a malformed or oversized one sends the error reply. False: close the connection
// (*replied: an error reply went out).
bool Server::Impl::read_request(TimedStream& s, beast::flat_buffer& buf, http::request_parser<http::string_body>& p,
                                int fd, bool* replied) {
  auto reply = [&](int status, const std::string& message, const std::string& code) {
    BeastWriter w(s, fd, 11, false, false);
    router->send_error(w, "other", status, message, "", "", code);
    *replied = true;
    return false;
  };
  auto too_large = [&] {
    return reply(413, fmt::format("request body exceeds {} bytes", opts.max_body_bytes), "request_too_large");
  };
  // Between requests a keep-alive connection may idle (idle_timeout_s); from a request's first byte on, its header
  // and body must arrive within request_timeout_s (408 otherwise).
  if (buf.size() == 0 && !wait_fd(fd, POLLIN, opts.idle_timeout_s, stopping, 0.0)) return false;
  s.start_deadline(opts.request_timeout_s);
  auto timed_out = [&] {
    return reply(408, fmt::format("the request's header and body did not arrive within {} s", opts.request_timeout_s),
                 "request_timeout");
  };
  beast::error_code ec;
  http::read_header(s, buf, p, ec);
  if (ec == net::error::timed_out && s.deadline_hit()) return timed_out();
  if (ec == http::error::header_limit)
    return reply(431, fmt::format("request header block exceeds {} bytes", opts.max_header_bytes), "request_header_too_large");
  if (ec == http::error::body_limit) return too_large();
  if (ec && client_went_away(ec)) return false;
  if (ec) return reply(400, "malformed HTTP request: " + ec.message(), "bad_http_request");
  if (p.content_length() && *p.content_length() > opts.max_body_bytes) return too_large();
  if (beast::iequals(p.get()[http::field::expect], "100-continue")) {
    http::response<http::empty_body> cont{http::status::continue_, 11};
    http::write(s, cont, ec);
    if (ec) return false;
  }
  http::read(s, buf, p, ec);
  if (ec == net::error::timed_out && s.deadline_hit()) return timed_out();
  s.clear_deadline();
  if (ec == http::error::body_limit) return too_large();
  if (ec && client_went_away(ec)) return false;
  if (ec) return reply(400, "malformed HTTP request body: " + ec.message(), "bad_http_request");
  return true;
}

void Server::Impl::serve(tcp::socket sock) {
  beast::error_code ec;
  sock.non_blocking(true, ec);
  sock.set_option(tcp::no_delay(true), ec);
  const int fd = sock.native_handle();
  TimedStream s(sock, opts, stopping);
  beast::flat_buffer buf;
  bool replied = false;
  while (!stopping) {
    http::request_parser<http::string_body> p;
    p.header_limit(static_cast<std::uint32_t>(opts.max_header_bytes));
    p.body_limit(opts.max_body_bytes);
    if (!read_request(s, buf, p, fd, &replied)) break;
    http::request<http::string_body>& msg = p.get();
    HttpRequest hr;
    hr.method = std::string(msg.method_string());
    const std::string target(msg.target());
    hr.path = target.substr(0, target.find('?'));
    hr.authorization = std::string(msg[http::field::authorization]);
    hr.body = std::move(msg.body());
    // Draining: every answer closes its connection, so a router's pooled connections leave this replica.
    BeastWriter w(s, fd, msg.version(), msg.keep_alive() && !stopping && !loop->draining(),
                  msg.method() == http::verb::head);
    try {
      router->handle(hr, w);
    } catch (const std::exception& e) {  // a bug, not the client's fault: answer 500 if nothing went out yet
      if (!w.started()) router->send_error(w, "other", 500, std::string("internal error: ") + e.what(), "", "", "internal_error");
      break;
    }
    if (!w.ok() || !w.keep_alive()) break;
  }
  if (replied) drain(sock);
  sock.shutdown(tcp::socket::shutdown_both, ec);
  sock.close(ec);
}

}  // namespace dsinfer::server
