// Over 700 lines: one kernel, its producer and two consumer warpgroups and the barriers between them, read together.
// Sparse attention PREFILL, split-block form with bf16 q in and bf16 o out (session 24, issue 30; the default since
// session 26). The same op as sparse_attention_prefill.cu (64 heads x 512 a block, one shared K = V latent row a key,
// the window + compressed + top-k lists, attention sinks, the inverse RoPE of the output, the FP8 state rows staged
// once as bf16 by that file's staging kernels) with the work of a block split as FlashMLA's SM90 sparse prefill splits
// it (csrc/sm90/prefill/sparse/phase1.cuh, read for the idea; nothing copied):
// - each of the two consumer warpgroups takes its OWN 64-key block (keys 128 j .. + 63 warpgroup 0, + 64 .. + 127
//   warpgroup 1) over all 512 of Q's dims: Q K^T is 32 m64n64k16 a step with no partial scores exchanged (main's
//   kernel splits the dims and exchanges 64 x 32 partial scores every 32-key tile);
// - the two exchange only their row maxima (one float a row) and then P (64 x 64 bf16) through shared memory; each
//   owns half of the output's dims: acc (dims 256 c ..) += P_own V_own (wgmma RS, P from registers) + P_other
//   V_other (wgmma SS, P from shared memory);
// - the key blocks' halves (dims 0-255, 256-511) have their own ready / free mbarriers, so the producer refills the
//   half a warpgroup's own P V has finished with while the other half is still read;
// - q (bf16, [T, H, 512]) arrives by TMA (8 boxes of 64 dims x 64 heads, 128-byte swizzle), issued by the producer
//   once the last item's final Q K^T is done, so it overlaps the last item's softmax, P V and epilogue; the output
//   leaves as bf16 from registers (st.global of bf16 pairs): half the bytes of main's fp32 q and o each way;
// - with p.q_norm (kSplitQNorm, session 29) q is wq_b's raw output and the consumers normalise and rotate the item's
//   Q in shared memory before its first Q K^T (norm_q: head_norm_rope's bits), instead of q_norm_rope's HBM pass.
// The block walks items (token, 64-head group) as main's persistent kernel does (one block an SM, tokens fastest), in
// runs of consecutive tokens with kSplitVarReuse (session 40): the producer then copies a key slot's row only where
// it changes from one token to the next (produce says how the key order makes the window and HCA's rows stay put).
// One split only (num_splits 1: the prefill steps' plan); the exact and batch-invariant modes keep main's kernel.
// Arithmetic: scores x (scale log2 e), exp2, the running max over both blocks of a step (128 keys), P rounded to bf16
// and summed as rounded, fp32 accumulation; the output rounded once to bf16 after the sink, the normalisation and
// the inverse RoPE (fp32). Not main's bits: the GPU test holds it to the CPU reference and to main's kernel within a
// bound derived from the bf16 output rounding (tests/gpu/test_sparse_attention_prefill_split_gpu.cpp).
#include <cuda.h>
#include <cuda_bf16.h>

#include "cuda/ops_device.cuh"
#include "cuda/sm90_async.cuh"
#include "cuda/tensor_map.h"
#include "ops/kv_format/kv_format.h"
#include "ops/sparse_attention/sparse_attention_fp8_common.cuh"  // key lookup, dequant16
#include "ops/sparse_attention/sparse_attention_prefill_launch.h"
#include "ops/sparse_attention/sparse_attention_q_norm.cuh"  // kSplitQNorm: the raw query normalised in place
#include "ops/sparse_attention/sparse_attention_rope_table.cuh"  // the item's inverse-RoPE angles, once
#include "ops/sparse_attention/sparse_attention_wgmma.cuh"       // wgmma_m64n256k16_rs, p_fragments, desc helpers

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
namespace wg = attn_wgmma;
namespace sm90 = dsinfer::cuda::sm90;
using attn_fp8::kChunksPerKey;
using attn_fp8::kD;
using sm90::mbar_arrive;
using sm90::mbar_init;
using sm90::mbar_wait;
using sm90::named_sync;
using sm90::smem_u32;

constexpr int kThreads = 384;    // producer warpgroup + 2 consumer warpgroups
constexpr int kHeads = kFp8Heads;  // 64 heads an item
constexpr int kBlock = 64;       // keys a consumer warpgroup's block
constexpr int kStep = 2 * kBlock;  // keys a step (both blocks)
constexpr int kHalf = kD / 2;    // output dims a consumer warpgroup owns; also a key block's half
constexpr int kProducerRegs = 72, kConsumerRegs = 216;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * (65536 / kThreads / 8 * 8), "register file");
static_assert(kHeads == 64 && kD == 512, "the wgmma shapes assume 64 heads x 512 dims");

