// NCCL through dlopen (see nccl_cuda.h): a table of the few symbols used, typed from the wheel's nccl.h.
#include "parallel/nccl_cuda.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/dynamic_library.h"

namespace dsinfer::parallel {

static_assert(sizeof(NcclId) == sizeof(ncclUniqueId), "NcclId must hold an ncclUniqueId");

namespace {

struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclCommGetAsyncError) async_error = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  std::string path, version;
};

NcclApi g_api;
Status g_status = Status::error("NCCL not loaded");
std::once_flag g_once;

Status load_once() {
  // NVLink multicast (NVLS) must stay off: overwrite, whatever the environment says.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const char* env = std::getenv("DSINFER_NCCL_LIBRARY");
  g_api.path = env && *env ? env : "libnccl.so.2";
  std::string why;
  void* lib = open_library(g_api.path, why);
  if (!lib) {
    return Status::errorf(
        "more than one GPU needs NCCL, but '{}' could not be loaded ({}); install it (pip install "
        "nvidia-nccl-cu13) and point DSINFER_NCCL_LIBRARY at its lib/libnccl.so.2, or add that "
        "folder to LD_LIBRARY_PATH",
        g_api.path, why);
  }
  NcclApi& a = g_api;
  const bool ok =
      load_symbol(lib, "ncclGetUniqueId", a.get_unique_id) &&
      load_symbol(lib, "ncclCommInitRank", a.comm_init_rank) &&
      load_symbol(lib, "ncclAllReduce", a.all_reduce) &&
      load_symbol(lib, "ncclAllGather", a.all_gather) &&
      load_symbol(lib, "ncclBroadcast", a.broadcast) &&
      load_symbol(lib, "ncclSend", a.send) &&
      load_symbol(lib, "ncclRecv", a.recv) &&
      load_symbol(lib, "ncclGroupStart", a.group_start) &&
      load_symbol(lib, "ncclGroupEnd", a.group_end) &&
      load_symbol(lib, "ncclCommDestroy", a.comm_destroy) &&
      load_symbol(lib, "ncclCommAbort", a.comm_abort) &&
      load_symbol(lib, "ncclCommGetAsyncError", a.async_error) &&
      load_symbol(lib, "ncclGetErrorString", a.error_string) &&
      load_symbol(lib, "ncclGetVersion", a.get_version);
  if (!ok) return Status::errorf("'{}' lacks an NCCL symbol dsinfer needs (is it libnccl.so.2?)", g_api.path);
  int v = 0;
  if (a.get_version(&v) == ncclSuccess) a.version = fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  return Status::ok();
}

Status check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return Status::errorf("{} failed: {} (NCCL {})", what, g_api.error_string ? g_api.error_string(r) : "?", int(r));
}

}  // namespace

Status nccl_load() {
  std::call_once(g_once, [] { g_status = load_once(); });
  return g_status;
}

std::string nccl_description() { return g_api.path + (g_api.version.empty() ? "" : " (NCCL " + g_api.version + ")"); }

Result<NcclId> nccl_unique_id() {
  DSI_RETURN_IF_ERROR(nccl_load());
  ncclUniqueId id;
  DSI_RETURN_IF_ERROR(check(g_api.get_unique_id(&id), "ncclGetUniqueId"));
  NcclId out;
  std::memcpy(out.bytes, &id, sizeof(id));
  return out;
}

NcclComm::~NcclComm() {
  if (comm_ && !aborted_ && g_api.comm_destroy) g_api.comm_destroy(static_cast<ncclComm_t>(comm_));
  if (scratch_) cudaFree(scratch_);
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status NcclComm::init(const NcclId& id, int32_t world, int32_t rank) {
  DSI_RETURN_IF_ERROR(nccl_load());
  if (comm_) return Status::error("NcclComm::init: already initialised");
  ncclUniqueId uid;
  std::memcpy(&uid, id.bytes, sizeof(uid));
  ncclComm_t c = nullptr;
  DSI_RETURN_IF_ERROR(check(g_api.comm_init_rank(&c, world, uid, rank), "ncclCommInitRank"));
  comm_ = c;
  world_ = world;
  rank_ = rank;
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&scratch_, sizeof(float)) != cudaSuccess)
    return Status::errorf("rank {}: could not create the NCCL barrier's stream and buffer", rank);
  stream_ = s;
  return Status::ok();
}

