// CUDA sampler (see sampling_cuda.h; CPU reference sampling::Sampler). One block of kThreads per row, phases
// separated by block barriers: prepare the work row -> sparse edits -> argmax -> (sampling) min_p / top_k / top_p
// cut -> draw -> logprobs; a plain greedy row is scanned ahead by split blocks (greedy_partials_kernel), and its
// block only reduces their partials. Every reduction has a fixed shape (xor butterflies, warp partials summed in warp
// order), so a row's result is bitwise reproducible and independent of the other rows. The host computes the
// probabilities e_i = exp((w_i - max) / T) in double; so does this kernel, and it orders tokens by the 64-bit
// pattern of e_i (monotone for positive doubles) with ties to the lower id, exactly the host's order. The kept
// set after min_p, top_k and top_p is always a prefix of that order, held as a cut (T, C): token i is kept iff
// key_i > T or (key_i == T and i <= C). Cuts are found by a 4-bit-digit radix walk over the keys, with the
// weight of each digit bin (token count for top_k, probability mass for top_p) summed by block reductions.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "ops/sampling/sampling_block.cuh"
#include "ops/sampling/sampling_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {

using namespace sampling_block;

struct Cut {
  uint64_t T = 0;  // initial cut {0, -1}: every token with a nonzero key (min_p survivors)
  int C = -1;
};

__device__ __forceinline__ bool kept(uint64_t key, int i, const Cut& c) {
  return key != 0 && (key > c.T || (key == c.T && i <= c.C));
}
__device__ __forceinline__ double key_value(uint64_t key) { return __longlong_as_double(static_cast<long long>(key)); }

// The host's unnormalised probability (sampler.cpp step 5) as an ordered key; 0 = not a candidate (masked, or
// below min_p). m == -inf never reaches here.
__device__ __forceinline__ uint64_t prob_key(float w, double m, double inv_t, double min_p) {
  const double e = exp((double(w) - m) * inv_t);
  return (e > 0.0 && e >= min_p) ? static_cast<uint64_t>(__double_as_longlong(e)) : 0ull;
}

// What one row's phases share.
struct Row {
  const float* L;     // raw logits row
  float* W;           // work row
  const int32_t* M;   // bitmask row or null
  int V;
  double m, inv_t, min_p;
  __device__ uint64_t key(int i) const { return prob_key(W[i], m, inv_t, min_p); }
  // The raw logit as the host's raw logprobs see it: NaN -> -inf, bitmask applied.
  __device__ float raw(int i) const {
    const float x = L[i];
    if (isnan(x) || (M && !((static_cast<uint32_t>(M[i >> 5]) >> (i & 31)) & 1u))) return -INFINITY;
    return x;
  }
};

// Id of the n-th (1-based) token in ascending id order with key == T among the kept ones (INT_MAX if fewer).
__device__ int nth_tie(const Row& r, const Cut& cut, uint64_t T, int n, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) sh.result = INT_MAX;
  int running = 0;
  for (int base = 0; base < r.V; base += kThreads) {
    const int i = base + int(threadIdx.x);
    bool f = false;
    if (i < r.V) {
      const uint64_t k = r.key(i);
      f = kept(k, i, cut) && k == T;
    }
    const unsigned bal = __ballot_sync(kFull, f);
    if (lane == 0) sh.ii[warp] = __popc(bal);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += sh.ii[w];
      total += sh.ii[w];
    }
    if (f && running + before + __popc(bal & ((1u << lane) - 1u)) + 1 == n) sh.result = i;
    __syncthreads();
    if (running + total >= n) break;  // block-uniform
    running += total;
  }
  const int res = sh.result;
  __syncthreads();
  return res;
}