// Shared memory (offsets from the base aligned up to 1024 bytes: the swizzled Q boxes need it).
constexpr uint32_t kQBox = 64 * 128;                        // 64 heads x 64 dims bf16, 128-byte swizzle
constexpr uint32_t kQBytes = 8 * kQBox;                     // 64 KB
constexpr uint32_t kBlockBytes = kBlock * kD * 2;           // 64 KB: a key block, core matrices (no swizzle)
constexpr uint32_t kHalfBytes = kBlockBytes / 2;            // dims 0-255 | 256-511: each half contiguous
constexpr uint32_t kPBytes = kHeads * kBlock * 2;           // 8 KB: a warpgroup's P, core matrices
constexpr uint32_t kOffQ = 0;
constexpr uint32_t kOffK = kOffQ + kQBytes;                 // [2 blocks]
constexpr uint32_t kOffP = kOffK + 2 * kBlockBytes;         // [2 warpgroups]
constexpr uint32_t kOffMax = kOffP + 2 * kPBytes;           // f32 [2][64]: a step's row maxima (log2 units)
constexpr uint32_t kOffL = kOffMax + 2 * 64 * 4;            // f32 [2 items][2][64]: the item's row sums
constexpr uint32_t kOffFlag = kOffL + 2 * 2 * 64 * 4;          // u8 [2][64]: key present
constexpr uint32_t kOffRope = kOffFlag + 2 * 64;            // float2 [kMaxPairs]
constexpr uint32_t kOffBar = kOffRope + attn_rope::kMaxPairs * 8;  // u64 ready[2][2], free[2][2], qfull, qfree
constexpr uint32_t kBars = 10;
constexpr uint32_t kBytes = kOffBar + kBars * 8 + 1024;     // + 1024: the base is aligned up
static_assert(kBytes <= 232448, "over the 227 KB of shared memory a block may use");
static_assert(kOffBar % 8 == 0 && kOffRope % 8 == 0 && kOffP % 1024 == 0 && kOffK % 1024 == 0, "alignment");

enum NamedBarrier : int { kBarMax = 1, kBarP = 2, kBarL = 3, kBarWg0 = 4, kBarQ = 6 };  // kBarWg0 + c: warpgroup c

// Element offset (bf16) of (row, col) in a 64-row operand of 8 x 8 core matrices (128 contiguous bytes), column
// group major: core matrix (row group rg, column group cg) at (8 cg + rg) x 128 bytes. The key blocks (row = key,
// col = dim) and P (row = head, col = key) use it; wgmma reads it K-major with LBO 1024, SBO 128 and (the key block
// as V) MN-major with LBO 128 (keys), SBO 1024 (dims).
__device__ __forceinline__ int cm_off(int r, int c) { return (((c >> 3) * 8 + (r >> 3)) * 8 + (r & 7)) * 8 + (c & 7); }

// Matrix descriptor of a K-major operand of 128-byte rows with the 128-byte swizzle, 8-row groups 1024 bytes apart
// (Q as TMA wrote it).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// A token's keys: list 0, then 1, then 2 (n0, n01: the first list's length, the first two's; nk all).
struct Keys {
  int n0 = 0, n01 = 0, nk = 0;
};
__device__ __forceinline__ Keys keys_of(const SparseAttentionFp8Params& p, int t) {
  Keys k;
  k.n0 = int(attn_fp8::list_len(p.keys[0], t));
  k.n01 = k.n0 + int(attn_fp8::list_len(p.keys[1], t));
  k.nk = k.n01 + int(attn_fp8::list_len(p.keys[2], t));
  return k;
}

// An item: token t, heads h0 .. h0 + 63 (one split).
struct Item {
  int t = 0, h0 = 0;
};

// The block's walk over the items: runs of `run` consecutive tokens of one head group, run u = blockIdx.x, +
// gridDim.x, .. (tokens fastest, then head groups; a head group's last run may be short). With run 1 it is session
// 24's order (item i = blockIdx.x + gridDim.x k: token i % T, head group i / T). Longer runs let a step's key rows
// stay in shared memory from one token to the next (the producer's reuse, session 40).
struct Walk {
  int T = 0, run = 1, group_runs = 0, runs = 0;
  __device__ __forceinline__ Walk(int T_, int groups, int run_)
      : T(T_), run(run_), group_runs((T_ + run_ - 1) / run_), runs(groups * ((T_ + run_ - 1) / run_)) {}
  // The block's next item after its slot `slot` (-1 before the first); false past its last.
  __device__ __forceinline__ bool next(int& slot, Item& it) const {
    for (;;) {
      ++slot;
      const int u = int(blockIdx.x) + int(gridDim.x) * (slot / run);
      if (u >= runs) return false;
      it.t = (u % group_runs) * run + slot % run;
      it.h0 = (u / group_runs) * kHeads;
      if (it.t < T) return true;
    }
  }
};

// The barriers: ready / free of key block c's half h (dims 256 h ..), the item's Q written / read.
struct Bars {
  uint32_t base = 0;
  __device__ __forceinline__ uint32_t ready(int c, int h) const { return base + 8u * uint32_t(2 * c + h); }
  __device__ __forceinline__ uint32_t free(int c, int h) const { return base + 32u + 8u * uint32_t(2 * c + h); }
  __device__ __forceinline__ uint32_t qfull() const { return base + 64u; }
  __device__ __forceinline__ uint32_t qfree() const { return base + 72u; }
};

// A store of the output (4 or 16 bytes) with kHint: no L1 allocation, the L2 policy pol.
template <bool kHint>
__device__ __forceinline__ void store_o(uint32_t* at, uint32_t v, uint64_t pol) {
  if constexpr (kHint)
    asm volatile("st.global.L1::no_allocate.L2::cache_hint.b32 [%0], %1, %2;\n" ::"l"(at), "r"(v), "l"(pol) : "memory");
  else
    *at = v;
}
template <bool kHint>
__device__ __forceinline__ void store_o(uint4* at, uint4 v, uint64_t pol) {
  if constexpr (kHint)
    asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;\n" ::"l"(at), "r"(v.x),
                 "r"(v.y), "r"(v.z), "r"(v.w), "l"(pol)
                 : "memory");
  else
    *at = v;
}

