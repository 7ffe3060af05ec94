// A per-kernel timeline of any CUDA program, the kernels of CUDA graphs included (Nsight Systems is not on the device
// machine: docs of the device library, KINDS.md): a CUPTI injection library. The driver loads it at cuInit and calls
// InitializeInjection(), which enables CUPTI's concurrent-kernel activity records; at exit every record goes to the
// CSV file named by DSINFER_KERNEL_TRACE (default kernel_trace.csv), one line a kernel:
//   start_ns,end_ns,stream,graph,graph_node,grid_x,grid_y,grid_z,block_x,name
// (timestamps on the GPU's clock, mangled names: tools/kernel_trace/timeline.py reads the file). With
// DSINFER_KERNEL_TRACE_API=1 the CUDA runtime calls are recorded too, on the same clock, into <file>.api.csv:
//   start_ns,end_ns,thread,correlation,name
// so an idle gap between two kernels can be put on the host (the call that launched the next kernel, and what the
// host called since the last wait returned); the device's copies go there too (thread 0, named "[copy] <kind> <bytes>
// B", their times on the device), since a gap without kernels may hold copies.
// Usage: CUDA_INJECTION64_PATH=$PWD/libdsinfer_kernel_trace.so DSINFER_KERNEL_TRACE=trace.csv <program> ...
// (libcupti.so of the CUDA toolkit on the library path; CMake target dsinfer_kernel_trace where the toolkit has
// CUPTI). The records cost time: a traced b1 decode step ran ~9 % longer than an untraced one (H100, session 36), so
// read a trace for its order and relative costs, and time steps untraced.
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Rec {
  uint64_t start, end, graph_node;
  uint32_t stream, graph;
  int32_t gx, gy, gz, bx;
  std::string name;
};

struct ApiRec {
  uint64_t start, end;
  uint32_t thread, correlation, cbid;
  int64_t copy_bytes = -1;  // >= 0: a device copy of this kind (cbid holds CUpti_ActivityMemcpyKind)
};

std::mutex g_mu;
std::vector<Rec>* g_recs = nullptr;  // leaked on purpose: written at exit
std::vector<ApiRec>* g_api = nullptr;
constexpr size_t kBuffer = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buf, size_t* size, size_t* max_records) {
  *buf = static_cast<uint8_t*>(std::aligned_alloc(8, kBuffer));
  *size = *buf ? kBuffer : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
      g_api->push_back({a->start, a->end, a->threadId, a->correlationId, a->cbid});
      continue;
    }
    if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
      g_api->push_back({m->start, m->end, 0, m->correlationId, m->copyKind, int64_t(m->bytes)});
      continue;
    }
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
    g_recs->push_back({k->start, k->end, k->graphNodeId, k->streamId, k->graphId, k->gridX, k->gridY, k->gridZ,
                       k->blockX, k->name ? k->name : "?"});
  }
  std::free(buf);
}

void write_trace() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("DSINFER_KERNEL_TRACE");
  std::FILE* f = std::fopen(path && *path ? path : "kernel_trace.csv", "w");
  if (!f) return;
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(f, "start_ns,end_ns,stream,graph,graph_node,grid_x,grid_y,grid_z,block_x,name\n");
  for (const Rec& r : *g_recs)
    std::fprintf(f, "%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,%s\n", (unsigned long long)r.start, (unsigned long long)r.end,
                 r.stream, r.graph, (unsigned long long)r.graph_node, r.gx, r.gy, r.gz, r.bx, r.name.c_str());
  std::fclose(f);
  if (g_api->empty()) return;
  std::FILE* fa = std::fopen((std::string(path && *path ? path : "kernel_trace.csv") + ".api.csv").c_str(), "w");
  if (!fa) return;
  std::fprintf(fa, "start_ns,end_ns,thread,correlation,name\n");
  for (const ApiRec& a : *g_api) {
    std::string name;
    if (a.copy_bytes >= 0) {
      const char* kind = a.cbid == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "HtoD"
                         : a.cbid == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "DtoH"
                         : a.cbid == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? "DtoD"
                                                                      : "other";
      name = std::string("[copy] ") + kind + " " + std::to_string(a.copy_bytes) + " B";
    } else {
      const char* n = nullptr;
      name = cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a.cbid, &n) == CUPTI_SUCCESS && n ? n : "?";
    }
    std::fprintf(fa, "%llu,%llu,%u,%u,%s\n", (unsigned long long)a.start, (unsigned long long)a.end, a.thread,
                 a.correlation, name.c_str());
  }
  std::fclose(fa);
}

}  // namespace

extern "C" int InitializeInjection() {
  g_recs = new std::vector<Rec>();
  g_recs->reserve(1 << 20);
  g_api = new std::vector<ApiRec>();
  const char* api = std::getenv("DSINFER_KERNEL_TRACE_API");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI activity tracing could not be enabled\n");
    return 0;
  }
  if (api && std::string(api) == "1" && (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS ||
                                         cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS))
    std::fprintf(stderr, "kernel_trace: CUPTI runtime API or copy records could not be enabled\n");
  std::atexit(write_trace);
  return 1;
}