// The shortest prefix (key desc, id asc) of the kept set whose weight reaches `target`: weight 1 per token
// (by_mass false, target = k: top_k) or its probability (top_p, target = top_p * kept mass). The host walks the
// same order with a running double sum; here bins are summed per digit, so only a target within rounding of a
// boundary could pick a different cut.
__device__ Cut select_prefix(const Row& r, const Cut& cut, bool by_mass, double target, Shared& sh) {
  uint64_t prefix = 0;
  double above = 0.0;  // weight of kept tokens with keys above the prefix's range
  for (int shift = 60; shift >= 0; shift -= 4) {
    const uint64_t hi = shift == 60 ? 0ull : (~0ull << (shift + 4));
    double acc[kBins];
#pragma unroll
    for (int b = 0; b < kBins; ++b) acc[b] = 0.0;
    for (int i = int(threadIdx.x); i < r.V; i += kThreads) {
      const uint64_t k = r.key(i);
      if (!kept(k, i, cut) || (k & hi) != prefix) continue;
      const int d = int((k >> shift) & 15u);
      const double wgt = by_mass ? key_value(k) : 1.0;
#pragma unroll
      for (int b = 0; b < kBins; ++b) acc[b] += b == d ? wgt : 0.0;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int b = 0; b < kBins; ++b) {
      double v = acc[b];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
      if (lane == 0) sh.part[warp * kBins + b] = v;
    }
    __syncthreads();
    if (threadIdx.x < kBins) {
      double s = 0.0;
      for (int w = 0; w < kWarps; ++w) s += sh.part[w * kBins + threadIdx.x];
      sh.bin[threadIdx.x] = s;
    }
    __syncthreads();
    // Every thread walks the bins the same way (weights are positive, so a nonempty bin has weight > 0).
    double run = above, run_sel = above;
    int sel = -1, last = -1;
    for (int b = kBins - 1; b >= 0; --b) {
      const double w = sh.bin[b];
      if (!(w > 0.0)) continue;
      last = b;
      run_sel = run;
      if (run + w >= target) {
        sel = b;
        break;
      }
      run += w;
    }
    __syncthreads();  // sh.bin is rewritten by the next pass
    if (last < 0) return cut;  // empty kept set: cannot happen (callers check); keep the old cut
    if (sel < 0) sel = last;   // rounding left the target unreached: take everything (run_sel is above `last`)
    above = run_sel;
    prefix |= uint64_t(sel) << shift;
  }
  // Ties at the boundary key, taken in ascending id order (all hold the same probability).
  int ties = 0;
  for (int i = int(threadIdx.x); i < r.V; i += kThreads) {
    const uint64_t k = r.key(i);
    ties += kept(k, i, cut) && k == prefix;
  }
  ties = block_sum_int(ties, sh);
  int need = ties;
  if (!by_mass) {
    need = int(target - above);  // exact: counts are small integers in double
  } else {
    const double e = key_value(prefix);
    double cum = above;
    for (int j = 1; j <= ties; ++j) {
      cum += e;
      if (cum >= target) {
        need = j;
        break;
      }
    }
  }
  need = max(1, min(need, ties));
  Cut out;
  out.T = prefix;
  out.C = nth_tie(r, cut, prefix, need, sh);
  return out;
}

// Inverse-CDF draw over the kept tokens in ascending id order: each thread owns a contiguous id segment; the
// segment sums are scanned, then every thread walks its segment from its prefix; the first id whose running
// sum exceeds u * total wins (the host's rule), the last kept id if rounding leaves none.
__device__ int draw(const Row& r, const Cut& cut, double u, Shared& sh) {
  const int S = (r.V + kThreads - 1) / kThreads;
  const int b = int(threadIdx.x) * S, e = min(r.V, b + S);
  double seg = 0.0;
  int last = -1;
  for (int i = b; i < e; ++i) {
    const uint64_t k = r.key(i);
    if (kept(k, i, cut)) {
      seg += key_value(k);
      last = i;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = seg;
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += y;
  }
  double excl = __shfl_up_sync(kFull, incl, 1);
  if (lane == 0) excl = 0.0;
  if (lane == 31) sh.dd[warp] = incl;
  __syncthreads();
  double before = 0.0, total = 0.0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += sh.dd[w];
    total += sh.dd[w];
  }
  __syncthreads();
  const double target = u * total;
  double cum = before + excl;
  int found = INT_MAX;
  for (int i = b; i < e && found == INT_MAX; ++i) {
    const uint64_t k = r.key(i);
    if (!kept(k, i, cut)) continue;
    cum += key_value(k);
    if (cum > target) found = i;
  }
  found = block_min_int(found, sh);
  if (found != INT_MAX) return found;
  return -block_min_int(last < 0 ? INT_MAX : -last, sh);  // the largest kept id
}

