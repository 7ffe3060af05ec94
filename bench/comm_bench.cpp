// Collective link baseline (issue 28, docs/multi_gpu.md): all-reduce (fp32 sum, in place) and all-to-all (equal
// blocks to every rank) through parallel::Communicator at message sizes from 4 KB to 256 MB, one thread per rank,
// timed with CUDA events on each rank's stream (rank 0 reported; the collective joins the ranks). Bus bandwidth as
// nccl-tests defines it: all-reduce 2(N-1)/N x bytes / time, all-to-all (N-1)/N x bytes / time.
//   dsinfer_comm_bench [--ranks N] [--communicator nccl|in-process] [--min-bytes 4096] [--max-bytes 268435456]
//                      [--iters 20]
// NCCL needs one GPU per rank; the in-process group runs its ranks on GPU r % visible (host staging: a functional
// baseline of the one-GPU checks, not a link measurement).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/inproc_comm.h"
#include "parallel/nccl_cuda.h"

namespace {

using dsinfer::Status;
namespace par = dsinfer::parallel;

#define CHECK_CUDA(x)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                      \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

class Device final : public par::DeviceAccess {
 public:
  Status to_host(void* dst, const void* src, size_t bytes, void* stream) const override {
    auto* s = static_cast<cudaStream_t>(stream);
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
      return Status::error("device to host copy failed");
    return Status::ok();
  }
  Status from_host(void* dst, const void* src, size_t bytes, void* stream) const override {
    auto* s = static_cast<cudaStream_t>(stream);
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
      return Status::error("host to device copy failed");
    return Status::ok();
  }
};
const Device kDevice;

struct Row {
  size_t bytes = 0;
  double ar_us = 0, a2a_us = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int32_t n = 2, iters = 20;
  size_t lo = 4096, hi = size_t(256) << 20;
  std::string kind = "nccl";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--ranks") n = std::atoi(v.c_str());
    else if (a == "--communicator") kind = v;
    else if (a == "--min-bytes") lo = size_t(std::atoll(v.c_str()));
    else if (a == "--max-bytes") hi = size_t(std::atoll(v.c_str()));
    else if (a == "--iters") iters = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  int gpus = 0;
  CHECK_CUDA(cudaGetDeviceCount(&gpus));
  if (n < 2 || iters < 1 || lo < 4 || hi < lo) {
    std::fprintf(stderr, "need --ranks >= 2, --iters >= 1, 4 <= min-bytes <= max-bytes\n");
    return 2;
  }
  const par::CommOptions copts{std::chrono::milliseconds(120000)};
  std::vector<std::unique_ptr<par::Communicator>> comms(static_cast<size_t>(n));
  if (kind == "nccl") {
    if (gpus < n) {
      std::fprintf(stderr, "NCCL: %d ranks need %d GPUs, %d visible\n", n, n, gpus);
      return 2;
    }
    if (Status s = par::nccl_load(); !s.is_ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    auto id = par::nccl_unique_id();
    if (!id.is_ok()) {
      std::fprintf(stderr, "%s\n", id.status().message().c_str());
      return 1;
    }
    std::vector<std::thread> th;
    std::vector<Status> st(size_t(n), Status::ok());
    for (int32_t r = 0; r < n; ++r)
      th.emplace_back([&, r] {
        CHECK_CUDA(cudaSetDevice(r));
        auto c = std::make_unique<par::NcclComm>(copts);
        st[size_t(r)] = c->init(*id, n, r);
        comms[size_t(r)] = std::move(c);
      });
    for (auto& t : th) t.join();
    for (const Status& s : st)
      if (!s.is_ok()) {
        std::fprintf(stderr, "%s\n", s.message().c_str());
        return 1;
      }
  } else if (kind == "in-process") {
    comms = par::make_inprocess_group(n, copts, &kDevice);
  } else {
    std::fprintf(stderr, "--communicator nccl or in-process\n");
    return 2;
  }
  std::printf("comm bench: %d ranks, %s, %d GPU(s) visible, %d iterations per size\n", n,
              comms[0]->name().c_str(), gpus, iters);
  std::vector<size_t> sizes;
  for (size_t b = lo; b <= hi; b *= 4) sizes.push_back(b);
  std::vector<Row> rows(sizes.size());
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> th;
  for (int32_t r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      CHECK_CUDA(cudaSetDevice(r % gpus));
      cudaStream_t s;
      CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      void *a = nullptr, *b = nullptr;
      CHECK_CUDA(cudaMalloc(&a, hi));
      CHECK_CUDA(cudaMalloc(&b, hi));
      CHECK_CUDA(cudaMemset(a, 0, hi));
      cudaEvent_t e0, e1;
      CHECK_CUDA(cudaEventCreate(&e0));
      CHECK_CUDA(cudaEventCreate(&e1));
      par::Communicator& c = *comms[size_t(r)];
      for (size_t i = 0; i < sizes.size() && errors[size_t(r)].empty(); ++i) {
        const size_t bytes = sizes[i] / (4 * size_t(n)) * 4 * size_t(n);  // whole floats, equal blocks per rank
        const std::vector<size_t> block(size_t(n), bytes / size_t(n));
        auto time_us = [&](auto&& op) -> double {
          Status st = op();  // warm-up
          if (st.is_ok()) st = c.barrier();
          CHECK_CUDA(cudaEventRecord(e0, s));
          for (int32_t k = 0; k < iters && st.is_ok(); ++k) st = op();
          CHECK_CUDA(cudaEventRecord(e1, s));
          CHECK_CUDA(cudaEventSynchronize(e1));
          if (!st.is_ok()) errors[size_t(r)] = st.message();
          float ms = 0;
          CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
          return 1e3 * double(ms) / double(iters);
        };
        const double ar = time_us([&] { return c.all_reduce_sum(static_cast<float*>(a), bytes / 4, s); });
        const double a2a = time_us([&] { return c.all_to_all_v(a, block, b, block, s); });
        if (r == 0) rows[i] = {bytes, ar, a2a};
      }
      cudaFree(a);
      cudaFree(b);
      cudaStreamDestroy(s);
    });
  for (auto& t : th) t.join();
  for (int32_t r = 0; r < n; ++r)
    if (!errors[size_t(r)].empty()) {
      std::fprintf(stderr, "rank %d: %s\n", r, errors[size_t(r)].c_str());
      return 1;
    }
  std::printf("%12s %14s %14s %16s %16s\n", "bytes", "allreduce us", "alltoall us", "allreduce busbw", "alltoall busbw");
  for (const Row& w : rows) {
    const double f = double(n - 1) / double(n);
    std::printf("%12zu %14.1f %14.1f %13.2f GB/s %13.2f GB/s\n", w.bytes, w.ar_us, w.a2a_us,
                2 * f * double(w.bytes) / (w.ar_us * 1e3), f * double(w.bytes) / (w.a2a_us * 1e3));
  }
  return 0;
}
