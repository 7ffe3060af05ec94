// Tensor-core sparse attention (decode fast path, FlashMLA class): one block per (token, 64-head group, key split),
// 8 warps. The block holds the token's 64 query heads x 512 as bf16 in shared memory and streams its key rows 32 at a
// time (fp32 state rows -> bf16 tile). Warp w owns heads 16 * (w % 4) .. +15 and output dims 256 * (w / 4) .. +255:
// S = Q K^T is computed per warp over its own 256 dims (mma.sync m16n8k16, fp32 accumulate), the two halves are
// added through shared memory (both warps of a head group then hold the same S, bitwise: fp add commutes), online
// softmax in fp32 (p rounded to bf16 and used so in numerator and denominator), O += P V with P taken straight from
// the S accumulator registers (the C fragment of two n8 tiles is the A fragment of one k16 step) and V = the key
// tile loaded transposed by ldmatrix. Epilogue as the fp32 kernel: one split -> sink + inverse RoPE + write; several
// -> (o, max, sum) partials for the combine kernel.
// Memory pipeline (the kernel is bound by HBM latency: one block per SM, its 128 accumulator registers per thread
// rule out a second): the fp32 rows go through a ring of three 16-key half tiles (cp.async, one commit group per
// half), so 1.5 tiles are in flight while a tile is converted and multiplied; the row pointers of the split are
// resolved 256 at a time (one per thread, 8 tiles ahead), so no per-tile index / block-table load stalls the block.
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16), with g = lane / 4 and q4 = lane % 4:
//   A 16x16 (row): a0 = (g, 2q4..+1), a1 = (g+8, 2q4..+1), a2 = (g, 2q4+8..+9), a3 = (g+8, 2q4+8..+9)
//   B 16x8 (col): b0 = (k 2q4..+1, n g), b1 = (k 2q4+8..+9, n g);  C 16x8: c0,c1 = (g, 2q4..+1), c2,c3 = (g+8, ...)
#include <cuda_bf16.h>

#include "ops/sparse_attention/sparse_attention_keys.cuh"
#include "ops/sparse_attention/sparse_attention_mma.cuh"  // qk_half, softmax_tile, pv_half, the mma wrappers

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
using namespace attn_mma;  // NOLINT: the shared mma building blocks
constexpr int kThreads = kTcWarps * 32;
constexpr int kP = kTcDim + 8;  // bf16 row pitch (1040 B): rows 4 banks apart, fragment loads conflict-free
constexpr int kHalf = kTcDim / 2;
static_assert(kP == kMmaPitch && kHalf == kMmaHalf, "the shared mma helpers assume this tile shape");
constexpr int kChunks = kTcKeys * kTcDim / 4;  // 16-byte fp32 chunks of one key tile
constexpr int kHalfKeys = kTcKeys / 2;          // keys per staged half tile
constexpr int kStages = 3;                      // half tiles in the staging ring
constexpr int kHalfFloats = kHalfKeys * kTcDim;
constexpr int kResolve = kThreads;              // row pointers resolved at a time (one per thread)
constexpr int kTilesPerResolve = kResolve / kTcKeys;

// Shared memory carve-up, byte offsets (all multiples of 16).
constexpr size_t kOffQ = 0;                                                  // bf16 [kTcHeads][kP]
constexpr size_t kOffK = kOffQ + size_t(kTcHeads) * kP * 2;                   // bf16 [kTcKeys][kP]
constexpr size_t kOffStage = kOffK + size_t(kTcKeys) * kP * 2;                // f32 [kStages][kHalfKeys][kTcDim]
constexpr size_t kOffX = kOffStage + size_t(kStages) * kHalfFloats * 4;       // f32 [kTcWarps][16][32]
constexpr size_t kOffRows = kOffX + size_t(kTcWarps) * 16 * 32 * 4;           // const float* [2][kResolve]
constexpr size_t kSmemBytes = kOffRows + 2 * kResolve * sizeof(const float*);  // 218,624 B: one block per SM
static_assert(kSmemBytes <= 232448, "over the 227 KB of shared memory a block may use");
static_assert(kResolve % kTcKeys == 0 && kChunks % kThreads == 0, "tiles must not straddle a resolve chunk");