// Key `key` of token t as the producer needs it: the staged row (>= 0), -1 no key, -2 a named row the staging did
// not take (past its capacity: src / r say where it is, the producer dequantises it).
__device__ __forceinline__ int staged_row(const SparseAttentionFp8Params& p, const PrefillStaging& s, int t,
                                          const Keys& ks, int key, int& src, int& r) {
  // attn_fp8::key_cache_row in 32-bit arithmetic (the producer has 56 registers; T x stride and rows < 2^31: the
  // list shapes the op checks and the runner's)
  src = key < ks.n0 ? 0 : (key < ks.n01 ? 1 : 2);
  r = -1;
  if (key >= ks.nk) return -1;
  const Fp8KeySource& l = src == 0 ? p.keys[0] : (src == 1 ? p.keys[1] : p.keys[2]);
  const int j = src == 0 ? key : (src == 1 ? key - ks.n0 : key - ks.n01);
  r = l.idx[t * int(l.stride) + j];
  if (r < 0 || r >= int(l.rows)) {
    r = -1;
    return -1;
  }
  // (selects, not an index: a runtime index into the kernel's parameters would copy them to local memory)
  const int32_t m = (src == 0 ? s.map[0] : (src == 1 ? s.map[1] : s.map[2]))[r];
  return m > 0 ? m - 1 : -2;
}

// A key without a staged row (past the staging's capacity; rare): half h of its cache row dequantised by its own
// lane into row kr of the key block (out of line: the copy loop keeps its registers).
__device__ __noinline__ void dequant_half(const SparseAttentionFp8Params& p, int src, int r, int h, int kr,
                                          __nv_bfloat16* kb) {
  const Fp8KeySource& ks = src == 0 ? p.keys[0] : (src == 1 ? p.keys[1] : p.keys[2]);
  const uint8_t* data = ks.cache + kv_data_offset(ks.pages, r);
  for (int ch = h == 0 ? 0 : kHalf / 16; ch < (h == 0 ? kHalf / 16 : kChunksPerKey); ++ch) {
    const uint4 v = *reinterpret_cast<const uint4*>(data + 16 * ch);
    if (ch < int(kKvNope) / 16) {
      attn_fp8::dequant16(v, ks.cache[kv_scale_offset(ks.pages, r) + ch / 4], kb + cm_off(kr, 16 * ch),
                          kb + cm_off(kr, 16 * ch + 8));
    } else {
      *reinterpret_cast<uint4*>(kb + cm_off(kr, int(kKvNope) + 8 * (ch - int(kKvNope) / 16))) = v;
    }
  }
}

// A staged row code for copy_half: the slot already holds the row (the producer's reuse).
constexpr int kKept = -4;

// Producer warp: half h (dims 256 h ..) of its 32 keys (key block rows kw0 .. kw0 + 31) into the key block at kb.
// Lanes 4 a key, 16 bytes each: an instruction copies 64 contiguous bytes of 8 rows (two full L2 sectors a row) into
// 4 core-matrix columns (4 shared-memory wavefronts, the minimum for 512 bytes). Copy m (0 .. 31) of a lane: key
// 8 (m % 4) + lane / 4 of the warp's, dims 256 h + 32 (m / 4) + 8 (lane % 4) ..: one base address a lane (shared) and
// one a key (global) plus constants. A missing key's chunks are zeros (cp.async with no source bytes); a key without
// a staged row is dequantised from the cache by its own lane; a key whose code is kKept is not copied.
// kHint (kSplitVarL2Hints): the copies with the L2 policy pol (cp_async16_l2).
template <bool kHint>
__device__ __forceinline__ void copy_half(const SparseAttentionFp8Params& p, const PrefillStaging& s, int staged,
                                          int src, int r, int h, int kw0, unsigned char* sm, int pc, uint64_t pol) {
  const int lane = threadIdx.x & 31;
  // cm_off(kw0 + 8 q + lane / 4, 256 h + 32 (m / 4) + 8 (lane % 4)) = base + 2048 (m / 4) + 64 q (elements)
  const uint32_t sbase = smem_u32(sm + kOffK) + uint32_t(pc) * kBlockBytes +
                         2u * uint32_t((32 * h + (lane & 3)) * 512 + (kw0 >> 3) * 64 + (lane >> 2) * 8);
  const __nv_bfloat16* rows = reinterpret_cast<const __nv_bfloat16*>(s.rows);
#pragma unroll 1
  for (int q = 0; q < 4; ++q) {
    const int st = __shfl_sync(dev::kFull, staged, 8 * q + (lane >> 2));
    if (st < -1) continue;  // -2: its own lane dequantises it below; kKept: the slot holds the row already
    const __nv_bfloat16* from = rows + int64_t(st >= 0 ? st : 0) * kD + kHalf * h + 8 * (lane & 3);
#pragma unroll
    for (int m4 = 0; m4 < 8; ++m4) {
      const uint32_t dst = sbase + 2u * uint32_t(2048 * m4) + 128u * uint32_t(q);
      if constexpr (kHint) sm90::cp_async16_l2(dst, from + 32 * m4, st >= 0, pol);
      else sm90::cp_async16(dst, from + 32 * m4, st >= 0);
    }
  }
  if (staged == -2)
    dequant_half(p, src, r, h, kw0 + lane, reinterpret_cast<__nv_bfloat16*>(sm + kOffK + uint32_t(pc) * kBlockBytes));
}

