// NCCL through dlopen (see nccl_cuda.h): a table of the few symbols used, typed from the wheel's nccl.h.
#include "parallel/nccl_cuda.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dsinfer::parallel {

static_assert(sizeof(NcclId) == sizeof(ncclUniqueId), "NcclId must hold an ncclUniqueId");

namespace {

struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetVersion) get_version = nullptr;
  std::string path, version;
};

NcclApi g_api;
Status g_status = Status::error("NCCL not loaded");
std::once_flag g_once;

template <typename F>
bool sym(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

Status load_once() {
  // NVLink multicast (NVLS) must stay off: overwrite, whatever the environment says.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const char* env = std::getenv("DSINFER_NCCL_LIBRARY");
  g_api.path = env && *env ? env : "libnccl.so.2";
  void* lib = dlopen(g_api.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return Status::errorf("more than one GPU needs NCCL, but '{}' could not be loaded ({}); install it (pip install "
                          "nvidia-nccl-cu13) and point DSINFER_NCCL_LIBRARY at its lib/libnccl.so.2, or add that "
                          "folder to LD_LIBRARY_PATH", g_api.path, why ? why : "unknown error");
  }
  NcclApi& a = g_api;
  if (!sym(lib, "ncclGetUniqueId", a.get_unique_id) || !sym(lib, "ncclCommInitRank", a.comm_init_rank) ||
      !sym(lib, "ncclAllReduce", a.all_reduce) || !sym(lib, "ncclCommDestroy", a.comm_destroy) ||
      !sym(lib, "ncclGetErrorString", a.error_string) || !sym(lib, "ncclGetVersion", a.get_version))
    return Status::errorf("'{}' lacks an NCCL symbol dsinfer needs (is it libnccl.so.2?)", g_api.path);
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
  if (comm_ && g_api.comm_destroy) g_api.comm_destroy(static_cast<ncclComm_t>(comm_));
}

Status NcclComm::init(const NcclId& id, int world, int rank) {
  DSI_RETURN_IF_ERROR(nccl_load());
  if (comm_) return Status::error("NcclComm::init: already initialised");
  ncclUniqueId uid;
  std::memcpy(&uid, id.bytes, sizeof(uid));
  ncclComm_t c = nullptr;
  DSI_RETURN_IF_ERROR(check(g_api.comm_init_rank(&c, world, uid, rank), "ncclCommInitRank"));
  comm_ = c;
  world_ = world;
  rank_ = rank;
  return Status::ok();
}

Status NcclComm::all_reduce_sum(float* buf, size_t count, void* stream) {
  if (!comm_) return Status::error("NcclComm::all_reduce_sum: not initialised");
  if (count == 0) return Status::ok();
  return check(g_api.all_reduce(buf, buf, count, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_),
                                static_cast<cudaStream_t>(stream)),
               "ncclAllReduce");
}

}  // namespace dsinfer::parallel
