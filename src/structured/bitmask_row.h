// One token-bitmask row (int32 words in host memory) as the DLTensor that xgrammar's matchers fill.
#pragma once
#include <cstdint>
#include <span>

#include <xgrammar/xgrammar.h>

namespace dsinfer::structured {

// `shape` is the tensor's one-element shape array; it must outlive the tensor.
inline DLTensor bitmask_row_tensor(std::span<int32_t> row, int64_t* shape) {
  shape[0] = int64_t(row.size());
  DLTensor t{};
  t.data = row.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  return t;
}

}  // namespace dsinfer::structured