// Warpgroup 0. Thread 0 loads each item's Q by TMA once the last item's final Q K^T is done (qfree) and prefetches
// the next item's into L2. Threads 64 c .. 64 c + 63 fill key block c (keys 128 j + 64 c ..) of every step: its own
// half (dims 256 c ..; freed first, by warpgroup c's own P V) then the other; each half's `ready` barrier counts 64
// arrivals when the thread's copies have landed and 64 plain ones (the flags and any zero / dequantised stores,
// released by the arrive).
// kMode: the bench's probes (kSplitProbe*: NoQ arrives on qfull with no load, NoGather fills no key block) and the
// kernel's variants (kSplitVar*: L2Hints gives the copies an L2 policy).
// reuse (session 40): thread (pc, pk) owns key slot 64 pc + pk of every step and remembers the staged row it holds;
// a step whose key there is that row again copies nothing into it. Neighbouring tokens then meet their shared rows
// in place: the token at an even position walks its steps last to first and one at an odd position first to last
// (the window step 0 ends one token and starts the next; the last step, HCA's compressed entries, the reverse), and
// step 0's key j sits in slot (j + pos + 1) % 128, so that a full window's row of position q is in slot q % 128 for
// every token that sees it. A token's key order, so its bits, depends on its own position and lists only (not on
// the block, the run or the grid).
template <int kMode>
__device__ __forceinline__ void produce(const SparseAttentionFp8Params& p, const PrefillStaging& s,
                                        const CUtensorMap* qmap, unsigned char* sm, const Bars& bars, int run,
                                        bool reuse) {
  const int tid = threadIdx.x, pc = tid >> 6, pk = tid & 63, own = kBlock * pc + pk;
  const int T = int(p.T), H = int(p.heads);
  const Walk walk(T, (H + kHeads - 1) / kHeads, run);
  const uint32_t qa = smem_u32(sm + kOffQ), flag = smem_u32(sm + kOffFlag) + uint32_t(own);
  constexpr bool kHint = (kMode & kSplitVarL2Hints) != 0;
  const uint64_t pol = kHint ? sm90::l2_evict_last() : 0;
  int step = 0, k = 0, slot = -1;
  int held = -3;  // the staged row slot `own` holds (-1 zeros, -3 none known)
  Item it;
  for (; walk.next(slot, it); ++k) {
    if (tid == 0) {
      if (k > 0) mbar_wait(bars.qfree(), uint32_t((k - 1) & 1));
      if (kMode & kSplitProbeNoQ) {
        mbar_arrive(bars.qfull());
      } else {
        sm90::mbar_arrive_expect_tx(bars.qfull(), kQBytes);
#pragma unroll
        for (int b = 0; b < 8; ++b)
          sm90::tma_load_2d(qa + uint32_t(b) * kQBox, qmap, 64 * b, it.t * H + it.h0, bars.qfull());
      }
      int ns = slot;
      Item nx;
      if (!(kMode & kSplitProbeNoQ) && walk.next(ns, nx)) {
#pragma unroll
        for (int b = 0; b < 8; ++b) sm90::tma_prefetch_2d(qmap, 64 * b, nx.t * H + nx.h0);
      }
    }
    const Keys ks = keys_of(p, it.t);
    const int nsteps = (ks.nk + kStep - 1) / kStep;
    int rot = 0;
    bool forward = true;
    if (reuse && p.pos) {
      const int pos = p.pos[it.t];
      rot = (pos + 1) & (kStep - 1);
      forward = (pos & 1) != 0;
    }
    for (int j = 0; j < nsteps; ++j, ++step) {
      const int sj = forward ? j : nsteps - 1 - j;  // the step's place in the token's key order
      const int key = sj == 0 ? ((own - rot) & (kStep - 1)) : kStep * sj + own;
      int src = 0, r = -1;
      const int staged = staged_row(p, s, it.t, ks, key, src, r);
      const bool kept = reuse && staged != -2 && staged == held;
      held = staged == -2 ? -3 : staged;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int h = pc ^ hh;
        if (step > 0) mbar_wait(bars.free(pc, h), uint32_t((step - 1) & 1));
        if (hh == 0)
          asm volatile("st.shared.u8 [%0], %1;\n" ::"r"(flag), "h"(uint16_t(staged != -1 ? 1 : 0)) : "memory");
        if (!(kMode & kSplitProbeNoGather))
          copy_half<kHint>(p, s, kept ? kKept : staged, src, r, h, pk & 32, sm, pc, pol);
        sm90::fence_proxy_async();  // the flags and any generic stores, before the consumers' wgmma
        sm90::mbar_arrive_cp_async(bars.ready(pc, h));
        mbar_arrive(bars.ready(pc, h));
      }
    }
  }
  sm90::cp_async_wait<0>();
}

// Q K^T of the item's 64 heads against a key block over one half of the dims (16 k16 steps), issued as one commit
// group; da0: Q's descriptor at the half's first box (4 h), db0: the key block's at the half's first dim (256 h);
// first: the first step does not accumulate (s = Q K^T). The steps' descriptors are the bases plus constants
// (addresses >> 4 in the low 14 bits: no carry below 256 KB).
__device__ __forceinline__ void qk_half(uint64_t da0, uint64_t db0, bool first, float (&sc)[8][4]) {
  wg::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 16; ++kk) {
    const uint64_t da = da0 + uint64_t(((kk >> 2) * int(kQBox) + (kk & 3) * 32) >> 4);
    const uint64_t db = db0 + uint64_t((16 * kk * 128) >> 4);
    wg::wgmma_m64n64k16_ss(sc, da, db, first && kk == 0 ? 0 : 1);
  }
  wg::wgmma_commit();
}

