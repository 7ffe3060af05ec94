// MoE expert layer on the GPU (see moe_cuda.h; layouts in docs/kernels.md "GEMM and MoE"):
//   1. permutation: count per expert (one block, integer shared-memory atomics: order-free), exclusive scan, then one
//      block per expert ranks its assignments in assignment order (ballot prefix sums) -> offsets / perm_token / pos_of;
//   2. grouped GEMMs over the permuted rows (x rows gathered through perm_token): h1 = x W1^T, h3 = x W3^T;
//   3. clamped SwiGLU in place (h1 <- silu(min(h1, L)) * clamp(h3, -L, L));
//   4. grouped GEMM y_p = h1 W2^T;
//   5. shared expert with gemm_cuda on all T rows;
//   6. combine: out[t] = sum_k weight[t,k] * y_p[pos_of[t,k]] in k order, + shared[t]. No float atomics anywhere.
#include <algorithm>
#include <cstdint>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_common.h"
#include "ops/gemm/gemm_kernels.cuh"
#include "ops/moe/moe_cuda.h"

namespace dsinfer::ops::cuda {

struct MoeWorkspace::Impl {
  int64_t T = 0, topk = 0, dim = 0, inter = 0, experts = 0;
  dsinfer::cuda::DeviceBuffer<int32_t> offsets, perm_token, pos_of;
  dsinfer::cuda::DeviceBuffer<float> h1, h3, yp, sh1, sh3, shy;
};

MoeWorkspace::MoeWorkspace() : impl(std::make_unique<Impl>()) {}
MoeWorkspace::~MoeWorkspace() = default;
const int32_t* MoeWorkspace::offsets() const { return impl->offsets.data(); }
const int32_t* MoeWorkspace::perm_token() const { return impl->perm_token.data(); }
const int32_t* MoeWorkspace::pos_of() const { return impl->pos_of.data(); }

Status MoeWorkspace::reserve(int64_t T, int64_t topk, int64_t dim, int64_t inter, int64_t experts) {
  if (T < 0 || topk <= 0 || dim <= 0 || inter <= 0 || experts <= 0)
    return Status::errorf("MoeWorkspace::reserve: bad sizes T={} topk={} dim={} inter={} experts={}", T, topk, dim,
                          inter, experts);
  Impl& w = *impl;
  if (T <= w.T && topk <= w.topk && dim <= w.dim && inter <= w.inter && experts <= w.experts) return Status::ok();
  T = std::max(T, w.T), topk = std::max(topk, w.topk), dim = std::max(dim, w.dim);
  inter = std::max(inter, w.inter), experts = std::max(experts, w.experts);
  const size_t tk = size_t(std::max<int64_t>(T * topk, 1)), t1 = size_t(std::max<int64_t>(T, 1));
  DSI_RETURN_IF_ERROR(w.offsets.alloc(size_t(experts + 1), "moe offsets"));
  DSI_RETURN_IF_ERROR(w.perm_token.alloc(tk, "moe perm_token"));
  DSI_RETURN_IF_ERROR(w.pos_of.alloc(tk, "moe pos_of"));
  DSI_RETURN_IF_ERROR(w.h1.alloc(tk * size_t(inter), "moe h1"));
  DSI_RETURN_IF_ERROR(w.h3.alloc(tk * size_t(inter), "moe h3"));
  DSI_RETURN_IF_ERROR(w.yp.alloc(tk * size_t(dim), "moe expert outputs"));
  DSI_RETURN_IF_ERROR(w.sh1.alloc(t1 * size_t(inter), "moe shared h1"));
  DSI_RETURN_IF_ERROR(w.sh3.alloc(t1 * size_t(inter), "moe shared h3"));
  DSI_RETURN_IF_ERROR(w.shy.alloc(t1 * size_t(dim), "moe shared out"));
  w.T = T, w.topk = topk, w.dim = dim, w.inter = inter, w.experts = experts;
  return Status::ok();
}

namespace {

constexpr int kCountThreads = 1024, kScatterThreads = 256;

// One block: per-expert counts (integer atomics, result independent of order), exclusive scan into offsets,
// pos_of = -1 for invalid expert ids.
__global__ void __launch_bounds__(kCountThreads)
    moe_count_kernel(const int32_t* idx, int64_t n, int E, int32_t* offsets, int32_t* pos_of) {
  extern __shared__ int cnt[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int64_t a = threadIdx.x; a < n; a += blockDim.x) {
    const int32_t e = idx[a];
    if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    else pos_of[a] = -1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = run;
      run += cnt[e];
    }
    offsets[E] = run;
  }
}

// Block e: ranks expert e's assignments in increasing assignment index (chunked ballot prefix sums).
__global__ void __launch_bounds__(kScatterThreads)
    moe_scatter_kernel(const int32_t* idx, int64_t n, int64_t topk, const int32_t* offsets, int32_t* perm_token,
                       int32_t* pos_of) {
  __shared__ int warp_base[kScatterThreads / 32 + 1];
  const int e = blockIdx.x;
  const int begin = offsets[e], count = offsets[e + 1] - begin;
  if (count == 0) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int running = 0;
  for (int64_t base = 0; base < n && running < count; base += kScatterThreads) {
    const int64_t a = base + threadIdx.x;
    const bool match = a < n && idx[a] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_base[warp] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
      int run = 0;
      for (int w = 0; w < kScatterThreads / 32; ++w) {
        const int c = warp_base[w];
        warp_base[w] = run;
        run += c;
      }
      warp_base[kScatterThreads / 32] = run;
    }
    __syncthreads();
    if (match) {
      const int row = begin + running + warp_base[warp] + __popc(ballot & ((1u << lane) - 1u));
      perm_token[row] = int32_t(a / topk);
      pos_of[a] = row;
    }
    running += warp_base[kScatterThreads / 32];
    __syncthreads();  // warp_base is rewritten next chunk
  }
}

