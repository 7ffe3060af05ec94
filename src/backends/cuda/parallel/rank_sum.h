// The in-process communicator's device all-reduce for ranks sharing one GPU (inproc_device.h): every element of the
// ranks' buffers summed in rank order 0, 1, .., n-1 in fp64 and rounded once to fp32 (the bits of the host path,
// parallel/inproc_comm.cpp reduce), written back into every rank's buffer. Plain header (no CUDA types, no Status:
// inproc_device_cuda.cpp checks the arguments and the launch).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsinfer::backends::detail {

inline constexpr int32_t kMaxSharedRanks = 16;  // ranks one launch sums (the pointers travel as a kernel argument)

struct RankBuffers {
  float* buf[kMaxSharedRanks] = {};
};

// In place: each element i of every buf[r] (r < n) becomes float(sum over r in order of double(buf[r][i])).
void launch_rank_order_sum(const RankBuffers& b, int32_t n, size_t count, void* stream);

}  // namespace dsinfer::backends::detail