// Consumer warpgroup c's online softmax of a step: its block's scores masked (the producer's key flags) and scaled to
// log2 units, the rows' maxima exchanged with the other warpgroup (one float a row through shared memory), then P =
// exp2(s - max) rounded to bf16 in sc, the row sums (as rounded) and acc rescaled by the moved maxima.
// lane, q4: the thread's lane and lane % 4; row0: its first accumulator row (16 warp + lane / 4).
// kMode & kSplitProbeNoSoftmax: only the exchange's barrier (P = the raw scores: wrong by design).
template <int c, int kMode>
__device__ __forceinline__ void softmax_step(unsigned char* sm, float scale2, int lane, int q4, int row0,
                                             float (&sc)[8][4], float (&m)[2], float (&l)[2], float (&acc)[32][4]) {
  if (kMode & kSplitProbeNoSoftmax) {
    named_sync(kBarMax, 256);
    return;
  }
  float* smax = reinterpret_cast<float*>(sm + kOffMax);
  const uint8_t* flags = sm + kOffFlag + c * kBlock;
  // Masked, scaled (log2 units) scores and the rows' maxima over this block.
  // (the key masks shifted by the lane's 2 q4 once: each element's bit is then at a constant position)
  const uint32_t vlo = __ballot_sync(dev::kFull, flags[lane] != 0) >> (2 * q4);
  const uint32_t vhi = __ballot_sync(dev::kFull, flags[32 + lane] != 0) >> (2 * q4);
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int jn = 0; jn < 8; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int kb = 8 * (jn & 3) + (e & 1);  // key 8 jn + 2 q4 + (e & 1), less 2 q4 (and 32 from jn 4 on)
      const bool ok = (((jn < 4 ? vlo : vhi) >> kb) & 1u) != 0;
      sc[jn][e] = ok ? sc[jn][e] * scale2 : -INFINITY;
      mx[e >> 1] = fmaxf(mx[e >> 1], sc[jn][e]);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFull, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(dev::kFull, mx[r], 2));
  }
  if (q4 == 0) {
    smax[c * 64 + row0] = mx[0];
    smax[c * 64 + row0 + 8] = mx[1];
  }
  named_sync(kBarMax, 256);
  float alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float mnew = fmaxf(m[r], fmaxf(mx[r], smax[(c ^ 1) * 64 + row0 + 8 * r]));
    alpha[r] = mnew != -INFINITY ? exp2f(m[r] - mnew) : 1.0f;
    mx[r] = mnew;
    m[r] = mnew;
  }
#pragma unroll
  for (int jn = 0; jn < 8; ++jn)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const float pv = mx[r] != -INFINITY ? __bfloat162float(__float2bfloat16_rn(exp2f(sc[jn][e] - mx[r]))) : 0.0f;
      sc[jn][e] = pv;
      sum[r] += pv;
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + sum[r];
  // (a factor of 1 leaves acc's bits as they are: the warp skips the 128 multiplies when no row max moved)
  if (__any_sync(dev::kFull, alpha[0] != 1.0f || alpha[1] != 1.0f)) attn_mma::rescale_rows(acc, alpha);
}

// A 4 x 4 transpose of 32-bit words across the lanes of a quad (q4 = lane % 4): lane q4's word j in, lane j's word
// q4 out (two butterfly stages, word pairs (k, k + 2) across lanes q4 ^ 2, then (k, k + 1) across q4 ^ 1).
// Warp-collective.
__device__ __forceinline__ void quad_transpose(uint32_t (&w)[4], int q4) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const bool hi = (q4 & 2) != 0;
    const uint32_t r = __shfl_xor_sync(dev::kFull, hi ? w[k] : w[k + 2], 2);
    if (hi) w[k] = r;
    else w[k + 2] = r;
  }
#pragma unroll
  for (int k = 0; k < 4; k += 2) {
    const bool hi = (q4 & 1) != 0;
    const uint32_t r = __shfl_xor_sync(dev::kFull, hi ? w[k] : w[k + 1], 1);
    if (hi) w[k] = r;
    else w[k + 1] = r;
  }
}