// h1[p, j] <- silu(min(h1, L)) * clamp(h3, -L, L) for rows p < *rows_dev (or rows when rows_dev is null).
__global__ void swiglu_kernel(float* h1, const float* h3, int64_t rows, const int32_t* rows_dev, int64_t inter,
                              float limit) {
  const int64_t nrows = rows_dev ? int64_t(*rows_dev) : rows;
  const int64_t total = nrows * inter;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float g = h1[i], u = h3[i];
    if (limit > 0.0f) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    h1[i] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void combine_kernel(const float* yp, const int32_t* pos_of, const float* weight, int64_t T, int64_t topk,
                               int64_t D, const float* shared, float* out) {
  const int64_t total = T * D;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, d = i - t * D;
    float acc = 0.0f;
    for (int64_t k = 0; k < topk; ++k) {
      const int32_t p = pos_of[t * topk + k];
      if (p >= 0) acc += weight[t * topk + k] * yp[int64_t(p) * D + d];
    }
    if (shared) acc += shared[i];
    out[i] = acc;
  }
}

unsigned elementwise_blocks(int64_t total) {
  return unsigned(std::clamp<int64_t>((total + 255) / 256, 1, 132 * 16));
}

Status check_experts(const DeviceExpertWeights& w, int64_t rows, int64_t cols, const char* what) {
  if (w.rows != rows || w.cols != cols)
    return Status::errorf("moe {}: expected [{}, {}], got [{}, {}]", what, rows, cols, w.rows, w.cols);
  if (!w.data) return Status::errorf("moe {}: null device pointer array", what);
  DeviceWeight probe;  // shape/format rules are those of a single weight (the pointers are checked per array)
  probe.fmt = w.fmt, probe.rows = rows, probe.cols = cols, probe.data = w.data, probe.scale = w.scale;
  probe.scale_e8m0 = w.scale_e8m0, probe.block_n = w.block_n, probe.block_k = w.block_k;
  return validate_weight(probe, what);
}

// Grouped GEMM over the permuted rows of all experts.
Status expert_gemm(const float* x, int64_t ldx, const int32_t* x_rows, const int32_t* offsets, int64_t total_rows,
                   int64_t experts, const DeviceExpertWeights& w, float* y, int64_t ldy, cudaStream_t s) {
  detail::GemmArgs a;
  a.x = x, a.ldx = ldx, a.x_rows = x_rows, a.y = y, a.ldy = ldy, a.row_off = offsets;
  a.groups = experts, a.N = w.rows, a.K = w.cols;
  DeviceWeight probe;
  probe.fmt = w.fmt, probe.rows = w.rows, probe.cols = w.cols, probe.scale_e8m0 = w.scale_e8m0;
  probe.block_n = w.block_n, probe.block_k = w.block_k, probe.data = nullptr;  // per-expert pointers: aligned by contract
  detail::set_weight_args(a, probe);
  a.wdata = nullptr, a.wscale = nullptr;
  a.wdata_arr = w.data, a.wscale_arr = w.scale;
  detail::set_x_vec(a);
  if (total_rows <= 8 * experts && a.w_vec) return detail::launch_gemm_skinny(w.fmt, a, s);
  const int64_t avg_tiles = (total_rows / experts + gemm_detail::kBM - 1) / gemm_detail::kBM;
  const int64_t max_tiles = (total_rows + gemm_detail::kBM - 1) / gemm_detail::kBM;
  a.m_tiles_z = int(std::clamp<int64_t>(avg_tiles + 1, 1, std::min<int64_t>(max_tiles, 65535)));
  return detail::launch_gemm_tiled(w.fmt, a, s);
}

}  // namespace