// log_softmax of one source row (raw: masked logits; work: the work row) -> the token's logprob and the top n
// (value desc, id asc), the host's log_softmax_top: max, then sum exp(v - max) in double, log_z = max + log(sum).
__device__ void logprobs(const Row& r, bool raw, int token, int n, SampleRowOut* o, Shared& sh) {
  auto val = [&](int i) { return raw ? r.raw(i) : r.W[i]; };
  float mx = -INFINITY;
  int mi = INT_MAX;
  for (int i = int(threadIdx.x); i < r.V; i += kThreads) keep_best(val(i), i, mx, mi);
  block_best(mx, mi, sh);
  double sum = 0.0;
  if (mx != -INFINITY)
    for (int i = int(threadIdx.x); i < r.V; i += kThreads) sum += exp(double(val(i)) - double(mx));
  sum = block_sum(sum, sh);
  const double log_z = sum > 0.0 ? double(mx) + log(sum) : double(INFINITY);
  if (threadIdx.x == 0) o->logprob = float(double(val(token)) - log_z);
  // Top n: n block-wide argmax passes, each over the tokens after the previous pick in the order.
  float pv = INFINITY;
  int pi = -1, count = 0;
  for (int j = 0; j < n; ++j) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = int(threadIdx.x); i < r.V; i += kThreads) {
      const float v = val(i);
      if (v < pv || (v == pv && i > pi)) keep_best(v, i, bv, bi);
    }
    block_best(bv, bi, sh);
    if (bi == INT_MAX) break;  // fewer than n tokens
    if (threadIdx.x == 0) {
      o->top_token[j] = bi;
      o->top_logprob[j] = float(double(bv) - log_z);
    }
    pv = bv;
    pi = bi;
    count = j + 1;
  }
  if (threadIdx.x == 0) o->num_top = count;
}

// Work row: NaN -> -inf, bitmask, then the sparse edits in the host's order (bias, min_tokens bans, penalties).
// Returns false (after reporting) when the raw row is not finite.
__device__ bool prepare(const SampleArgs& a, const SampleRowDesc& d, const Row& r, SampleRowOut* o, Shared& sh) {
  int bad = 0;
  for (int i = int(threadIdx.x); i < r.V; i += kThreads) {
    const float x = r.L[i];
    bad |= !isfinite(x);
    r.W[i] = r.raw(i);
  }
  if (__syncthreads_or(bad)) {
    if (threadIdx.x == 0) o->status = kSampleNonFinite;
    return false;
  }
  auto list_ok = [&](int begin, int count) { return begin >= 0 && count >= 0 && begin <= a.num_entries - count; };
  if (list_ok(d.bias_begin, d.bias_count))
    for (int j = int(threadIdx.x); j < d.bias_count; j += kThreads) {
      const SampleEntry e = a.entries[d.bias_begin + j];
      if (e.token >= 0 && e.token < r.V) r.W[e.token] += e.value;
    }
  __syncthreads();
  if (list_ok(d.ban_begin, d.ban_count))
    for (int j = int(threadIdx.x); j < d.ban_count; j += kThreads) {
      const int t = a.entries[d.ban_begin + j].token;
      if (t >= 0 && t < r.V) r.W[t] = -INFINITY;
    }
  __syncthreads();
  if (list_ok(d.penalty_begin, d.penalty_count))
    for (int j = int(threadIdx.x); j < d.penalty_count; j += kThreads) {
      const SampleEntry e = a.entries[d.penalty_begin + j];
      if (e.token < 0 || e.token >= r.V) continue;
      float x = r.W[e.token];
      if (d.flags & kSampleRepetition)  // the host divides / multiplies in double, then rounds to float
        x = x > 0.0f ? float(double(x) / d.repetition_penalty) : float(double(x) * d.repetition_penalty);
      r.W[e.token] = x - e.value;
    }
  __syncthreads();
  return true;
}