// Consumer warpgroup c's epilogue of an item: the row sums of both warpgroups (each summed its own blocks' P), then
// o = acc / (l + the sink's term), the inverse RoPE, bf16 pairs to o.
// kMode & kSplitProbeNoStore: no output written (one element kept live so that the products are not removed).
// kMode & kSplitVarStore16: each lane quad's 4 x 4 pairs of 4 n-tiles transposed (quad_transpose) and stored as one
// 16-byte piece a lane (n-tile 4 qg + q4's 8 dims): the same values at the same addresses. kMode & kSplitVarL2Hints:
// the stores with no L1 allocation and L2 evict_first.
template <int c, int kMode>
__device__ __forceinline__ void epilogue(const SparseAttentionFp8Params& p, unsigned char* sm, const Item& it, int k,
                                         int q4, int row0, const float (&m)[2], float (&l)[2],
                                         const float (&acc)[32][4], uint16_t* o) {
  constexpr bool kHint = (kMode & kSplitVarL2Hints) != 0, kStore16 = (kMode & kSplitVarStore16) != 0;
  constexpr bool kStore = !(kMode & kSplitProbeNoStore);
  const int H = int(p.heads);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(dev::kFull, l[r], 1);
    l[r] += __shfl_xor_sync(dev::kFull, l[r], 2);
  }
  // (by item parity: an item with no keys reaches this write with no barrier after the other warpgroup's reads of
  // the last item's sums)
  float* slk = reinterpret_cast<float*>(sm + kOffL) + (k & 1) * 128;
  const float2* rope = reinterpret_cast<const float2*>(sm + kOffRope);
  if (q4 == 0) {
    slk[c * 64 + row0] = l[0];
    slk[c * 64 + row0 + 8] = l[1];
  }
  named_sync(kBarL, 256);  // also orders this warpgroup's angle table before its reads below
  const uint64_t pol = kHint ? sm90::l2_evict_first() : 0;
  // The inverse RoPE of dims >= rs from the item's table (attn_rope::apply's rotation: table[(d - rs) / 2]); pair
  // nt's dim d = 256 c + 8 nt + 2 q4 and its angle tb + 4 nt.
  const int rs = kD - int(p.rope_dim), d0 = kHalf * c + 2 * q4, tb = (d0 - rs) / 2;
  // Output pair nt of row r, normalised and rotated.
  auto pair = [&](int r, int nt, float f) {
    float e0 = acc[nt][2 * r] * f;
    float e1 = acc[nt][2 * r + 1] * f;
    if (d0 + 8 * nt >= rs) {
      const float2 cs = rope[tb + 4 * nt];
      dev::rope_rotate(e0, e1, cs.x, cs.y);
    }
    return attn_mma::pack_bf16(e0, e1);
  };
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int h = it.h0 + row0 + 8 * r;
    // (kStore16 shuffles across the quad: a row past H, the same for its whole quad, is computed and not stored)
    const bool live = h < H;
    if (!kStore16 && !live) continue;
    const int hs = live ? h : H - 1;
    const float lt = l[r] + slk[(c ^ 1) * 64 + row0 + 8 * r];
    const float sink2 = p.sinks[hs] * 1.4426950408889634f, mm = fmaxf(m[r], sink2);
    const float em = exp2f(m[r] - mm);
    const float f = em / (lt * em + exp2f(sink2 - mm));
    if constexpr (kStore16) {
      uint4* orow = reinterpret_cast<uint4*>(o + (int64_t(it.t) * H + hs) * kD + kHalf * c);
#pragma unroll
      for (int qg = 0; qg < 8; ++qg) {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = pair(r, 4 * qg + j, f);
        quad_transpose(w, q4);
        if (live && (kStore || w[0] == 12345u))
          store_o<kHint>(orow + 4 * qg + q4, make_uint4(w[0], w[1], w[2], w[3]), pol);
      }
    } else {
      uint32_t* orow = reinterpret_cast<uint32_t*>(o + (int64_t(it.t) * H + h) * kD + d0);
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) {
        const uint32_t v = pair(r, nt, f);
        if (kStore || v == 12345u) store_o<kHint>(orow + 4 * nt, v, pol);
      }
    }
  }
}

// An item's key count and position (global loads; kSplitVarEarlyItem issues the next item's under the current one, so
// that their first use is not a load's latency after the last epilogue). Zeros past the last item.
struct ItemLoads {
  int nk = 0;
  int pos = 0;
};
__device__ __forceinline__ ItemLoads item_loads(const SparseAttentionFp8Params& p, bool has, const Item& it) {
  ItemLoads a;
  if (has) {
    a.nk = keys_of(p, it.t).nk;
    if (p.rope_dim > 0) a.pos = p.pos[it.t];
  }
  return a;
}
// The loads of the block's item after its slot `slot` (zeros past its last).
__device__ __forceinline__ ItemLoads loads_after(const SparseAttentionFp8Params& p, const Walk& walk, int slot) {
  Item nx;
  const bool has = walk.next(slot, nx);
  return item_loads(p, has, nx);
}

// P for the other warpgroup: the A fragments' bf16 pairs into P's core matrices (a warp's store of one fragment
// register fills one 128-byte core matrix: conflict-free).
__device__ __forceinline__ void store_p(uint32_t* pown, const uint32_t (&a)[4][4], int row0, int q4) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int key = 16 * kk + 2 * q4;
    pown[cm_off(row0, key) / 2] = a[kk][0];
    pown[cm_off(row0 + 8, key) / 2] = a[kk][1];
    pown[cm_off(row0, key + 8) / 2] = a[kk][2];
    pown[cm_off(row0 + 8, key + 8) / 2] = a[kk][3];
  }
}