Status NcclComm::usable(const char* what, void* stream) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!failed_.is_ok())
    return Status::errorf("rank {}: {} failed, the parallel group has ended: {}", rank_, what, failed_.message());
  if (!comm_) return Status::errorf("NcclComm::{}: not initialised", what);
  if (!stream) return Status::errorf("NcclComm::{}: NCCL needs device buffers and a stream", what);
  return Status::ok();
}

Status NcclComm::all_reduce_sum(float* buf, size_t count, void* stream) {
  DSI_RETURN_IF_ERROR(usable("all_reduce_sum", stream));
  if (count == 0) return Status::ok();
  return check(g_api.all_reduce(buf, buf, count, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_),
                                static_cast<cudaStream_t>(stream)),
               "ncclAllReduce");
}

Status NcclComm::all_gather(const void* send, void* recv, size_t bytes, void* stream) {
  DSI_RETURN_IF_ERROR(usable("all_gather", stream));
  if (bytes == 0) return Status::ok();
  return check(
      g_api.all_gather(send, recv, bytes, ncclUint8, static_cast<ncclComm_t>(comm_), static_cast<cudaStream_t>(stream)),
      "ncclAllGather");
}

Status NcclComm::all_to_all_v(const void* send, std::span<const size_t> send_bytes, void* recv,
                              std::span<const size_t> recv_bytes, void* stream) {
  DSI_RETURN_IF_ERROR(usable("all_to_all_v", stream));
  if (send_bytes.size() != size_t(world_) || recv_bytes.size() != size_t(world_))
    return Status::errorf("all_to_all_v: {} send / {} receive sizes for {} ranks", send_bytes.size(), recv_bytes.size(),
                          world_);
  auto* c = static_cast<ncclComm_t>(comm_);
  auto* s = static_cast<cudaStream_t>(stream);
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  DSI_RETURN_IF_ERROR(check(g_api.group_start(), "ncclGroupStart"));
  Status st = Status::ok();
  for (int32_t q = 0; q < world_ && st.is_ok(); ++q) {
    if (send_bytes[size_t(q)]) st = check(g_api.send(src, send_bytes[size_t(q)], ncclUint8, q, c, s), "ncclSend");
    if (st.is_ok() && recv_bytes[size_t(q)])
      st = check(g_api.recv(dst, recv_bytes[size_t(q)], ncclUint8, q, c, s), "ncclRecv");
    src += send_bytes[size_t(q)];
    dst += recv_bytes[size_t(q)];
  }
  const Status end = check(g_api.group_end(), "ncclGroupEnd");
  return st.is_ok() ? end : st;
}

Status NcclComm::broadcast(void* buf, size_t bytes, int32_t root, void* stream) {
  DSI_RETURN_IF_ERROR(usable("broadcast", stream));
  if (bytes == 0) return Status::ok();
  return check(g_api.broadcast(buf, buf, bytes, ncclUint8, root, static_cast<ncclComm_t>(comm_),
                               static_cast<cudaStream_t>(stream)),
               "ncclBroadcast");
}

Status NcclComm::barrier() {
  DSI_RETURN_IF_ERROR(usable("barrier", stream_));
  auto* s = static_cast<cudaStream_t>(stream_);
  DSI_RETURN_IF_ERROR(
      check(g_api.all_reduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_), s),
            "ncclAllReduce (barrier)"));
  // Poll instead of cudaStreamSynchronize: a dead peer must not hang this rank past the deadline.
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return Status::ok();
    if (e != cudaErrorNotReady) return Status::errorf("rank {}: barrier: {}", rank_, cudaGetErrorString(e));
    DSI_RETURN_IF_ERROR(health());
    if (std::chrono::steady_clock::now() > deadline) {
      const Status why =
          Status::errorf("rank {} waited {} ms in barrier (collective deadline)", rank_, opts_.timeout.count());
      abort(why);
      return why;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void NcclComm::abort(const Status& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  if (failed_.is_ok()) failed_ = reason.is_ok() ? Status::error("aborted") : reason;
  if (comm_ && !aborted_ && g_api.comm_abort) {
    aborted_ = true;
    (void)g_api.comm_abort(static_cast<ncclComm_t>(comm_));
  }
}

Status NcclComm::health() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!failed_.is_ok()) return failed_;
  if (!comm_ || aborted_) return Status::ok();
  ncclResult_t async = ncclSuccess;
  if (g_api.async_error(static_cast<ncclComm_t>(comm_), &async) == ncclSuccess && async != ncclSuccess &&
      async != ncclInProgress)
    failed_ = check(async, "NCCL (asynchronous error)");
  return failed_;
}

}  // namespace dsinfer::parallel
