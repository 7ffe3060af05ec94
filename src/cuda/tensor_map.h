// TMA tensor maps for the kernels that load by cp.async.bulk.tensor. cuTensorMapEncodeTiled comes from the driver
// through the runtime, looked up once (no link against libcuda). CUDA-only header (driver types).
#pragma once
#include <cuda.h>

namespace dsinfer::cuda {

// A tiled map of `rank` dimensions over `base` (dims and byte strides of dims 1.., innermost first; box in elements),
// element strides 1, no interleave, the 128-byte swizzle, L2 promotion of 256 bytes, out-of-range elements read as
// zero. False if the driver lacks the entry point or the layout breaks TMA's rules (alignment, box sizes).
bool encode_tiled_map_128b(CUtensorMap& map, CUtensorMapDataType type, cuuint32_t rank, const void* base,
                           const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box);

}  // namespace dsinfer::cuda