// Sampling proper (temperature, min_p, top_k, top_p, draw) from the work row, whose maximum r.m is finite.
__device__ int sample_row(const SampleRowDesc& d, const Row& r, Cut& cut, Shared& sh) {
  if (d.top_k > 0) {
    int n = 0;
    for (int i = int(threadIdx.x); i < r.V; i += kThreads) n += r.key(i) != 0;
    n = block_sum_int(n, sh);
    if (d.top_k < n) cut = select_prefix(r, cut, false, double(d.top_k), sh);
  }
  if (d.top_p < 1.0) {
    double total = 0.0;
    for (int i = int(threadIdx.x); i < r.V; i += kThreads) {
      const uint64_t k = r.key(i);
      if (kept(k, i, cut)) total += key_value(k);
    }
    total = block_sum(total, sh);
    cut = select_prefix(r, cut, true, d.top_p * total, sh);
  }
  return draw(r, cut, d.uniform, sh);
}

// Whether the description names rows and lists inside the uploaded arrays (else the row reports kSampleBadInput).
__device__ __forceinline__ bool row_ok(const SampleArgs& a, const SampleRowDesc& d) {
  const bool mask_ok = d.mask_row < 0 || (a.mask_words && d.mask_row < a.num_mask_rows);
  return d.logits_row >= 0 && d.logits_row < a.logits_rows && mask_ok && d.top_logprobs >= 0 &&
         d.top_logprobs <= kSampleMaxTop;
}

// Row `row` of the launch (description d): its logits, work row and bitmask row.
__device__ __forceinline__ Row row_of(const SampleArgs& a, const SampleRowDesc& d, int64_t row) {
  Row r;
  r.L = a.logits + int64_t(d.logits_row) * a.logits_stride;
  r.W = a.work + row * a.V;
  r.M = d.mask_row >= 0 ? a.mask_words + int64_t(d.mask_row) * a.words_per_row : nullptr;
  r.V = a.V;
  r.m = 0.0;
  r.inv_t = d.inv_temperature;
  r.min_p = d.min_p;
  return r;
}

// A greedy row with no logprobs and no sparse edits (bias, bans, penalties): its token is the argmax of the raw row
// (NaN -> -inf, the bitmask applied), which no other phase touches. One block walking 129,280 logits took ~108 us
// (H100, session 34), so split blocks (greedy_partials_kernel) scan such a row, and the row kernel reduces their
// partials: `better` is a total order on (value, id), so its maximum does not depend on how the row is cut.
__device__ __forceinline__ bool plain_greedy(const SampleRowDesc& d) {
  return (d.flags & kSampleGreedy) && !(d.flags & kSampleLogprobs) && d.bias_count == 0 && d.ban_count == 0 &&
         d.penalty_count == 0;
}

// Where block s of a plain greedy row parks its partial in the row's work row: the value at [s], the id at
// [split + s], whether its slice held a non-finite logit at [2 * split + s] (the ids and flags as int bits).
struct GreedyPartials {
  float* v;
  int* id;
  int* bad;
  __device__ GreedyPartials(float* w, int split)
      : v(w), id(reinterpret_cast<int*>(w + split)), bad(reinterpret_cast<int*>(w + 2 * split)) {}
};

