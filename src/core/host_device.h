// DSI_HD marks small inline functions compiled for both host and device: __host__ __device__ under nvcc, plain
// `inline` in host-only translation units. Headers using it stay free of CUDA types and CUDA headers.
#pragma once

#if defined(__CUDACC__)
#define DSI_HD __host__ __device__ __forceinline__
#else
#define DSI_HD inline
#endif
