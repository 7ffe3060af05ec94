// CUDA Lightning Indexer top-k select (see indexer_cuda.h): one block a token's row of scores.
#include <algorithm>
#include <cmath>
#include <cstdint>
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
// Sample form (tried first on rows of more than sample_min keys): 1,024 keys at even strides pick, by two histogram
// rounds, a threshold lo below the k-th key with a wide margin (sample_threshold), so that more than K keys of the row
// and fewer than its slots reach it; one float4 scan then gathers every key >= lo (a warp whose keys are all below lo
// only compares; no __match_any_sync) and the three passes, the maps and the output run over those candidates. The
// k-th key and all keys equal to it are >= lo, so the output is the same; a row whose count misses [K, slots] goes
// on in the candidate form, from pass 0.
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

// Where a row's candidate lists live in the dynamic shared memory: after the row's cached keys (cached), the two bit
// maps over the row [map_words] each, then the candidates' keys and indices [row_slots] each.
struct CandLists {
  uint32_t* taken;  // bit j: key j is above the gathered range, or (after the passes) above tau
  uint32_t* ties;   // bit j: key j equals tau
  uint32_t* key;    // [row_slots], in no particular order
  int32_t* idx;
};
__device__ __forceinline__ CandLists cand_lists(uint32_t* sel_keys, int64_t N, bool cached, int64_t map_words,
                                                int row_slots) {
  CandLists c;
  c.taken = sel_keys + (cached ? N : 0);
  c.ties = c.taken + map_words;
  c.key = c.ties + map_words;
  c.idx = reinterpret_cast<int32_t*>(c.key + row_slots);
  return c;
}

// Gather: a warp's ballot of "above hi" over its 32 consecutive keys is one word of the taken map; the keys in
// [lo, hi] are appended to the candidates (one shared atomic a warp). *s_count counts them all; only the first
// row_slots are stored.
__device__ __forceinline__ void cand_gather(const CandLists& c, int* s_count, const uint32_t* sel_keys,
                                            const float* sc, int64_t N, bool cached, int row_slots, uint32_t lo,
                                            uint32_t hi, int tid, int lane, int warp, uint32_t lt) {
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
      const uint32_t ba = __ballot_sync(0xffffffffu, j < N && u[k] > hi);
      const uint32_t bc = __ballot_sync(0xffffffffu, j < N && u[k] >= lo && u[k] <= hi);
      if (lane == 0) {
        const int64_t w = (base + k * kSelThreads) / 32 + warp;
        c.taken[w] = ba;
        c.ties[w] = 0u;
      }
      if (bc != 0u) {  // warp-uniform
        int c0 = 0;
        if (lane == 0) c0 = atomicAdd(s_count, __popc(bc));
        c0 = __shfl_sync(0xffffffffu, c0, 0);
        const int i = c0 + __popc(bc & lt);
        if (((bc >> lane) & 1u) && i < row_slots) {
          c.key[i] = u[k];
          c.idx[i] = int32_t(j);
        }
      }
    }
  }
}