// Consumer warpgroup c over the block's items: each step's own key block (keys 128 j + 64 c ..) scored over all 512
// dims, the row maxima exchanged, P = exp2(s - max) rounded to bf16 (its sum as rounded), the output dims 256 c ..
// accumulated from both blocks' P; the epilogue adds the other warpgroup's row sums, the sink, the inverse RoPE and
// writes bf16 pairs.
// c is a template parameter: the descriptors and shared addresses are then warp-uniform to the compiler (uniform
// registers, no conversion before each wgmma).
template <int c, int kMode>
__device__ __forceinline__ void consume(const SparseAttentionFp8Params& p, unsigned char* sm, const Bars& bars,
                                        uint16_t* o, int run) {
  const int wt = int(threadIdx.x) & 127, warp = wt >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, q4 = lane & 3, row0 = 16 * warp + g;
  const int T = int(p.T), H = int(p.heads);
  // (read here, not before the role split: values live across setmaxnreg are spilled)
  const Walk walk(T, (H + kHeads - 1) / kHeads, run);
  const uint32_t sbase = smem_u32(sm);
  const float scale2 = p.scale * 1.4426950408889634f;
  constexpr bool kEarly = (kMode & kSplitVarEarlyItem) != 0, kQNorm = (kMode & kSplitQNorm) != 0;
  ItemLoads cur;
  if constexpr (kEarly) cur = loads_after(p, walk, -1);
  int step = 0, k = 0, slot = -1;
  Item it;
  for (; walk.next(slot, it); ++k) {
    ItemLoads nxt;
    if constexpr (kEarly) nxt = loads_after(p, walk, slot);
    else cur = item_loads(p, true, it);
    named_sync(kBarWg0 + c, 128);  // the last item's epilogue has read the angle table
    if (p.rope_dim > 0)
      attn_rope::fill(p, kD, int64_t(cur.pos), kHalf * c, kHalf * (c + 1), wt, 128,
                      reinterpret_cast<float2*>(sm + kOffRope));
    const int nsteps = (cur.nk + kStep - 1) / kStep;
    if constexpr (kQNorm) {  // (before acc is live) the raw query normalised in place once both halves' angles are in
      mbar_wait(bars.qfull(), uint32_t(k & 1));
      if (nsteps > 0) {  // (the same for both warpgroups: one item)
        named_sync(kBarQ, 256);
        attn_qnorm::norm_q(sm + kOffQ, kQBox, reinterpret_cast<const float2*>(sm + kOffRope), int(p.rope_dim),
                           p.q_norm_eps, 8 * (4 * c + warp), lane);
        sm90::fence_proxy_async();  // the generic stores, before either warpgroup's wgmma reads Q
        named_sync(kBarQ, 256);
      }
    }
    float acc[32][4];
#pragma unroll
    for (int nt = 0; nt < 32; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
    wg::wgmma_fence_regs(acc);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    if constexpr (!kQNorm) mbar_wait(bars.qfull(), uint32_t(k & 1));
    if (nsteps == 0) mbar_arrive(bars.qfree());
    for (int j = 0; j < nsteps; ++j, ++step) {
      const uint32_t par = uint32_t(step & 1);
      // The products' base descriptors (the k16 steps add constants), from the shared base made opaque here so that
      // the compiler derives them in each step rather than holding them across it (held, they were spilled): Q K^T
      // of the own block over half c, then half c ^ 1; P V over the output dims 256 c .. of the own block (P in
      // registers) and of the other (P from shared memory).
      uint32_t sb;
      asm volatile("mov.b32 %0, %1;\n" : "=r"(sb) : "r"(sbase));
      uint32_t* pown = reinterpret_cast<uint32_t*>(sm + kOffP + uint32_t(c) * kPBytes);
      const uint32_t qa = sb + kOffQ, kown = sb + kOffK + uint32_t(c) * kBlockBytes;
      const uint32_t koth = sb + kOffK + uint32_t(c ^ 1) * kBlockBytes;
      const uint64_t dq_own = desc_sw128(qa + uint32_t(c) * 4u * kQBox);
      const uint64_t dq_oth = desc_sw128(qa + uint32_t(c ^ 1) * 4u * kQBox);
      const uint64_t dk_own = wg::wgmma_desc(kown + uint32_t(c) * kHalfBytes, 1024u, 128u);
      const uint64_t dk_oth = wg::wgmma_desc(kown + uint32_t(c ^ 1) * kHalfBytes, 1024u, 128u);
      float sc[8][4];
      mbar_wait(bars.ready(c, c), par);
      sm90::fence_proxy_async();
      constexpr bool kMath = !(kMode & kSplitProbeNoMath);
      if (kMath) qk_half(dq_own, dk_own, true, sc);
      if (j > 0) {  // the last step's P V over the other block is done: its half c may be refilled
        wg::wgmma_wait<1>();
        mbar_arrive(bars.free(c ^ 1, c));
      }
      mbar_wait(bars.ready(c, c ^ 1), par);
      sm90::fence_proxy_async();
      if (kMath) {
        qk_half(dq_oth, dk_oth, false, sc);
      } else {
#pragma unroll
        for (int e = 0; e < 32; ++e) sc[e >> 2][e & 3] = 0.0f;
      }
      wg::wgmma_wait<0>();
      wg::wgmma_fence_regs(sc);
      wg::wgmma_fence_regs(acc);
      if (j == nsteps - 1) mbar_arrive(bars.qfree());  // the item's last read of Q
      softmax_step<c, kMode>(sm, scale2, lane, q4, row0, sc, m, l, acc);
      // acc += P_own V_own (half c of the own block), P from registers.
      uint32_t a[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        a[kk][0] = attn_mma::pack_bf16(sc[2 * kk][0], sc[2 * kk][1]);
        a[kk][1] = attn_mma::pack_bf16(sc[2 * kk][2], sc[2 * kk][3]);
        a[kk][2] = attn_mma::pack_bf16(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
        a[kk][3] = attn_mma::pack_bf16(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[kk][e])::"memory");
      }
      const uint64_t dv_own = wg::wgmma_desc(kown + uint32_t(c) * kHalfBytes, 128u, 1024u);
      wg::wgmma_fence_regs(acc);
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4 && kMath; ++kk)
        wg::wgmma_m64n256k16_rs(acc, a[kk], dv_own + uint64_t((kk * 256) >> 4));
      wg::wgmma_commit();
      store_p(pown, a, row0, q4);
      sm90::fence_proxy_async();  // P's stores, before the other warpgroup's wgmma reads them
      wg::wgmma_wait<0>();
      wg::wgmma_fence_regs(acc);
      mbar_arrive(bars.free(c, c));  // the own block's half c is read (its other half by the other warpgroup)
      named_sync(kBarP, 256);
      // acc += P_other V_other (half c of the other block), both from shared memory; completed under the next
      // step's first Q K^T.
      const uint64_t dv_oth = wg::wgmma_desc(koth + uint32_t(c) * kHalfBytes, 128u, 1024u);
      const uint64_t dp_oth = wg::wgmma_desc(sb + kOffP + uint32_t(c ^ 1) * kPBytes, 1024u, 128u);
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4 && kMath; ++kk)
        wg::wgmma_m64n256k16_ss(acc, dp_oth + uint64_t((kk * 2048) >> 4), dv_oth + uint64_t((kk * 256) >> 4));
      wg::wgmma_commit();
    }
    wg::wgmma_wait<0>();  // (also with no steps: no wait is injected where acc is read)
    wg::wgmma_fence_regs(acc);
    if (nsteps > 0) mbar_arrive(bars.free(c ^ 1, c));
    epilogue<c, kMode>(p, sm, it, k, q4, row0, m, l, acc, o);
    if constexpr (kEarly) cur = nxt;
  }
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_split_kernel(const __grid_constant__ SparseAttentionFp8Params p, const __grid_constant__ PrefillStaging st,
                         const __grid_constant__ CUtensorMap qmap, uint16_t* o, int run, int reuse) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* sm = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const Bars bars{smem_u32(sm + kOffBar)};
  if (threadIdx.x == 0) {
    for (int c = 0; c < 2; ++c)
      for (int h = 0; h < 2; ++h) {
        mbar_init(bars.ready(c, h), 128);  // 64 copy arrivals + 64 plain ones (producer threads of block c)
        mbar_init(bars.free(c, h), 128);   // warpgroup h, after its P V read the half
      }
    mbar_init(bars.qfull(), 1);
    mbar_init(bars.qfree(), 256);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    produce<kMode>(p, st, &qmap, sm, bars, run, reuse != 0);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  if (threadIdx.x < 256) consume<0, kMode>(p, sm, bars, o, run);
  else consume<1, kMode>(p, sm, bars, o, run);
}
}  // namespace