// Slot of key k (of the split) in the double-buffered row pointer array: chunk k / kResolve in half (chunk & 1).
__device__ __forceinline__ int row_slot(int64_t k) { return int((k / kResolve) & 1) * kResolve + int(k % kResolve); }

// The row loader: the only code that knows the state row format (fp32 today). issue() starts asynchronous 16-byte
// copies of half tile hf (keys 16 hf .. +15 of the split) into ring slot hf % kStages, as one commit group (an
// empty one past the split's last half, so the wait_group count stays uniform); to_bf16() converts a tile's two
// halves into the bf16 key tile, zero for a missing row (its p is 0, but 0 * stale data could be NaN). A bf16 state
// would cp.async straight into the key tile, an FP8 one would dequantise in to_bf16().
struct Fp32RowLoader {
  static __device__ __forceinline__ void issue(const float* const* rows, int64_t hf, int64_t nhalves, float* stage) {
    if (hf < nhalves) {
      const float* const* hr = rows + row_slot(hf * kHalfKeys);
      float* dst = stage + (hf % kStages) * kHalfFloats;
      for (int c = threadIdx.x; c < kHalfFloats / 4; c += kThreads) {
        const int r = c / (kTcDim / 4), c4 = c % (kTcDim / 4);
        const float* src = hr[r];
        if (src != nullptr) {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst + 4 * c)), "l"(src + 4 * c4)
                       : "memory");
        }
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  // All groups but the newest complete: with two groups committed per tile, the current tile's two halves.
  static __device__ __forceinline__ void wait_tile() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
  static __device__ __forceinline__ void wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
  // Tile n (rows: its 32 row pointers) from half tiles 2n and 2n+1 of the ring.
  static __device__ __forceinline__ void to_bf16(const float* const* rows, int64_t n, const float* stage,
                                                 __nv_bfloat16* ks) {
    const float* h0 = stage + ((2 * n) % kStages) * kHalfFloats;
    const float* h1 = stage + ((2 * n + 1) % kStages) * kHalfFloats;
    for (int c = threadIdx.x; c < kChunks; c += kThreads) {
      const int r = c / (kTcDim / 4), c4 = c % (kTcDim / 4);
      const float* src = (r < kHalfKeys ? h0 : h1) + (r % kHalfKeys) * kTcDim + 4 * c4;
      const float4 v = rows[r] != nullptr ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<uint2*>(ks + r * kP + 4 * c4) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }
  }
};