Status moe_cuda(const float* x, int64_t T, const int32_t* idx, const float* weight, int64_t topk,
                const MoeExpertsDevice& ex, const MoeSharedDevice* shared, float limit, float shared_limit, float* out,
                MoeWorkspace& ws, void* stream) {
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter;
  if (T < 0 || topk <= 0) return Status::errorf("moe_cuda: bad T = {} or topk = {}", T, topk);
  if (E <= 0 || E > 8192 || D <= 0 || I <= 0)  // 8192: the count kernel keeps E int counters in shared memory
    return Status::errorf("moe_cuda: bad experts = {} (max 8192), dim = {}, inter = {}", E, D, I);
  DSI_RETURN_IF_ERROR(check_experts(ex.w1, I, D, "w1"));
  DSI_RETURN_IF_ERROR(check_experts(ex.w3, I, D, "w3"));
  DSI_RETURN_IF_ERROR(check_experts(ex.w2, D, I, "w2"));
  int64_t Is = 0;
  if (shared) {
    Is = shared->w1.rows;
    DSI_RETURN_IF_ERROR(validate_weight(shared->w1, "moe shared w1"));
    DSI_RETURN_IF_ERROR(validate_weight(shared->w3, "moe shared w3"));
    DSI_RETURN_IF_ERROR(validate_weight(shared->w2, "moe shared w2"));
    if (shared->w1.cols != D || shared->w3.rows != Is || shared->w3.cols != D || shared->w2.rows != D ||
        shared->w2.cols != Is)
      return Status::errorf("moe_cuda: shared expert shapes w1 [{}, {}] w3 [{}, {}] w2 [{}, {}] do not fit dim {}",
                            shared->w1.rows, shared->w1.cols, shared->w3.rows, shared->w3.cols, shared->w2.rows,
                            shared->w2.cols, D);
  }
  if (T == 0) return Status::ok();
  if (!x || !idx || !weight || !out) return Status::error("moe_cuda: null x / idx / weight / out");
  const MoeWorkspace::Impl& w = *ws.impl;
  if (T > w.T || topk > w.topk || D > w.dim || I > w.inter || Is > w.inter || E > w.experts)
    return Status::errorf(
        "moe_cuda: workspace reserved for T={} topk={} dim={} inter={} experts={}, call needs T={} topk={} dim={} "
        "inter={} experts={}",
        w.T, w.topk, w.dim, w.inter, w.experts, T, topk, D, std::max(I, Is), E);
  const int64_t n = T * topk;
  if (n > 0x7fffffff) return Status::error("moe_cuda: T * topk exceeds int32 row indices");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  int32_t* offsets = ws.impl->offsets.data();
  int32_t* perm = ws.impl->perm_token.data();
  int32_t* pos = ws.impl->pos_of.data();
  float *h1 = ws.impl->h1.data(), *h3 = ws.impl->h3.data(), *yp = ws.impl->yp.data();

  moe_count_kernel<<<1, kCountThreads, size_t(E) * sizeof(int), s>>>(idx, n, int(E), offsets, pos);
  DSI_CUDA_LAUNCHED("moe_count_kernel");
  moe_scatter_kernel<<<unsigned(E), kScatterThreads, 0, s>>>(idx, n, topk, offsets, perm, pos);
  DSI_CUDA_LAUNCHED("moe_scatter_kernel");

  DSI_RETURN_IF_ERROR(expert_gemm(x, D, perm, offsets, n, E, ex.w1, h1, I, s));
  DSI_RETURN_IF_ERROR(expert_gemm(x, D, perm, offsets, n, E, ex.w3, h3, I, s));
  swiglu_kernel<<<elementwise_blocks(n * I), 256, 0, s>>>(h1, h3, n, offsets + E, I, limit);
  DSI_CUDA_LAUNCHED("swiglu_kernel");
  DSI_RETURN_IF_ERROR(expert_gemm(h1, I, nullptr, offsets, n, E, ex.w2, yp, D, s));

  const float* shy = nullptr;
  if (shared) {
    float *s1 = ws.impl->sh1.data(), *s3 = ws.impl->sh3.data(), *so = ws.impl->shy.data();
    DSI_RETURN_IF_ERROR(gemm_cuda(x, T, D, shared->w1, s1, Is, false, stream));
    DSI_RETURN_IF_ERROR(gemm_cuda(x, T, D, shared->w3, s3, Is, false, stream));
    swiglu_kernel<<<elementwise_blocks(T * Is), 256, 0, s>>>(s1, s3, T, nullptr, Is, shared_limit);
    DSI_CUDA_LAUNCHED("swiglu_kernel(shared)");
    DSI_RETURN_IF_ERROR(gemm_cuda(s1, T, Is, shared->w2, so, D, false, stream));
    shy = so;
  }
  combine_kernel<<<elementwise_blocks(T * D), 256, 0, s>>>(yp, pos, weight, T, topk, D, shy, out);
  DSI_CUDA_LAUNCHED("combine_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
