// pd_transport_ucx.h: the P/D state transport over UCX (libucp through dlopen, a table of the symbols used, typed
// from Debian's ucp.h).
#include "server/pd_transport_ucx.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#if DSINFER_HAS_UCX
#include <ucp/api/ucp.h>

#include "core/dynamic_library.h"
#endif

namespace dsinfer::server::kv_transfer {

#if !DSINFER_HAS_UCX

Status ucx_available() {
  return Status::error("this dsinfer was built without UCX (ucp.h of libucx-dev was not found): "
                       "--kv-transfer-backend ucx is not available, use tcp");
}
struct UcxSender::Listener {};
UcxSender::~UcxSender() = default;
bool UcxSender::start(const std::string&, int, std::string* error) {
  *error = ucx_available().message();
  return false;
}
void UcxSender::stop() {}
void UcxSender::accept_loop(Listener*) {}
FetchResult fetch_ucx(const std::string&, int, const std::string&, const TransferOptions&) {
  return failed_fetch({}, ucx_available().message(), Clock::now());
}

#else

namespace {

struct UcxApi {
  decltype(&ucp_config_read) config_read = nullptr;
  decltype(&ucp_config_release) config_release = nullptr;
  decltype(&ucp_init_version) init_version = nullptr;
  decltype(&ucp_worker_create) worker_create = nullptr;
  decltype(&ucp_worker_destroy) worker_destroy = nullptr;
  decltype(&ucp_worker_progress) worker_progress = nullptr;
  decltype(&ucp_worker_get_efd) worker_get_efd = nullptr;
  decltype(&ucp_worker_arm) worker_arm = nullptr;
  decltype(&ucp_listener_create) listener_create = nullptr;
  decltype(&ucp_listener_destroy) listener_destroy = nullptr;
  decltype(&ucp_listener_query) listener_query = nullptr;
  decltype(&ucp_listener_reject) listener_reject = nullptr;
  decltype(&ucp_ep_create) ep_create = nullptr;
  decltype(&ucp_ep_close_nbx) ep_close_nbx = nullptr;
  decltype(&ucp_stream_send_nbx) stream_send_nbx = nullptr;
  decltype(&ucp_stream_recv_nbx) stream_recv_nbx = nullptr;
  decltype(&ucp_request_free) request_free = nullptr;
  decltype(&ucs_status_string) status_string = nullptr;
  ucp_context_h context = nullptr;
};

UcxApi g;
Status g_status = Status::error("UCX not loaded");
std::once_flag g_once;

Status load_once() {
  const char* env = std::getenv("DSINFER_UCX_LIBRARY");
  const std::string path = env && *env ? env : "libucp.so.0";
  std::string why;
  void* lib = open_library(path, why);
  if (!lib) {
    return Status::errorf("--kv-transfer-backend ucx needs UCX, but '{}' could not be loaded ({}); install it "
                          "(Debian: libucx0) or point DSINFER_UCX_LIBRARY at a libucp.so",
                          path, why);
  }
  // libucs (ucs_status_string) is a dependency of libucp: dlsym on libucp's handle searches it too.
  const bool ok =
      load_symbol(lib, "ucp_config_read", g.config_read) &&
      load_symbol(lib, "ucp_config_release", g.config_release) &&
      load_symbol(lib, "ucp_init_version", g.init_version) &&
      load_symbol(lib, "ucp_worker_create", g.worker_create) &&
      load_symbol(lib, "ucp_worker_destroy", g.worker_destroy) &&
      load_symbol(lib, "ucp_worker_progress", g.worker_progress) &&
      load_symbol(lib, "ucp_worker_get_efd", g.worker_get_efd) &&
      load_symbol(lib, "ucp_worker_arm", g.worker_arm) &&
      load_symbol(lib, "ucp_listener_create", g.listener_create) &&
      load_symbol(lib, "ucp_listener_destroy", g.listener_destroy) &&
      load_symbol(lib, "ucp_listener_query", g.listener_query) &&
      load_symbol(lib, "ucp_listener_reject", g.listener_reject) &&
      load_symbol(lib, "ucp_ep_create", g.ep_create) &&
      load_symbol(lib, "ucp_ep_close_nbx", g.ep_close_nbx) &&
      load_symbol(lib, "ucp_stream_send_nbx", g.stream_send_nbx) &&
      load_symbol(lib, "ucp_stream_recv_nbx", g.stream_recv_nbx) &&
      load_symbol(lib, "ucp_request_free", g.request_free) &&
      load_symbol(lib, "ucs_status_string", g.status_string);
  if (!ok) return Status::errorf("'{}' lacks a UCX symbol dsinfer uses (built against ucp.h {}.{})", path, UCP_API_MAJOR,
                                 UCP_API_MINOR);
  ucp_config_t* cfg = nullptr;
  ucs_status_t st = g.config_read(nullptr, nullptr, &cfg);
  if (st != UCS_OK) return Status::errorf("UCX: ucp_config_read: {}", g.status_string(st));
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  p.features = UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP;
  p.mt_workers_shared = 1;  // a worker per connection and per fetch, each on its own thread
  st = g.init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &g.context);
  g.config_release(cfg);
  if (st != UCS_OK) return Status::errorf("UCX: ucp_init: {}", g.status_string(st));
  return Status::ok();
}

double left_s(Clock::time_point until) { return std::chrono::duration<double>(until - Clock::now()).count(); }

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A UCX operation's completion, filled by its callback.
struct Op {
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;
};
void on_send(void*, ucs_status_t st, void* user) {
  auto* op = static_cast<Op*>(user);
  op->status = st;
  op->done = true;
}
void on_recv(void*, ucs_status_t st, size_t length, void* user) {
  auto* op = static_cast<Op*>(user);
  op->status = st;
  op->length = length;
  op->done = true;
}

// One UCX worker, used by one thread at a time; waits sleep on its event fd (UCP_FEATURE_WAKEUP) between
// progress calls, or poll every 0.1 ms where the transports give none.
class Worker {
 public:
  static Result<std::unique_ptr<Worker>> create() {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    auto w = std::unique_ptr<Worker>(new Worker);
    const ucs_status_t st = g.worker_create(g.context, &wp, &w->w_);
    if (st != UCS_OK) return Status::errorf("UCX: ucp_worker_create: {}", g.status_string(st));
    if (g.worker_get_efd(w->w_, &w->efd_) != UCS_OK) w->efd_ = -1;
    return w;
  }
  ~Worker() {
    if (w_) g.worker_destroy(w_);
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ucp_worker_h get() const { return w_; }

  // Progresses until done() holds (true), or `until` passes or *stopping turns true first (false).
  template <typename F>
  bool wait(F done, Clock::time_point until, const std::atomic<bool>* stopping = nullptr) {
    while (true) {
      while (g.worker_progress(w_) != 0) {
      }
      if (done()) return true;
      const double left = left_s(until);
      if (left <= 0 || (stopping && stopping->load())) return false;
      if (efd_ < 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      const ucs_status_t st = g.worker_arm(w_);
      if (st == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress again
      if (st != UCS_OK) {
        efd_ = -1;
        continue;
      }
      pollfd p{efd_, POLLIN, 0};
      ::poll(&p, 1, int(std::min(left, 0.05) * 1000) + 1);
    }
  }

 private:
  Worker() = default;
  ucp_worker_h w_ = nullptr;
  int efd_ = -1;
};

// A UCX stream endpoint as kv_transfer's Stream. Peer failures come through the endpoint's error handler
// (UCP_ERR_HANDLING_MODE_PEER) into a Failure of its own; an operation that does not finish in time closes the
// endpoint by force, which completes it, before its request is released, so no late byte lands in a buffer the
// caller reuses. An endpoint whose close does not finish in time leaves its Failure behind (a few bytes), since
// UCX may still call the handler when the worker goes.
class UcxStream final : public Stream {
 public:
  explicit UcxStream(Worker& w) : w_(w), fail_(new Failure) {}
  ~UcxStream() override {
    close(fail_->failed);
    if (closed_ok_) delete fail_;
  }
  UcxStream(const UcxStream&) = delete;
  UcxStream& operator=(const UcxStream&) = delete;

  Status connect(const sockaddr_in& a) {
    ucp_ep_params_t p = base_params();
    p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
    p.sockaddr.addrlen = sizeof a;
    const ucs_status_t st = g.ep_create(w_.get(), &p, &ep_);
    if (st != UCS_OK) ep_ = nullptr;
    return st == UCS_OK ? Status::ok() : Status::errorf("ucp_ep_create: {}", g.status_string(st));
  }
  Status accept(ucp_conn_request_h r) {
    ucp_ep_params_t p = base_params();
    p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
    p.conn_request = r;
    const ucs_status_t st = g.ep_create(w_.get(), &p, &ep_);
    if (st != UCS_OK) ep_ = nullptr;
    return st == UCS_OK ? Status::ok() : Status::errorf("ucp_ep_create: {}", g.status_string(st));
  }
  bool failed() const { return fail_->failed; }
  // After a whole answer: the puller closes first, once it has read everything (closing here at once could drop
  // bytes still on their way); waits for that, at most `timeout_s`.
  void linger(double timeout_s, const std::atomic<bool>& stopping) {
    if (ep_) w_.wait([&] { return failed(); }, after(timeout_s), &stopping);
  }
  std::string failure() const { return fail_->failed ? g.status_string(fail_->status) : ""; }

  std::string read_exact(char* out, size_t n, double io_timeout_s, Clock::time_point deadline,
                         uint64_t* counted) override {
    size_t got = 0;
    while (got < n) {
      // A failed endpoint may still hold bytes that arrived before the peer went: they are read first.
      if (!ep_) return fmt::format("the connection closed after {} of {} bytes (UCX: {})", got, n, failure());
      Op op;
      size_t len = 0;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.recv_stream = on_recv;
      p.user_data = &op;
      void* r = g.stream_recv_nbx(ep_, out + got, n - got, &len, &p);
      if (UCS_PTR_IS_ERR(r))
        return fmt::format("the connection closed after {} of {} bytes (UCX: {})", got, n,
                           g.status_string(UCS_PTR_STATUS(r)));
      if (r == nullptr) {
        op.length = len;
      } else {
        const auto until = std::min(deadline, after(io_timeout_s));
        const bool done = w_.wait([&] { return op.done || failed(); }, until);
        if (!op.done) {
          abort(r, op);
          if (done) return fmt::format("the connection closed after {} of {} bytes (UCX: {})", got, n, failure());
          if (Clock::now() >= deadline) return "the transfer's total timeout passed";
          return fmt::format("no data for {} s", io_timeout_s);
        }
        g.request_free(r);
        if (op.status != UCS_OK)
          return fmt::format("the connection closed after {} of {} bytes (UCX: {})", got, n,
                             g.status_string(op.status));
      }
      got += op.length;
      *counted += op.length;
    }
    return "";
  }

  bool write_all(const char* data, size_t n, double io_timeout_s, const std::atomic<bool>& stopping) override {
    constexpr size_t kPiece = size_t(1) << 20;  // each piece's send waits at most io_timeout_s
    for (size_t off = 0; off < n; off += kPiece) {
      if (!ep_ || failed() || stopping.load()) return false;
      Op op;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      p.cb.send = on_send;
      p.user_data = &op;
      void* r = g.stream_send_nbx(ep_, data + off, std::min(kPiece, n - off), &p);
      if (UCS_PTR_IS_ERR(r)) return false;
      if (r == nullptr) continue;
      w_.wait([&] { return op.done || failed(); }, after(io_timeout_s), &stopping);
      if (!op.done) {
        abort(r, op);
        return false;
      }
      g.request_free(r);
      if (op.status != UCS_OK) return false;
    }
    return true;
  }

  // Closes the endpoint: flushing what was sent first (at most 2 s), or by force. False when the close did not
  // finish in time.
  bool close(bool force) {
    if (!ep_) return closed_ok_;
    Op op;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = on_send;
    p.user_data = &op;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* r = g.ep_close_nbx(ep_, &p);
    ep_ = nullptr;
    if (r == nullptr || UCS_PTR_IS_ERR(r)) return closed_ok_ = true;
    closed_ok_ = w_.wait([&] { return op.done; }, after(force ? 1.0 : 2.0));
    g.request_free(r);
    return closed_ok_;
  }
  // Closes (by force after a failure); true when the endpoint is gone and its worker may serve another.
  bool finish() { return close(failed()); }

 private:
  ucp_ep_params_t base_params() {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t st) {
      auto* f = static_cast<Failure*>(arg);
      f->failed = true;
      f->status = st;
    };
    p.err_handler.arg = fail_;
    return p;
  }
  // An operation that did not finish: the endpoint closed by force (which completes it), then its request freed.
  void abort(void* r, Op& op) {
    close(true);
    w_.wait([&] { return op.done; }, after(1.0));
    g.request_free(r);
  }

  struct Failure {
    bool failed = false;
    ucs_status_t status = UCS_OK;
  };
  Worker& w_;
  Failure* fail_;
  ucp_ep_h ep_ = nullptr;
  bool closed_ok_ = true;  // false once a close did not finish in time
};

// Idle workers, taken by the next connection or pull and given back after a clean close (creating one opens every
// UCX transport: ~10 ms on the dev machine, on each side of every pull). Never destroyed, as the context.
class WorkerPool {
 public:
  Result<std::unique_ptr<Worker>> take() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!idle_.empty()) {
        std::unique_ptr<Worker> w = std::move(idle_.back());
        idle_.pop_back();
        return w;
      }
    }
    return Worker::create();
  }
  void give(std::unique_ptr<Worker> w) {
    std::lock_guard<std::mutex> lk(mu_);
    if (idle_.size() < 16) idle_.push_back(std::move(w));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> idle_;
};

WorkerPool& pool() {
  static WorkerPool* p = new WorkerPool;
  return *p;
}

bool ipv4(const std::string& host, int port, sockaddr_in* a) {
  *a = sockaddr_in{};
  a->sin_family = AF_INET;
  a->sin_port = htons(uint16_t(port));
  return port >= 0 && port <= 65535 && ::inet_pton(AF_INET, host.c_str(), &a->sin_addr) == 1;
}

}  // namespace

