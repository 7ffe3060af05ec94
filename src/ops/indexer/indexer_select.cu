// CUDA Lightning Indexer top-k select (see indexer_cuda.h): one block a token's row of scores.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda/func_smem.h"
#include "cuda/pdl.cuh"
#include "ops/indexer/indexer_device.cuh"
#include "ops/indexer/indexer_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
// ---- Top-k: radix select of the k-th largest score key per row (11 + 11 + 10 bits), then an index-ordered
// compaction. One block of 512 threads a row; the row's keys stay in shared memory when it has at most
// kIdxSelCacheKeys of them (else each scan re-reads the scores). Histograms use warp-aggregated shared atomics
// (__match_any_sync), so rows whose scores share their high bits do not serialise on one bin; the bin holding the
// k-th key is found by a block scan, not by one thread.
// Candidate form (cand_slots > 0): after pass 0 only the keys of the boundary bin (the bin holding the k-th key) are
// still undecided; every key of a higher bin is taken. When the boundary bin fits the row's slots, one more scan of
// the row writes a bit map of the keys above it (a warp's ballot is one word) and appends the boundary bin's keys
// and indices (the candidates) to shared memory; passes 1 and 2 run over the candidates only, which then mark the
// keys above tau in that map and those equal to tau in a second one, and the output is written from the two maps in
// index order (a word per key group of 32: the compaction's rule, 32 keys a step). The row's slots: min(cand_slots,
// what the dynamic shared memory holds after the row's cached keys and the two maps), so a row longer than the cache
// has the cache's room. Same tau, same ties, the same output as the full-scan form (cand_slots = 0, or a boundary
// bin larger than the row's slots), which scans the row four times with a block barrier every 512 keys in the last.
constexpr int kSelThreads = 512;
constexpr int kSelWarps = kSelThreads / 32;
constexpr int kSelBins = 2048;
constexpr int kSelUnroll = 4;  // keys a thread loads before it bins them

// Order-preserving map of a float score to uint32 (larger score -> larger key); -0.0 maps like +0.0.
__device__ __forceinline__ uint32_t score_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum over the block (kSelThreads threads); *total = the sum. warp_sums is free again on return.
__device__ int sel_exclusive_scan(int x, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = x;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int base = 0, all = 0;
  for (int w = 0; w < kSelWarps; ++w) {
    const int s = warp_sums[w];
    if (w < warp) base += s;
    all += s;
  }
  __syncthreads();
  *total = all;
  return base + incl - x;
}

struct SelBin {
  uint32_t bin;  // the bin holding rank kr (counted from the top)
  int kr;        // the rank inside it (1-based)
  int count;     // keys in the bin
};

// The bin of hist[0, nbins) holding rank kr from the top. Thread i owns bins nbins-1-per*i .. nbins-per*(i+1)
// (descending); the one whose range holds rank kr writes *s. Every thread reads *s after the closing barrier.
__device__ SelBin sel_find_bin(const uint32_t* hist, int nbins, int kr, int* warp_sums, SelBin* s) {
  const int tid = int(threadIdx.x), per = nbins / kSelThreads;
  int local = 0;
  for (int e = 0; e < per; ++e) local += int(hist[nbins - 1 - (tid * per + e)]);
  int total = 0;
  const int before = sel_exclusive_scan(local, warp_sums, &total);
  if (before < kr && kr <= before + local) {
    int cum = before;
    for (int e = 0; e < per; ++e) {
      const int b = nbins - 1 - (tid * per + e), h = int(hist[b]);
      if (cum + h >= kr) {
        *s = SelBin{uint32_t(b), kr - cum, h};
        break;
      }
      cum += h;
    }
  }
  __syncthreads();
  return *s;
}