namespace {
// reuse: the producer's key reuse (kSplitVarReuse); p.split_run: the tokens a run (0: one, session 24's order).
template <int kMode>
bool launch(const SparseAttentionFp8Params& p, const PrefillStaging& s, const void* q, uint16_t* o, bool reuse,
            void* stream) {
  // q as [T x H rows, 512 dims] bf16; boxes of 64 dims x 64 rows (rows past T x H read as zero; a partial head
  // group's rows past H are the next token's, finite, and their outputs are not written).
  CUtensorMap qmap;
  const cuuint64_t dims[2] = {cuuint64_t(kD), cuuint64_t(p.T * p.heads)};
  const cuuint64_t strides[1] = {cuuint64_t(kD) * 2};
  const cuuint32_t box[2] = {64, 64};
  if (!dsinfer::cuda::encode_tiled_map_128b(qmap, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, q, dims, strides, box))
    return false;
  int dev = 0, sms = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int64_t run = p.split_run > 0 ? p.split_run : 1;
  const int64_t runs = (p.heads + kHeads - 1) / kHeads * ((p.T + run - 1) / run);
  const dim3 grid(unsigned(runs < sms ? runs : sms));
  cudaFuncSetAttribute(prefill_split_kernel<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBytes));
  prefill_split_kernel<kMode><<<grid, kThreads, kBytes, static_cast<cudaStream_t>(stream)>>>(p, s, qmap, o, int(run),
                                                                                             reuse ? 1 : 0);
  return true;
}
}  // namespace

bool launch_sparse_attention_prefill_split(const SparseAttentionFp8Params& p, const PrefillStaging& s,
                                           const void* q, uint16_t* o, int variant, void* stream) {
  const bool r = (variant & kSplitVarReuse) != 0;  // a runtime switch of the producer, not an instantiation
  switch ((variant & ~kSplitVarReuse) | (p.q_norm ? kSplitQNorm : 0)) {
    case 0: return launch<0>(p, s, q, o, r, stream);
    case kSplitVarL2Hints: return launch<kSplitVarL2Hints>(p, s, q, o, r, stream);
    case kSplitVarStore16: return launch<kSplitVarStore16>(p, s, q, o, r, stream);
    case kSplitVarEarlyItem: return launch<kSplitVarEarlyItem>(p, s, q, o, r, stream);
    case kSplitVarAll: return launch<kSplitVarAll>(p, s, q, o, r, stream);
    case kSplitQNorm: return launch<kSplitQNorm>(p, s, q, o, r, stream);
    case kSplitQNorm | kSplitVarStore16: return launch<kSplitQNorm | kSplitVarStore16>(p, s, q, o, r, stream);
    default: return false;
  }
}

bool launch_sparse_attention_prefill_split_probe(const SparseAttentionFp8Params& p, const PrefillStaging& s,
                                                 const void* q, uint16_t* o, int probe, void* stream) {
  const bool r = (probe & kSplitVarReuse) != 0;
  switch (probe & ~kSplitVarReuse) {
    case kSplitProbeNoMath: return launch<kSplitProbeNoMath>(p, s, q, o, r, stream);
    case kSplitProbeNoSoftmax: return launch<kSplitProbeNoSoftmax>(p, s, q, o, r, stream);
    case kSplitProbeNoGather: return launch<kSplitProbeNoGather>(p, s, q, o, r, stream);
    case kSplitProbeNoStore: return launch<kSplitProbeNoStore>(p, s, q, o, r, stream);
    case kSplitProbeNoQ: return launch<kSplitProbeNoQ>(p, s, q, o, r, stream);
    case kSplitProbeSkeleton: return launch<kSplitProbeSkeleton>(p, s, q, o, r, stream);
    case kSplitProbeBare: return launch<kSplitProbeBare>(p, s, q, o, r, stream);
    default: return false;
  }
}

}  // namespace dsinfer::ops::cuda::detail