Status ucx_available() {
  std::call_once(g_once, [] { g_status = load_once(); });
  return g_status;
}

struct UcxSender::Listener {
  std::unique_ptr<Worker> worker;
  ucp_listener_h listener = nullptr;
  std::vector<ucp_conn_request_h> pending;  // filled by the connection handler, inside the accept thread's progress
  ~Listener() {
    for (ucp_conn_request_h r : pending) g.listener_reject(listener, r);
    if (listener) g.listener_destroy(listener);
  }
};

UcxSender::~UcxSender() { stop(); }

bool UcxSender::start(const std::string& host, int port, std::string* error) {
  const Status avail = ucx_available();
  if (!avail) {
    *error = avail.message();
    return false;
  }
  sockaddr_in a;
  if (!ipv4(host, port, &a)) {
    *error = fmt::format("kv transfer (ucx): '{}:{}' is not an IPv4 address and port", host, port);
    return false;
  }
  auto l = std::make_unique<Listener>();
  auto w = Worker::create();
  if (!w) {
    *error = w.status().message();
    return false;
  }
  l->worker = std::move(*w);
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
  lp.sockaddr.addrlen = sizeof a;
  lp.conn_handler.cb = [](ucp_conn_request_h r, void* arg) { static_cast<Listener*>(arg)->pending.push_back(r); };
  lp.conn_handler.arg = l.get();
  ucs_status_t st = g.listener_create(l->worker->get(), &lp, &l->listener);
  ucp_listener_attr_t la{};
  la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (st == UCS_OK) st = g.listener_query(l->listener, &la);
  if (st != UCS_OK) {
    *error = fmt::format("kv transfer (ucx): cannot listen on {}:{}: {}", host, port, g.status_string(st));
    return false;
  }
  port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&la.sockaddr)->sin_port);
  accept_thread_ = std::thread([this, raw = l.release()] { accept_loop(raw); });
  return true;
}