// The candidate form of a row after pass 0 (prefix = the boundary bin's digit, kr = the k-th key's rank in it,
// ncand = its keys, at most row_slots): the gather, passes 1 and 2 over the candidates, the output from the maps.
__device__ __forceinline__ void select_candidates(uint32_t* sel_keys, uint32_t* hist, int* warp_sums, SelBin* s_bin,
                                                  int* s_count, const float* sc, int64_t N, bool cached,
                                                  int64_t map_words, int row_slots, int ncand, uint32_t prefix,
                                                  int kr, int32_t* o, int tid, int lane, int warp, uint32_t lt) {
  uint32_t* taken = sel_keys + (cached ? N : 0);  // [map_words] bit j: key j is above the boundary bin or tau
  uint32_t* ties = taken + map_words;             // [map_words] bit j: key j equals tau
  uint32_t* cand_key = ties + map_words;          // [row_slots], in no particular order
  int32_t* cand_idx = reinterpret_cast<int32_t*>(cand_key + row_slots);
  const uint32_t bin0 = prefix >> 21;
  // Gather: a warp's ballot of "above bin0" over its 32 consecutive keys is one word of the taken map; bin0's keys
  // are appended to the candidates (one shared atomic a warp).
  for (int64_t base = 0; base < N; base += kSelUnroll * kSelThreads) {
    uint32_t u[kSelUnroll];
#pragma unroll
    for (int k = 0; k < kSelUnroll; ++k) {
      const int64_t j = base + k * kSelThreads + tid;
      u[k] = j < N ? (cached ? sel_keys[j] : score_key(sc[j])) : 0u;
    }
#pragma unroll
    for (int k = 0; k < kSelUnroll; ++k) {
      const int64_t j = base + k * kSelThreads + tid;
      const uint32_t ba = __ballot_sync(0xffffffffu, j < N && (u[k] >> 21) > bin0);
      const uint32_t bc = __ballot_sync(0xffffffffu, j < N && (u[k] >> 21) == bin0);
      if (lane == 0) {
        const int64_t w = (base + k * kSelThreads) / 32 + warp;
        taken[w] = ba;
        ties[w] = 0u;
      }
      if (bc != 0u) {  // warp-uniform
        int c0 = 0;
        if (lane == 0) c0 = atomicAdd(s_count, __popc(bc));
        c0 = __shfl_sync(0xffffffffu, c0, 0);
        if ((bc >> lane) & 1u) {
          const int c = c0 + __popc(bc & lt);
          cand_key[c] = u[k];
          cand_idx[c] = int32_t(j);
        }
      }
    }
  }
  __syncthreads();
  // Passes 1 and 2 over the candidates (all of them match pass 0's digit; their order does not matter).
  for (int pass = 1; pass < 3; ++pass) {
    const int shift = pass == 1 ? 10 : 0;
    const int nbins = pass == 2 ? 1024 : 2048;
    const int above = shift + (pass == 2 ? 10 : 11);
    for (int i = tid; i < nbins; i += kSelThreads) hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < ncand; base += kSelUnroll * kSelThreads) {
      uint32_t u[kSelUnroll];
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int i = base + k * kSelThreads + tid;
        u[k] = i < ncand ? cand_key[i] : 0u;
      }
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int i = base + k * kSelThreads + tid;
        const bool match = i < ncand && (u[k] >> above) == (prefix >> above);
        const uint32_t bin = match ? (u[k] >> shift) & uint32_t(nbins - 1) : 0xFFFFFFFFu;
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (match && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], uint32_t(__popc(peers)));
      }
    }
    __syncthreads();
    const SelBin b = sel_find_bin(hist, nbins, kr, warp_sums, s_bin);
    prefix |= b.bin << shift;
    kr = b.kr;
  }
  // prefix = tau: the candidates above it join the taken map, those equal to it the ties map.
  const uint32_t tau = prefix;
  for (int i = tid; i < ncand; i += kSelThreads) {
    const uint32_t u = cand_key[i];
    const int32_t j = cand_idx[i];
    if (u > tau) atomicOr(&taken[j >> 5], 1u << (j & 31));
    if (u == tau) atomicOr(&ties[j >> 5], 1u << (j & 31));
  }
  __syncthreads();
  // Output in index order, thread t over words [t per, (t + 1) per): slot of a taken key = taken keys before it +
  // min(ties before it, kr); a tie is taken while fewer than kr ties precede it (the old compaction's rule).
  const int nw = int((N + 31) / 32), per = (nw + kSelThreads - 1) / kSelThreads;
  const int w0 = min(tid * per, nw), w1 = min(w0 + per, nw);
  int nt = 0, ne = 0, total = 0;
  for (int w = w0; w < w1; ++w) {
    nt += __popc(taken[w]);
    ne += __popc(ties[w]);
  }
  int t_before = sel_exclusive_scan(nt, warp_sums, &total);
  int e_before = sel_exclusive_scan(ne, warp_sums, &total);
  for (int w = w0; w < w1; ++w) {
    const uint32_t tw = taken[w];
    uint32_t m = tw | ties[w];
    while (m != 0u) {
      const int bit = __ffs(m) - 1;
      m &= m - 1u;
      const int32_t j = int32_t(w) * 32 + bit;
      if ((tw >> bit) & 1u) {
        o[t_before + min(e_before, kr)] = j;
        ++t_before;
      } else {
        if (e_before < kr) o[t_before + e_before] = j;
        ++e_before;
      }
    }
  }
}