// After the gather (every key above the candidates in the taken map; ncand <= the row's slots): the radix passes
// first_pass..2 over the candidates (all of them match prefix's digits above first_pass; their order does not
// matter) find tau, the candidates above it join the taken map and those equal to it the ties map, and the output
// is written from the maps in index order.
__device__ __forceinline__ void cand_finish(const CandLists& c, uint32_t* hist, int* warp_sums, SelBin* s_bin,
                                            int64_t N, int ncand, int first_pass, uint32_t prefix, int kr, int32_t* o,
                                            int tid, int lane) {
  for (int pass = first_pass; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
    const int nbins = pass == 2 ? 1024 : 2048;
    const int above = shift + (pass == 2 ? 10 : 11);
    for (int i = tid; i < nbins; i += kSelThreads) hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < ncand; base += kSelUnroll * kSelThreads) {
      uint32_t u[kSelUnroll];
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int i = base + k * kSelThreads + tid;
        u[k] = i < ncand ? c.key[i] : 0u;
      }
#pragma unroll
      for (int k = 0; k < kSelUnroll; ++k) {
        const int i = base + k * kSelThreads + tid;
        const bool match = i < ncand && (pass == 0 || (u[k] >> above) == (prefix >> above));
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
    const uint32_t u = c.key[i];
    const int32_t j = c.idx[i];
    if (u > tau) atomicOr(&c.taken[j >> 5], 1u << (j & 31));
    if (u == tau) atomicOr(&c.ties[j >> 5], 1u << (j & 31));
  }
  __syncthreads();
  // Output in index order, thread t over words [t per, (t + 1) per): slot of a taken key = taken keys before it +
  // min(ties before it, kr); a tie is taken while fewer than kr ties precede it (the old compaction's rule).
  const int nw = int((N + 31) / 32), per = (nw + kSelThreads - 1) / kSelThreads;
  const int w0 = min(tid * per, nw), w1 = min(w0 + per, nw);
  int nt = 0, ne = 0, total = 0;
  for (int w = w0; w < w1; ++w) {
    nt += __popc(c.taken[w]);
    ne += __popc(c.ties[w]);
  }
  int t_before = sel_exclusive_scan(nt, warp_sums, &total);
  int e_before = sel_exclusive_scan(ne, warp_sums, &total);
  for (int w = w0; w < w1; ++w) {
    const uint32_t tw = c.taken[w];
    uint32_t m = tw | c.ties[w];
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

// The sample form's gather: every key >= lo appended to the candidates (*s_count counts them all; only the first
// row_slots are stored), the two maps zeroed. The row is read as float4 (after up to 3 keys that align it), 8 keys a
// thread in flight; a warp whose keys are all below lo (most of them) does no more than compare.
constexpr int kSmpUnroll = 2;  // float4 loads a thread keeps in flight
__device__ __forceinline__ void sample_gather(const CandLists& c, int* s_count, const float* sc, int64_t N,
                                              int64_t map_words, int row_slots, uint32_t lo, int tid, int lane) {
  for (int64_t w = tid; w < map_words; w += kSelThreads) {
    c.taken[w] = 0u;
    c.ties[w] = 0u;
  }
  const int64_t mis = int64_t((reinterpret_cast<uintptr_t>(sc) >> 2) & 3u);
  const int64_t head = min((4 - mis) & 3, N), n4 = (N - head) / 4, tail0 = head + 4 * n4;
  // The head and the tail (under 4 keys each): a thread a key, an atomic each.
  const int64_t j1 = tid < 4 ? int64_t(tid) : tail0 + (tid - 4);
  if ((tid < 4 && j1 < head) || (tid >= 4 && tid < 8 && j1 < N)) {
    const uint32_t u = score_key(sc[j1]);
    if (u >= lo) {
      const int i = atomicAdd(s_count, 1);
      if (i < row_slots) {
        c.key[i] = u;
        c.idx[i] = int32_t(j1);
      }
    }
  }
  const float4* s4 = reinterpret_cast<const float4*>(sc + head);
  for (int64_t base = 0; base < n4; base += kSmpUnroll * kSelThreads) {
    float4 v[kSmpUnroll];
#pragma unroll
    for (int k = 0; k < kSmpUnroll; ++k) {
      const int64_t i4 = base + k * kSelThreads + tid;
      v[k] = i4 < n4 ? s4[i4] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    }
#pragma unroll
    for (int k = 0; k < kSmpUnroll; ++k) {
      const uint32_t u[4] = {score_key(v[k].x), score_key(v[k].y), score_key(v[k].z), score_key(v[k].w)};
      const int64_t i4 = base + k * kSelThreads + tid;
      uint32_t f = 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) f |= (i4 < n4 && u[e] >= lo) ? 1u << e : 0u;
      if (__any_sync(0xffffffffu, f != 0u)) {  // rare: the warp's keys at or above lo, appended in lane order
        const int n = __popc(f);
        int incl = n;
        for (int o = 1; o < 32; o <<= 1) {
          const int y = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += y;
        }
        int c0 = 0;
        if (lane == 31) c0 = atomicAdd(s_count, incl);
        c0 = __shfl_sync(0xffffffffu, c0, 31);
        int i = c0 + incl - n;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (((f >> e) & 1u) && i < row_slots) {
            c.key[i] = u[e];
            c.idx[i] = int32_t(head + 4 * i4 + e);
          }
          i += int((f >> e) & 1u);
        }
      }
    }
  }
}

