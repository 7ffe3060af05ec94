// CUDA CSA2 indexer (see csa2_cuda.h): the scores of every token over the visible indexer keys and the
// (two-level) top-k selection.
//
// Scores: a block takes one token and a chunk of keys; the token's queries sit in shared memory transposed
// ([dim][heads], padded pitch: conflict-free), each warp scores kpw keys at a time with lane = head, so every
// head's dot product is the reference's sequential fp64 sum (fp32 x fp32 products are exact in fp64, so an FMA
// equals the reference's multiply-then-add); only the sum over heads is a warp tree (1e-16 relative). The fast
// mode (Csa2IndexCudaParams::fast) runs the same loop in fp32 with twice the keys per warp (each query value read
// from shared memory serves 16 keys): fp32 FMAs at twice the fp64 rate, ~1e-6 relative.
// Selection: one block per token, an exact radix select (4 passes of 8 bits over order-preserving keys) finds
// the k-th largest value, then a stable block-wide compaction in index order takes everything above it plus the
// lowest-index entries equal to it -- the reference's order (larger value first, ties to the lower index), with
// the result already ascending. Cost O(n) per token instead of the O(k n) of repeated arg-max scans.
#include <algorithm>

#include "cuda/func_smem.h"
#include "cuda/ops_device.cuh"
#include "ops/csa2/csa2_launch.h"
#include "ops/csa2/torch_topk.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kScoreWarps = 4, kKeysPerWarp = 8, kFastKeysPerWarp = 16;
constexpr int kScoreThreads = kScoreWarps * 32;
constexpr int kSelThreads = 256, kSelWarps = kSelThreads / 32;  // the selection's scans assume exactly 256

// Shared-memory layout of the score kernel (floats): q [dim4][heads + 1], w [heads], keys [warps][kpw][dim4].
struct ScoreSmem {
  int64_t dim4, pitch, q_floats, w_floats, kpw;
  __host__ __device__ ScoreSmem(int64_t heads, int64_t dim, int64_t keys_per_warp)
      : dim4((dim + 3) / 4 * 4), pitch(heads + 1), q_floats(dim4 * pitch), w_floats((heads + 3) / 4 * 4),
        kpw(keys_per_warp) {}
  __host__ __device__ int64_t floats() const { return q_floats + w_floats + int64_t(kScoreWarps) * kpw * dim4; }
};

// Correctly rounded add / multiply (never contracted into an FMA, so the fp64 path keeps the reference's roundings).
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }

// Acc double: the exact scores (hf, hf-noqat under exact kernels; official's bf16 roundings); float: the fast mode.
template <typename Acc, int kKeysPerWarp>
__global__ void __launch_bounds__(kScoreThreads) index_scores_kernel(StepDevice st, LayerStateView src,
                                                                     Csa2IndexCudaParams p, int64_t chunk,
                                                                     int64_t chunks, const float* q, const float* w,
                                                                     float* scores) {
  extern __shared__ __align__(16) float sm[];
  const ScoreSmem L(p.heads, p.dim, kKeysPerWarp);
  const int64_t t = blockIdx.x / chunks, j0 = (blockIdx.x % chunks) * chunk;
  const int64_t n = (st.pos[t] + 1) / p.ratio;
  if (j0 >= n) return;  // block-uniform
  const int64_t j1 = min(n, j0 + chunk), H = p.heads, dim = p.dim, dim4 = L.dim4, pitch = L.pitch;
  float *sq = sm, *sw = sm + L.q_floats;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* sk = sw + L.w_floats + int64_t(warp) * kKeysPerWarp * dim4;
  const float* qt = q + t * H * dim;
  for (int64_t x = threadIdx.x; x < H * dim4; x += kScoreThreads) {
    const int64_t h = x / dim4, i = x % dim4;
    sq[i * pitch + h] = i < dim ? qt[h * dim + i] : 0.0f;  // zero padding adds exact zeros
  }
  for (int64_t h = threadIdx.x; h < H; h += kScoreThreads) sw[h] = w[t * H + h];
  __syncthreads();
  const int32_t s = st.seq_of_token[t];
  const int32_t* table = st.block_tables + int64_t(s) * st.table_stride;
  const Acc scale = Acc(1.0 / sqrt(double(dim)));
  for (int64_t g = j0 + int64_t(warp) * kKeysPerWarp; g < j1; g += int64_t(kScoreWarps) * kKeysPerWarp) {
#pragma unroll
    for (int k = 0; k < kKeysPerWarp; ++k) {
      const float* key = g + k < j1 ? src.index_key(table, g + k) : nullptr;
      for (int64_t i = lane; i < dim4; i += 32) sk[k * dim4 + i] = key && i < dim ? key[i] : 0.0f;
    }
    __syncwarp();
    Acc tot[kKeysPerWarp];
#pragma unroll
    for (int k = 0; k < kKeysPerWarp; ++k) tot[k] = Acc(0);
    for (int64_t h = lane; h < H; h += 32) {
      Acc acc[kKeysPerWarp];
#pragma unroll
      for (int k = 0; k < kKeysPerWarp; ++k) acc[k] = Acc(0);
      for (int64_t i = 0; i < dim4; i += 4) {
        const Acc q0 = sq[i * pitch + h], q1 = sq[(i + 1) * pitch + h];
        const Acc q2 = sq[(i + 2) * pitch + h], q3 = sq[(i + 3) * pitch + h];
#pragma unroll
        for (int k = 0; k < kKeysPerWarp; ++k) {
          const float4 kv = *reinterpret_cast<const float4*>(sk + k * dim4 + i);  // broadcast read
          acc[k] = fma(q0, Acc(kv.x), acc[k]);
          acc[k] = fma(q1, Acc(kv.y), acc[k]);
          acc[k] = fma(q2, Acc(kv.z), acc[k]);
          acc[k] = fma(q3, Acc(kv.w), acc[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < kKeysPerWarp; ++k) {
        if (p.official) {  // bf16 einsum, ReLU, times the bf16 head weight (which carries the scale), bf16
          const float d = fmaxf(dev::round_bf16(float(acc[k])), 0.0f);
          tot[k] = add_rn(tot[k], Acc(dev::round_bf16(__fmul_rn(d, sw[h]))));
        } else {
          tot[k] = add_rn(tot[k], mul_rn(mul_rn(fmax(acc[k], Acc(0)), scale), Acc(sw[h])));
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kKeysPerWarp; ++k) {
      const Acc v = dev::warp_sum(tot[k]);
      if (lane == 0 && g + k < j1) scores[t * p.stride + g + k] = p.official ? dev::round_bf16(float(v)) : float(v);
    }
    __syncwarp();  // the next group overwrites sk
  }
}

// Order-preserving integer key of a value (larger value, larger key); -0 and +0 tie as in the reference.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v == 0.0f) v = 0.0f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Inclusive prefix sum of x over the block's threads in thread order; *total gets the block's sum.
__device__ int block_scan(int x, int* total) {
  __shared__ int ws[kSelWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(dev::kFull, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) ws[warp] = x;
  __syncthreads();
  int pre = 0, tot = 0;
  for (int w = 0; w < kSelWarps; ++w) {
    pre += w < warp ? ws[w] : 0;
    tot += ws[w];
  }
  __syncthreads();
  *total = tot;
  return x + pre;
}

// Entries of v[0, n) other than -inf (the ineligible ones).
__device__ int count_eligible(const float* v, int64_t n) {
  int c = 0, total;
  for (int64_t j = threadIdx.x; j < n; j += kSelThreads) c += v[j] != -INFINITY;
  block_scan(c, &total);
  return total;
}

struct Threshold {
  uint32_t key;  // order key of the k-th largest entry
  int take_eq;   // how many entries with that key rank among the first k
};

// Radix select of the k-th largest key over v[0, n), 1 <= k <= n; 256 bins = one per thread.
__device__ Threshold kth_key(const float* v, int64_t n, int k) {
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_k;
  uint32_t prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[threadIdx.x] = 0;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n; j += kSelThreads) {
      const uint32_t u = order_key(v[j]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 0xffu], 1);
    }
    __syncthreads();
    const int bin = 255 - int(threadIdx.x), h = hist[bin];  // thread order = bins from the top down
    int total;
    const int at_or_above = block_scan(h, &total);
    if (at_or_above >= k && at_or_above - h < k) {  // exactly one bin holds the k-th largest
      s_prefix = prefix | (uint32_t(bin) << shift);
      s_k = k - (at_or_above - h);
    }
    __syncthreads();
    prefix = s_prefix;
    k = s_k;
    mask |= 0xffu << shift;
  }
  return {prefix, k};
}

// emit(j, rank) for the k best entries of v[0, n) (1 <= k <= #eligible), in ascending j: all above the k-th
// largest value plus the lowest-index entries equal to it.
template <class Emit>
__device__ void select_top(const float* v, int64_t n, int k, Emit emit) {
  const Threshold th = kth_key(v, n, k);
  int base_eq = 0, base_out = 0;
  for (int64_t c0 = 0; c0 < n && base_out < k; c0 += kSelThreads) {  // block-uniform condition
    const int64_t j = c0 + threadIdx.x;
    const uint32_t u = j < n ? order_key(v[j]) : 0u;
    const int gt = j < n && u > th.key, eq = j < n && u == th.key;
    int eq_total, out_total;
    const int eq_rank = base_eq + block_scan(eq, &eq_total) - eq;
    const int take = gt || (eq && eq_rank < th.take_eq);
    const int rank = base_out + block_scan(take, &out_total) - take;
    if (take) emit(j, rank);
    base_eq += eq_total;
    base_out += out_total;
  }
}

// Candidate source: blocks scored by their best entry, the newest entry's block pinned (+inf), the best
// cand_topk_blocks blocks other than -inf kept (csa2_candidate_blocks_ref) -> mask row.
__device__ void candidate_mask(const Csa2IndexCudaParams& p, const float* s, int64_t n, float* blk, uint8_t* mask) {
  const int64_t bs = p.cand_block_size, nb = (n + bs - 1) / bs;
  for (int64_t j = threadIdx.x; j < n; j += kSelThreads) mask[j] = 0;
  for (int64_t b = threadIdx.x; b < nb; b += kSelThreads) {
    float best = -INFINITY;
    for (int64_t j = b * bs; j < min(n, (b + 1) * bs); ++j) best = fmaxf(best, s[j]);  // NaN ignored, as std::max
    blk[b] = b == (n - 1) / bs ? INFINITY : best;
  }
  __syncthreads();
  const int k = int(min(p.cand_topk_blocks, int64_t(count_eligible(blk, nb))));
  if (k > 0)
    select_top(blk, nb, k, [&](int64_t b, int) {
      for (int64_t j = b * bs; j < min(n, (b + 1) * bs); ++j) mask[j] = 1;
    });
  __syncthreads();
}

// Official numerics (csa2_candidate_blocks_torch / csa2_topk_torch): thread 0 runs torch.topk's CPU selection
// (torch_topk.h) over the pair scratch q [n], first on the blocks' best scores (candidate source), then on the scores
// with the candidates' complement at -inf; it marks the kept finite entries 1 in s (every other entry 0), and the
// block compacts them into sel in ascending order.
__device__ void official_select(const Csa2IndexCudaParams& p, int64_t t, int64_t n, float* s, uint8_t* m,
                                int32_t* mask_n, torch_topk::Pair* q, int32_t* out) {
  if (threadIdx.x == 0) {
    if (p.mode == Csa2SelectMode::Candidate) {
      const int64_t bs = p.cand_block_size, nb = (n + bs - 1) / bs;
      for (int64_t b = 0; b < nb; ++b) {
        float best = -INFINITY;
        for (int64_t j = b * bs; j < min(n, (b + 1) * bs); ++j) best = fmaxf(best, s[j]);
        q[b] = {b == nb - 1 ? INFINITY : best, int32_t(b)};  // the newest entry's block is pinned
      }
      for (int64_t j = 0; j < n; ++j) m[j] = 0;
      const int64_t kb = torch_topk::select(q, nb, p.cand_topk_blocks);
      for (int64_t i = 0; i < kb; ++i) {
        if (q[i].v == -INFINITY) continue;  // fewer reachable blocks than cand_topk_blocks
        const int64_t b = q[i].i;
        for (int64_t j = b * bs; j < min(n, (b + 1) * bs); ++j) m[j] = 1;
      }
      mask_n[t] = int32_t(n);
    }
    const int64_t mn = p.mode == Csa2SelectMode::Masked ? mask_n[t] : 0;
    for (int64_t j = 0; j < n; ++j) q[j] = {mn == 0 || (j < mn && m[j]) ? s[j] : -INFINITY, int32_t(j)};
    const int64_t k = torch_topk::select(q, n, p.topk);
    for (int64_t j = 0; j < n; ++j) s[j] = 0.0f;
    for (int64_t i = 0; i < k; ++i)
      if (isfinite(q[i].v)) s[q[i].i] = 1.0f;
  }
  __syncthreads();
  int base = 0;
  for (int64_t c0 = 0; c0 < n; c0 += kSelThreads) {
    const int64_t j = c0 + threadIdx.x;
    const int take = j < n && s[j] == 1.0f;
    int total;
    const int rank = base + block_scan(take, &total) - take;
    if (take) out[rank] = int32_t(j);
    base += total;
  }
  for (int64_t i = base + threadIdx.x; i < p.topk; i += kSelThreads) out[i] = -1;
}

__global__ void __launch_bounds__(kSelThreads) index_select_kernel(StepDevice st, Csa2IndexCudaParams p, float* scores,
                                                                   uint8_t* mask, int32_t* mask_n, float* blk,
                                                                   torch_topk::Pair* pairs, int32_t* sel) {
  const int64_t t = blockIdx.x;
  const int64_t n = (st.pos[t] + 1) / p.ratio;
  float* s = scores + t * p.stride;
  uint8_t* m = mask ? mask + t * p.stride : nullptr;
  if (p.official) {
    official_select(p, t, n, s, m, mask_n, pairs + t * p.stride, sel + t * p.topk);
    return;
  }
  if (p.mode == Csa2SelectMode::Candidate) {
    candidate_mask(p, s, n, blk + t * p.stride, m);
    if (threadIdx.x == 0) mask_n[t] = int32_t(n);
  }
  const int64_t mn = p.mode == Csa2SelectMode::Masked ? mask_n[t] : 0;
  for (int64_t j = threadIdx.x; j < n; j += kSelThreads) {
    const bool ok = isfinite(s[j]) && (mn == 0 || (j < mn && m[j]));
    if (!ok) s[j] = -INFINITY;
  }
  __syncthreads();
  const int k = int(min(p.topk, int64_t(count_eligible(s, n))));
  int32_t* out = sel + t * p.topk;
  if (k > 0) select_top(s, n, k, [&](int64_t j, int rank) { out[rank] = int32_t(j); });
  for (int64_t i = k + threadIdx.x; i < p.topk; i += kSelThreads) out[i] = -1;
}
}  // namespace

int64_t csa2_index_scores_smem(int64_t heads, int64_t dim, bool fast) {
  return ScoreSmem(heads, dim, fast ? kFastKeysPerWarp : kKeysPerWarp).floats() * 4;
}

namespace {
template <typename Acc, int kKeysPerWarp>
void launch_scores(const StepDevice& st, const LayerStateView& src, const Csa2IndexCudaParams& p, const float* q,
                   const float* w, float* scores, cudaStream_t stream) {
  // Chunks of keys per token: about 1024 blocks in all (each block reads the token's queries once), chunks a
  // multiple of one pass of the block's warps.
  constexpr int64_t kPass = int64_t(kScoreWarps) * kKeysPerWarp;
  const int64_t want = std::max<int64_t>(1, 1024 / st.T);
  int64_t chunk = (p.stride + want - 1) / want;
  chunk = std::max<int64_t>(kPass, (chunk + kPass - 1) / kPass * kPass);
  const int64_t chunks = (p.stride + chunk - 1) / chunk;
  const size_t smem = size_t(ScoreSmem(p.heads, p.dim, kKeysPerWarp).floats() * 4);
  auto* kernel = index_scores_kernel<Acc, kKeysPerWarp>;
  // smem follows the model's heads and dim: raised, never set per call (ranks sharing a GPU; cuda/func_smem.h).
  if (smem > 48 * 1024) dsinfer::cuda::raise_max_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
  kernel<<<unsigned(st.T * chunks), kScoreThreads, smem, stream>>>(st, src, p, chunk, chunks, q, w, scores);
}
}  // namespace

void launch_csa2_index_scores(const StepDevice& st, const LayerStateView& src, const Csa2IndexCudaParams& p,
                              const float* q, const float* w, float* scores, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.fast) launch_scores<float, kFastKeysPerWarp>(st, src, p, q, w, scores, s);
  else launch_scores<double, kKeysPerWarp>(st, src, p, q, w, scores, s);
}

void launch_csa2_index_select(const StepDevice& st, const Csa2IndexCudaParams& p, float* scores, uint8_t* mask,
                              int32_t* mask_n, float* block_scratch, void* pair_scratch, int32_t* sel, void* stream) {
  index_select_kernel<<<unsigned(st.T), kSelThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      st, p, scores, mask, mask_n, block_scratch, static_cast<torch_topk::Pair*>(pair_scratch), sel);
}

}  // namespace dsinfer::ops::cuda::detail