// q rows h0 .. h0+63 of token t -> bf16 tile (zero rows for heads >= H).
__device__ __forceinline__ void load_q(const float* q, int64_t t, int64_t h0, int64_t H, __nv_bfloat16* qs) {
#pragma unroll 16  // 16 loads in flight per thread: at batch 1 this 128 KB read is latency-bound
  for (int c = threadIdx.x; c < kTcHeads * kTcDim / 4; c += kThreads) {
    const int r = c / (kTcDim / 4), c4 = c % (kTcDim / 4);
    const int64_t h = h0 + r;
    const float4 v = h < H ? __ldg(reinterpret_cast<const float4*>(q + (t * H + h) * kTcDim) + c4)
                           : make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<uint2*>(qs + r * kP + 4 * c4) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    sparse_attention_tc_kernel(StepDevice st, LayerStateView v, SparseAttentionCudaParams prm, const float* q,
                               const float* kv_new, float* o, float* ws) {
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem + kOffQ);
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + kOffK);
  float* stage = reinterpret_cast<float*>(smem + kOffStage);
  float* sx = reinterpret_cast<float*>(smem + kOffX);
  const float** rows = reinterpret_cast<const float**>(smem + kOffRows);  // [2][kResolve], see row_slot
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hr = 16 * (warp & 3), d0 = kHalf * (warp >> 2);
  const int64_t t = blockIdx.x, h0 = int64_t(blockIdx.y) * kTcHeads, split = blockIdx.z;
  const TokenKeys tk = token_keys(st, prm, t);
  const int64_t nkeys = tk.nwin + tk.ncomp, S = prm.num_splits;
  // Fixed split size: splits past this token's keys write nothing (the combine reads only the token's own).
  if (prm.split_keys > 0 && split >= attn_token_splits(nkeys, S, prm.split_keys)) return;
  int64_t kbeg, kend;  // whole tiles per split
  attn_split_range(nkeys, split, S, prm.split_keys, kTcKeys, kbeg, kend);
  const int64_t nk = kend > kbeg ? kend - kbeg : 0, ntiles = (nk + kTcKeys - 1) / kTcKeys, nhalves = 2 * ntiles;
  auto resolve = [&](int64_t c) {  // row pointers of keys kResolve * c .. of the split (nullptr: no key)
    const int64_t k = c * kResolve + threadIdx.x;
    rows[row_slot(k)] = k < nk ? key_row(tk, v, prm, kv_new, t, kbeg + k) : nullptr;
  };

  resolve(0);
  __syncthreads();
  for (int hf = 0; hf < kStages; ++hf) Fp32RowLoader::issue(rows, hf, nhalves, stage);  // fly while q converts
  load_q(q, t, h0, prm.heads, qs);

  float acc[32][4];
#pragma unroll
  for (int nt = 0; nt < 32; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int64_t n = 0; n < ntiles; ++n) {
    Fp32RowLoader::wait_tile();
    __syncthreads();  // this tile's halves are staged (and q written); every warp is past the previous tile
    const float* const* cur = rows + row_slot(n * kTcKeys);
    Fp32RowLoader::to_bf16(cur, n, stage, ks);
    const uint32_t valid = __ballot_sync(dev::kFull, cur[lane] != nullptr);
    __syncthreads();  // key tile ready; the tile's two ring slots are free
    Fp32RowLoader::issue(rows, 2 * n + kStages, nhalves, stage);  // into the slots just freed
    Fp32RowLoader::issue(rows, 2 * n + kStages + 1, nhalves, stage);
    // The next resolve chunk, into the buffer of the previous one (its last tile was converted before the sync
    // above, its last half issued two tiles ago); first needed by the issue 6 tiles from now.
    if (n % kTilesPerResolve == 0 && (n / kTilesPerResolve + 1) * kResolve < nk) resolve(n / kTilesPerResolve + 1);

    float s[4][4];
    qk_half(qs, ks, hr, d0, s);
    float* mine = sx + warp * 16 * 32;
#pragma unroll
    for (int i = 0; i < 16; ++i) mine[i * 32 + lane] = s[i >> 2][i & 3];
    __syncthreads();
    const float* other = sx + (warp ^ 4) * 16 * 32;  // the same heads, the other 256 dims
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i >> 2][i & 3] += other[i * 32 + lane];
    float alpha[2];
    softmax_tile(s, valid, prm.scale, m, l, alpha);
    rescale_rows(acc, alpha);
    pv_half(s, ks, d0, acc);
  }
  Fp32RowLoader::wait_all();  // only empty groups are left; nothing may outlive the block
  const int64_t hd = prm.head_dim;
  // (hd + 2) * 4 B partial rows are a multiple of 8
  write_rows(acc, m, l, h0 + hr, d0, t, split, prm.heads, prm.num_splits, hd, hd + 2,
             prm.num_splits == 1 && prm.split_keys == 0, prm.sinks, o, ws,
             [&](float& e0, float& e1, int d) { out_rope_pair(e0, e1, d, prm, tk.p); });
}
}  // namespace

void launch_sparse_attention_tc(const StepDevice& step, const LayerStateView& view,
                                const SparseAttentionCudaParams& p, const float* q, const float* kv_new, float* o,
                                float* workspace, void* stream) {
  cudaFuncSetAttribute(sparse_attention_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
  const dim3 grid(unsigned(step.T), unsigned((p.heads + kTcHeads - 1) / kTcHeads), unsigned(p.num_splits));
  sparse_attention_tc_kernel<<<grid, kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(step, view, p, q,
                                                                                               kv_new, o, workspace);
}

}  // namespace dsinfer::ops::cuda::detail