// The full-scan form's compaction after pass 2.
__device__ __forceinline__ void select_compact(const uint32_t* sel_keys, int (*tile_gt)[kSelWarps],
                                               int (*tile_eq)[kSelWarps], const float* sc, int64_t N, bool cached,
                                               uint32_t prefix, int kr, int32_t* o, int tid, int lane, int warp,
                                               uint32_t lt) {
  // prefix = tau, the k-th largest key: take every larger key and the kr lowest-index keys equal to it, in index
  // order. Slot of a taken j = (#keys > tau before j) + min(#keys == tau before j, kr).
  const uint32_t tau = prefix;
  int gt_run = 0, eq_run = 0;
  for (int64_t base = 0, it = 0; base < N; base += kSelThreads, ++it) {
    const int64_t j = base + tid;
    const uint32_t u = j < N ? (cached ? sel_keys[j] : score_key(sc[j])) : 0u;
    const bool gt = j < N && u > tau, eq = j < N && u == tau;
    const uint32_t bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
    const int buf = int(it & 1);
    if (lane == 0) {
      tile_gt[buf][warp] = __popc(bg);
      tile_eq[buf][warp] = __popc(be);
    }
    __syncthreads();
    int gbase = 0, ebase = 0, gtot = 0, etot = 0;
    for (int w = 0; w < kSelWarps; ++w) {
      const int gw = tile_gt[buf][w], ew = tile_eq[buf][w];
      if (w < warp) {
        gbase += gw;
        ebase += ew;
      }
      gtot += gw;
      etot += ew;
    }
    const int gt_before = gt_run + gbase + __popc(bg & lt), eq_before = eq_run + ebase + __popc(be & lt);
    if (gt || (eq && eq_before < kr)) o[gt_before + min(eq_before, kr)] = int32_t(j);
    gt_run += gtot;
    eq_run += etot;
  }
}

__global__ void __launch_bounds__(kSelThreads, 3) indexer_select_kernel(StepDevice st, IndexerCudaParams p,
                                                                     const float* scores, int64_t max_visible,
                                                                     int64_t cache_keys, int64_t smem_words,
                                                                     int cand_slots, int32_t* out) {
  dsinfer::cuda::pdl_wait_then_release();
  // [smem_words]: the row's keys [N] when N <= cache_keys; then, in the candidate form, two bit maps over the row
  // [map_words] each and the candidates' keys and indices [row_slots] each.
  extern __shared__ uint32_t sel_keys[];
  __shared__ uint32_t hist[kSelBins];
  __shared__ int warp_sums[kSelWarps];
  __shared__ int tile_gt[2][kSelWarps], tile_eq[2][kSelWarps];
  __shared__ int s_count;  // candidates gathered
  __shared__ SelBin s_bin;
  const int64_t t = blockIdx.x, N = idx_visible(st.pos[t], p.m, max_visible), K = p.topk;
  int32_t* o = out + t * K;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  if (tid == 0) s_count = 0;
  if (N <= K) {  // everything visible is selected
    for (int64_t i = tid; i < K; i += kSelThreads) o[i] = i < N ? int32_t(i) : -1;
    return;
  }
  const float* sc = scores + t * max_visible;
  const bool cached = N <= cache_keys;
  // The candidate form's maps: one bit a key, whole rounds of kSelUnroll * kSelThreads keys.
  constexpr int64_t kRound = int64_t(kSelUnroll) * kSelThreads;
  const int64_t map_words = (N + kRound - 1) / kRound * (kRound / 32);
  const int64_t row_room = (smem_words - (cached ? N : 0) - 2 * map_words) / 2;
  const int row_slots = int(row_room < cand_slots ? row_room : cand_slots);  // may be <= 0: the full scan
  const uint32_t lt = (1u << lane) - 1u;
  uint32_t prefix = 0;  // the k-th key's bits found so far
  int kr = int(K);      // rank (1-based) of the k-th key among the keys that match prefix
  int ncand = 0;        // keys in pass 0's boundary bin when the candidate form takes the row, else 0
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
    const int nbins = pass == 2 ? 1024 : 2048;
    const int above = shift + (pass == 2 ? 10 : 11);  // bits above this pass's digit
    for (int i = tid; i < nbins; i += kSelThreads) hist[i] = 0;
    __syncthreads();
    // Uniform trip count (every lane reaches the match); 4 loads in flight a thread. Element j belongs to thread
    // j % kSelThreads in every pass and in the compaction, so sel_keys[j] is read back by the thread that wrote it.
    for (int64_t base = 0; base < N; base += kSelUnroll * kSelThreads) {
      uint32_t u[kSelUnroll];
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int64_t j = base + k * kSelThreads + tid;
        u[k] = 0;
        if (j < N) u[k] = pass > 0 && cached ? sel_keys[j] : score_key(sc[j]);
      }
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int64_t j = base + k * kSelThreads + tid;
        if (pass == 0 && cached && j < N) sel_keys[j] = u[k];
        const bool match = j < N && (pass == 0 || (u[k] >> above) == (prefix >> above));
        const uint32_t bin = match ? (u[k] >> shift) & uint32_t(nbins - 1) : 0xFFFFFFFFu;
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (match && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], uint32_t(__popc(peers)));
      }
    }
    __syncthreads();
    const SelBin b = sel_find_bin(hist, nbins, kr, warp_sums, &s_bin);
    prefix |= b.bin << shift;
    kr = b.kr;
    if (pass == 0 && b.count <= row_slots) {  // block-uniform
      ncand = b.count;
      break;
    }
  }
  if (ncand > 0) {
    select_candidates(sel_keys, hist, warp_sums, &s_bin, &s_count, sc, N, cached, map_words, row_slots, ncand, prefix,
                      kr, o, tid, lane, warp, lt);
    return;
  }
  select_compact(sel_keys, tile_gt, tile_eq, sc, N, cached, prefix, kr, o, tid, lane, warp, lt);
}
}  // namespace