// The sample form's threshold: the 22-bit prefix of the sample_rank-th largest of ns = min(N, kSelSample) keys at
// even strides (two histogram rounds over them), a lower bound of that key, in *lo. False (the row skips the form)
// when the count of keys reaching it would likely exceed row_slots (the sample rank times the stride over 3/4 of the
// slots) or K does not fit the slots. Block-uniform.
constexpr int kSelSample = 2 * kSelThreads;
__device__ __forceinline__ bool sample_threshold(uint32_t* hist, int* warp_sums, SelBin* s_bin, const float* sc,
                                                 int64_t N, int64_t K, int row_slots, int tid, int lane,
                                                 uint32_t* lo) {
  const int64_t ns = N < kSelSample ? N : kSelSample;
  // Rank of the k-th key in the sample (K ns / N) plus 4 of its standard deviations and 4: with keys in random
  // order, the row has fewer than K keys at or above the sample's rank-r key about once in 10^6 rows.
  const float mean = float(K) * float(ns) / float(N);
  int64_t r = int64_t(ceilf(mean + 4.0f * sqrtf(mean) + 4.0f));
  if (r > ns) r = ns;
  if (K >= row_slots || float(r) * float(N) / float(ns) > 0.75f * float(row_slots)) return false;
  uint32_t v[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int64_t i = tid + e * kSelThreads;
    v[e] = i < ns ? score_key(sc[i * N / ns]) : 0u;
  }
  uint32_t prefix = 0;
  int kr = int(r);
  for (int pass = 0; pass < 2; ++pass) {
    const int shift = pass == 0 ? 21 : 10;
    for (int i = tid; i < kSelBins; i += kSelThreads) hist[i] = 0;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const bool match = tid + e * kSelThreads < ns && (pass == 0 || (v[e] >> 21) == (prefix >> 21));
      const uint32_t bin = match ? (v[e] >> shift) & uint32_t(kSelBins - 1) : 0xFFFFFFFFu;
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (match && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], uint32_t(__popc(peers)));
    }
    __syncthreads();
    const SelBin b = sel_find_bin(hist, kSelBins, kr, warp_sums, s_bin);
    prefix |= b.bin << shift;
    kr = b.kr;
  }
  *lo = prefix;
  return true;
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
                                                                     int cand_slots, int64_t sample_min,
                                                                     int32_t* out) {
  dsinfer::cuda::pdl_wait_then_release();
  // [smem_words]: the row's keys [N] when N <= cache_keys; then, in the candidate form, two bit maps over the row
  // [map_words] each and the candidates' keys and indices [row_slots] each (the sample form: the same lists from 0).
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
  if (N > sample_min) {  // block-uniform
    // The sample form's lists start at 0 (it reads the row once, from the scores: no key cache).
    const int64_t room = (smem_words - 2 * map_words) / 2;
    const int slots = int(room < cand_slots ? room : cand_slots);
    uint32_t lo = 0;
    if (sample_threshold(hist, warp_sums, &s_bin, sc, N, K, slots, tid, lane, &lo)) {
      const CandLists c = cand_lists(sel_keys, N, false, map_words, slots);
      sample_gather(c, &s_count, sc, N, map_words, slots, lo, tid, lane);
      __syncthreads();
      const int n = s_count;
      if (n >= K && n <= slots) {  // block-uniform
        cand_finish(c, hist, warp_sums, &s_bin, N, n, 0, 0u, int(K), o, tid, lane);
        return;
      }
      __syncthreads();  // every thread has read s_count (pass 0's first barrier orders the reset)
      if (tid == 0) s_count = 0;
    }
  }
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
    const CandLists c = cand_lists(sel_keys, N, cached, map_words, row_slots);
    const uint32_t lo = prefix, hi = prefix | 0x1FFFFFu;  // pass 0's boundary bin
    cand_gather(c, &s_count, sel_keys, sc, N, cached, row_slots, lo, hi, tid, lane, warp, lt);
    __syncthreads();
    cand_finish(c, hist, warp_sums, &s_bin, N, ncand, 1, prefix, kr, o, tid, lane);
    return;
  }
  select_compact(sel_keys, tile_gt, tile_eq, sc, N, cached, prefix, kr, o, tid, lane, warp, lt);
}
}  // namespace

// The select's plan: the sample form (falling back to the candidate form) with kIdxSelCandSlots slots when a row can
// exceed kIdxSelCandMinKeys keys (below it the candidate form's fixed steps cost more than the two scans they save:
// decode and prefill at context 4,096 were 1.6 us and 2 % slower, session 21), else the full scan.
// DSINFER_INDEXER_SELECT=full takes the full-scan form, =N the candidate form with N slots at any length, =sample
// the sample form at any length (the A/B of one binary: every form gives the same output). Read once.
IdxSelForm indexer_select_form(int64_t max_visible) {
  static const IdxSelForm env = [] {
    const char* v = std::getenv("DSINFER_INDEXER_SELECT");
    if (!v) return IdxSelForm{-1, false};
    if (std::strcmp(v, "full") == 0) return IdxSelForm{0, false};
    if (std::strcmp(v, "sample") == 0) return IdxSelForm{kIdxSelCandSlots, true, 0};
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n > 0 && n <= kIdxSelCandMaxSlots) return IdxSelForm{int(n), false};
    // An A/B switch of one kernel with no Status path: a value it cannot use is named, and the plan decides.
    std::fprintf(stderr, "DSINFER_INDEXER_SELECT must be full, sample or a slot count in 1..%d, found '%s': ignored\n",
                 kIdxSelCandMaxSlots, v);
    return IdxSelForm{-1, false};
  }();
  if (env.cand_slots >= 0) return env;
  if (max_visible > kIdxSelCandMinKeys) return IdxSelForm{kIdxSelCandSlots, true, kIdxSelSampleMinKeys};
  return IdxSelForm{0, false};
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
                           int32_t* out, void* stream, const IdxSelForm* form) {
  const int64_t cache_keys = max_visible < kIdxSelCacheKeys ? max_visible : kIdxSelCacheKeys;
  const bool plan = form == nullptr;
  const IdxSelForm f = plan ? indexer_select_form(max_visible) : *form;
  const int cand_slots = f.cand_slots > kIdxSelCandMaxSlots || f.cand_slots < 0 ? 0 : f.cand_slots;
  const int64_t sample_min = f.sample && cand_slots > 0 ? f.sample_min_keys : INT64_MAX;
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
                            int64_t(smem / sizeof(uint32_t)), cand_slots, sample_min, out);
}

}  // namespace dsinfer::ops::cuda::detail