void UcxSender::accept_loop(Listener* raw) {
  std::unique_ptr<Listener> l(raw);  // the listener and its worker live on this thread
  while (!stopping_.load()) {
    l->worker->wait([&] { return !l->pending.empty(); }, after(0.1), &stopping_);
    if (stopping_.load()) break;
    for (ucp_conn_request_h r : l->pending) {
      ++serving_;
      std::thread([this, r] {
        auto w = pool().take();
        bool reusable = false;
        if (w) {
          UcxStream s(**w);
          if (s.accept(r) && serve(s, stopping_)) s.linger(opts_.io_timeout_s, stopping_);
          reusable = s.finish();
        }
        if (reusable) pool().give(std::move(*w));
        --serving_;
      }).detach();
    }
    l->pending.clear();
  }
}

void UcxSender::stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  while (serving_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

FetchResult fetch_ucx(const std::string& host, int port, const std::string& id, const TransferOptions& o) {
  const auto t0 = Clock::now();
  const auto deadline = after(o.total_timeout_s);
  const Status avail = ucx_available();
  if (!avail) return failed_fetch({}, avail.message(), t0);
  sockaddr_in a;
  if (port <= 0 || !ipv4(host, port, &a))
    return failed_fetch({}, fmt::format("connect: '{}:{}' is not an IPv4 address and port", host, port), t0);
  auto w = pool().take();
  if (!w) return failed_fetch({}, w.status().message(), t0);
  FetchResult r;
  bool reusable = false;
  {
    UcxStream s(**w);  // closed before its worker goes back
    const Status c = s.connect(a);
    if (!c) return failed_fetch({}, fmt::format("connect to {}:{} (ucx): {}", host, port, c.message()), t0);
    r = fetch_over(s, id, o, t0, deadline);
    if (!r.ok && r.bytes_received == 0 && s.failed())
      r.error = fmt::format("connect to {}:{} (ucx): {} ({})", host, port, s.failure(), r.error);
    reusable = s.finish();
  }
  if (reusable) pool().give(std::move(*w));
  return r;
}

#endif  // DSINFER_HAS_UCX

}  // namespace dsinfer::server::kv_transfer