// Grid (split, rows): block s scans slice s of its plain greedy row (ids [s V / split, (s + 1) V / split)) for the
// raw row's best entry and non-finite logits, as prepare and the argmax do over the whole row.
__global__ void __launch_bounds__(kThreads) greedy_partials_kernel(SampleArgs a) {
  __shared__ Shared sh;
  const SampleRowDesc d = a.rows[blockIdx.y];
  if (!row_ok(a, d) || !plain_greedy(d)) return;  // uniform over the block
  const Row r = row_of(a, d, blockIdx.y);
  const int s = int(blockIdx.x), split = int(gridDim.x);
  const int i0 = int(int64_t(r.V) * s / split), i1 = int(int64_t(r.V) * (s + 1) / split);
  float mv = -INFINITY;
  int mi = INT_MAX, bad = 0;
  for (int i = i0 + int(threadIdx.x); i < i1; i += kThreads) {
    bad |= !isfinite(r.L[i]);
    keep_best(r.raw(i), i, mv, mi);
  }
  bad = __syncthreads_or(bad);
  block_best(mv, mi, sh);
  if (threadIdx.x == 0) {
    const GreedyPartials p(r.W, split);
    p.v[s] = mv;
    p.id[s] = mi;
    p.bad[s] = bad;
  }
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(SampleArgs a) {
  __shared__ Shared sh;
  const SampleRowDesc d = a.rows[blockIdx.x];
  SampleRowOut* o = a.out + blockIdx.x;
  if (threadIdx.x == 0) {
    o->token = -1;
    o->status = kSampleOk;
    o->logprob = 0.0f;
    o->num_top = 0;
  }
  if (!row_ok(a, d)) {
    if (threadIdx.x == 0) o->status = kSampleBadInput;
    return;
  }
  Row r = row_of(a, d, blockIdx.x);
  if (a.split > 0 && plain_greedy(d)) {  // greedy_partials_kernel scanned the row: the best of its partials
    const GreedyPartials p(r.W, a.split);
    float mv = -INFINITY;
    int mi = INT_MAX, bad = 0;
    for (int s = int(threadIdx.x); s < a.split; s += kThreads) {
      bad |= p.bad[s];
      keep_best(p.v[s], p.id[s], mv, mi);
    }
    if (__syncthreads_or(bad)) {
      if (threadIdx.x == 0) o->status = kSampleNonFinite;
      return;
    }
    block_best(mv, mi, sh);
    if (threadIdx.x == 0) o->token = mi == INT_MAX ? 0 : mi;
    return;
  }
  if (!prepare(a, d, r, o, sh)) return;
  float mv = -INFINITY;
  int mi = INT_MAX;
  for (int i = int(threadIdx.x); i < r.V; i += kThreads)
    keep_best(r.W[i], i, mv, mi);
  block_best(mv, mi, sh);
  if (mi == INT_MAX) mi = 0;
  const bool greedy = (d.flags & kSampleGreedy) != 0;
  int token = mi;  // greedy, and the host's fallback when every token is masked
  if (!greedy && mv != -INFINITY) {
    r.m = double(mv);
    Cut cut;
    token = sample_row(d, r, cut, sh);
    if (token < 0) token = mi;
    if ((d.flags & kSampleLogprobs) && (d.flags & kSampleProcessed)) {
      // Processed logprobs describe the sampled-from distribution: kept tokens scaled by 1/T, the rest -inf.
      for (int i = int(threadIdx.x); i < r.V; i += kThreads)
        r.W[i] = kept(r.key(i), i, cut) ? r.W[i] * d.inv_temperature_f : -INFINITY;
      __syncthreads();
    }
  }  // every token masked: the work row is all -inf, which is also the processed distribution's row
  if (threadIdx.x == 0) o->token = token;
  if (d.flags & kSampleLogprobs) logprobs(r, !(d.flags & kSampleProcessed), token, d.top_logprobs, o, sh);
}

}  // namespace

void launch_sample_rows(const SampleArgs& a, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (a.split > 0) greedy_partials_kernel<<<dim3(unsigned(a.split), unsigned(a.num_rows)), kThreads, 0, s>>>(a);
  sample_rows_kernel<<<unsigned(a.num_rows), kThreads, 0, s>>>(a);
}

}  // namespace dsinfer::ops::cuda::detail
