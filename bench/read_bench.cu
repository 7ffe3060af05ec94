// The read floor of a size (issue 31): how long a kernel that only streams S bytes from HBM takes on this GPU, for
// the sizes of the decode weights (2 MB router ... 33.5 MB wq_b / wo_a / wo_b ... 1 GB lm head). A GEMM of a weight
// of S bytes cannot beat it, so it is the honest per-launch floor beside the copy-rate one (bytes / copy rate).
// Each size is timed two ways, as gemm_bench times kernels:
//  - eager: an event pair around each launch, median of kRuns, the input rotating over kSets regions (no L2 reuse);
//  - graph: kGraphLaunches launches in one CUDA graph (regions rotating), the mean per launch: no host gaps, so the
//    kernel's own ramp and tail.
// Grids: persistent (blocks per SM x SMs, a loop over tiles, U coalesced 16-byte loads in flight a thread) and flat
// (one tile: U words a thread). The empty kernel's times are the zero-byte row.
// Usage: dsinfer_read_bench [MB]   (MB: that size only, e.g. under a profiler)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    const cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

constexpr int kThreads = 256, kSets = 4, kWarm = 3, kRuns = 25, kGraphLaunches = 16;

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Reads n 16-byte words in tiles of U x (grid threads) words: load u of thread i in tile j takes word
// (j * U + u) * threads + i, so every load instruction of a warp is coalesced and a thread has U loads in flight. The
// XOR of everything goes to sink only when it equals a value the data never gives, so the loads cannot be dropped.
template <int U>
__global__ void __launch_bounds__(kThreads) read_kernel(const uint4* p, int64_t n, uint32_t* sink) {
  const int64_t threads = int64_t(gridDim.x) * blockDim.x, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t acc = 0;
  for (int64_t base = 0; base < n; base += U * threads) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t w = base + u * threads + i;
      v[u] = w < n ? ld_stream(p + w) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

__global__ void empty_kernel(uint32_t* sink) {
  if (sink == nullptr) *sink = 0;
}

using Launch = std::function<void(int set, cudaStream_t s)>;

double eager_us(const Launch& f) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarm; ++i) f(i % kSets, nullptr);
  std::vector<float> t;
  for (int i = 0; i < kRuns; ++i) {
    CHECK(cudaEventRecord(a));
    f(i % kSets, nullptr);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return 1e3 * double(t[t.size() / 2]);
}

double graph_us(const Launch& f) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kGraphLaunches; ++i) f(i % kSets, s);
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < kWarm; ++i) CHECK(cudaGraphLaunch(ge, s));
  std::vector<float> t;
  for (int i = 0; i < 9; ++i) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaStreamDestroy(s));
  return 1e3 * double(t[t.size() / 2]) / kGraphLaunches;
}

struct Grid {
  const char* name;
  int per_sm;  // blocks per SM (persistent); 0 = flat
  int u;       // 16-byte loads in flight a thread
};

template <int U>
void launch_read(const uint4* p, int64_t n, int blocks, uint32_t* sink, cudaStream_t s) {
  read_kernel<U><<<blocks, kThreads, 0, s>>>(p, n, sink);
}

void read(const Grid& g, const uint4* p, int64_t n, int sms, uint32_t* sink, cudaStream_t s) {
  const int64_t chunks = (n + g.u - 1) / g.u;
  const int blocks = g.per_sm > 0 ? g.per_sm * sms : int((chunks + kThreads - 1) / kThreads);
  if (g.u == 4) launch_read<4>(p, n, blocks, sink, s);
  else if (g.u == 8) launch_read<8>(p, n, blocks, sink, s);
  else launch_read<16>(p, n, blocks, sink, s);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> mb = {2.1, 4.2, 8.4, 16.8, 33.6, 67.1, 134.2, 268.4, 1059.0};
  if (argc > 1) {
    const double one = std::atof(argv[1]);
    if (!(one > 0.0 && one <= 1059.0)) {
      std::fprintf(stderr, "dsinfer_read_bench: MB must be in (0, 1059], got '%s'\n", argv[1]);
      return 2;
    }
    mb = {one};
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t region = size_t(1060) << 20;  // the largest size, rounded up
  uint8_t* base = nullptr;
  CHECK(cudaMalloc(&base, region * kSets));
  CHECK(cudaMemset(base, 0x5a, region * kSets));
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&sink, 4));
  const Grid grids[] = {{"p2u8", 2, 8}, {"p4u4", 4, 4}, {"p4u8", 4, 8}, {"p8u4", 8, 4},
                        {"p2u16", 2, 16}, {"flat4", 0, 4}, {"flat8", 0, 8}};
  std::printf("read floor on %s (%d SMs): us a launch, eager (event pair, median of %d) / graph (%d launches, mean); "
              "regions rotate over %d x %zu MB\n", prop.name, sms, kRuns, kGraphLaunches, kSets, region >> 20);
  const double e0 = eager_us([&](int, cudaStream_t s) { empty_kernel<<<sms, kThreads, 0, s>>>(sink); });
  const double g0 = graph_us([&](int, cudaStream_t s) { empty_kernel<<<sms, kThreads, 0, s>>>(sink); });
  std::printf("empty kernel (%d blocks): eager %.2f us, graph %.2f us\n", sms, e0, g0);
  std::printf("%9s", "MB");
  for (const Grid& g : grids) std::printf(" | %-6s eager  graph", g.name);
  std::printf(" | best graph us  TB/s\n");
  for (double m : mb) {
    const int64_t n = int64_t(m * 1e6) / 16;
    std::printf("%9.1f", m);
    double best = 1e30;
    for (const Grid& g : grids) {
      auto f = [&](int set, cudaStream_t s) {
        read(g, reinterpret_cast<const uint4*>(base + size_t(set) * region), n, sms, sink, s);
      };
      const double e = eager_us(f), gr = graph_us(f);
      best = std::min(best, gr);
      std::printf(" | %6s %6.1f %6.1f", "", e, gr);
    }
    std::printf(" | %8.1f %6.2f\n", best, double(n) * 16.0 / (best * 1e-6) / 1e12);
  }
  CHECK(cudaFree(base));
  CHECK(cudaFree(sink));
  return 0;
}