// The select's plan: the candidate form with kIdxSelCandSlots slots when a row can exceed kIdxSelCandMinKeys keys
// (below it the form's fixed steps cost more than the two scans they save: decode and prefill at context 4,096 were
// 1.6 us and 2 % slower, session 21); DSINFER_INDEXER_SELECT=full takes the full-scan form, =N the candidate form with
// N slots at any length (the A/B of one binary: every form gives the same output). Read once.
int indexer_select_cand_slots(int64_t max_visible) {
  static const int env = [] {
    const char* v = std::getenv("DSINFER_INDEXER_SELECT");
    if (!v) return -1;
    if (std::strcmp(v, "full") == 0) return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n > 0 && n <= kIdxSelCandMaxSlots) return int(n);
    // An A/B switch of one kernel with no Status path: a value it cannot use is named, and the plan decides.
    std::fprintf(stderr, "DSINFER_INDEXER_SELECT must be full or a slot count in 1..%d, found '%s': ignored\n",
                 kIdxSelCandMaxSlots, v);
    return -1;
  }();
  if (env >= 0) return env;
  return max_visible > kIdxSelCandMinKeys ? kIdxSelCandSlots : 0;
}

namespace {
// Dynamic shared memory a select block may take while kSelBlocksPerSm blocks fit an SM (the key cache alone stays
// within it up to kIdxSelCacheKeys; the plan's candidate lists take what is left, then the cache's own room).
constexpr int kSelBlocksPerSm = 3;
size_t select_smem_budget() {
  static const size_t budget = [] {
    int dev = 0, per_sm = 0, reserved = 0;
    cudaFuncAttributes fa{};
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(indexer_select_kernel)) != cudaSuccess)
      return size_t(0);
    const long b = long(per_sm) / kSelBlocksPerSm - reserved - long(fa.sharedSizeBytes);
    return b > 0 ? size_t(b) : size_t(0);
  }();
  return budget;
}
}  // namespace

void launch_indexer_select(const StepDevice& step, const IndexerCudaParams& p, const float* scores, int64_t max_visible,
                           int32_t* out, void* stream, int cand_slots) {
  const int64_t cache_keys = max_visible < kIdxSelCacheKeys ? max_visible : kIdxSelCacheKeys;
  const bool plan = cand_slots < 0;
  if (plan) cand_slots = indexer_select_cand_slots(max_visible);
  if (cand_slots > kIdxSelCandMaxSlots) cand_slots = 0;
  size_t smem = size_t(cache_keys) * sizeof(uint32_t);
  if (cand_slots > 0) {
    // The plan: the lists within the blocks-an-SM budget (rows longer than the cache still have the cache's room);
    // an explicit slot count (the bench, the tests): its full size.
    const int64_t round = int64_t(kSelUnroll) * kSelThreads;
    const size_t maps = size_t((max_visible + round - 1) / round * (round / 32)) * 2 * sizeof(uint32_t);
    const size_t want = smem + size_t(cand_slots) * 8 + maps;
    smem = plan ? std::max(smem, std::min(want, select_smem_budget())) : want;
  }
  // smem follows max_visible: raised, never set per call (ranks sharing a GPU; cuda/func_smem.h).
  dsinfer::cuda::raise_max_dynamic_smem(reinterpret_cast<const void*>(indexer_select_kernel), smem);
  dsinfer::cuda::pdl_launch(indexer_select_kernel, dim3(unsigned(step.T)), dim3(kSelThreads), smem,
                            static_cast<cudaStream_t>(stream), step, p, scores, max_visible, cache_keys,
                            int64_t(smem / sizeof(uint32_t)), cand_slots, out);
}

}  // namespace dsinfer::ops::cuda::detail
