// Streaming tensor-core GEMM for few rows (decode, 1 <= M <= kGemmStreamMaxM) with FP8 block-scaled weights.
// Bandwidth bound: every weight byte is read once per call (per token chunk of up to 64 rows) straight into
// registers, D (StreamParams::depth) 64-wide K chunks ahead per lane (2 x 16-byte loads per chunk), converted
// e4m3 -> bf16 in registers (exact) and fed to mma.sync m16n8k16 as the A operand (16 weight rows) against x tokens
// as the B operand (n8). x is converted to bf16 once per block in the prologue into shared memory (k-permuted,
// gemm_common.h), with 8 loads in flight per thread. Each block_k-wide scale block is accumulated separately and
// added as acc += scale * partial (fp32), per weight row.
// Persistent over N (StreamParams::row_grid): a block walks the row blocks y, y + gridDim.y, ... reusing its x tile;
// when the chunks of one row block are a multiple of D, the prefetch runs on into the next row block's first chunks
// while this one finishes (no pipeline drain between row blocks).
// Segments (gemm_stream_segments_kernel, gemm_segments_launch.h): several weights of one format, K and block size over
// the same x in one launch; the persistent walk runs over the segments' 64-row blocks in turn (the carried prefetch
// crosses from one weight into the next), and every row block is computed by the code and launch shape of its own
// weight's launch, so each output has its own call's bits.
// Split-K: the K splits of one output tile form a thread-block cluster; each block leaves its partial tile in
// shared memory and, after a cluster barrier, sums a share of the tile over the cluster's blocks in rank order
// through distributed shared memory (fixed order: deterministic, no atomics, no workspace).
// Requires (gemm_plan.cpp plan_gemm_stream): FP8_BLOCK, K % 64 == 0, block_k % 64 == 0, 16-byte aligned weights,
// no row gather / per-expert pointers. e4m3 NaN codes (0x7F / 0xFF) decode as +-480, not NaN.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "cuda/func_smem.h"
#include "cuda/pdl.cuh"
#include "ops/gemm/gemm_dequant.cuh"
#include "ops/gemm/gemm_segments_launch.h"

namespace dsinfer::ops::cuda::detail {
namespace {

namespace cg = cooperative_groups;
using gd::kStChunk;
using gd::kStPartLd;
using gd::kStRows;
using gd::kStThreads;

// gd::st_e4m3_*_bf16 give the e4m3 values times 2^-120 as bf16 pairs; this restores them exactly (power-of-two
// product, in range).
__device__ __forceinline__ uint32_t bf16_scale2p120(uint32_t v) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(v), "r"(0x7B807B80u), "r"(0x80008000u));  // v * 2^120 + -0
  return d;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  union {
    __nv_bfloat162 v;
    uint32_t u;
  } c;
  c.v = __floats2bfloat162_rn(lo, hi);  // .x (low 16 bits) = lo
  return c.u;
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x rows [tok0, tok0 + TP) x k [k_begin, k_end) -> bf16 shared tile (rows past M are zero). Each thread issues
// kXUnroll loads before converting any, so a block has kXUnroll * kStThreads x loads in flight.
constexpr int kXUnroll = 8;
template <int TP>
__device__ __forceinline__ void load_x_tile(const GemmArgs& a, const StreamParams& p, int64_t g, int64_t tok0,
                                            int64_t k_begin, int64_t k_end, uint16_t* xs) {
  const int quads = int((k_end - k_begin) / 4), total = TP * quads;
  for (int base = threadIdx.x; base < total; base += kXUnroll * kStThreads) {
    float4 v[kXUnroll];
#pragma unroll
    for (int u = 0; u < kXUnroll; ++u) {
      const int i = base + u * kStThreads;
      v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const int r = i / quads, q = i - r * quads;
      const int64_t tok = tok0 + r;
      if (i < total && tok < a.M) {
        const float* xr = x_row(a, g, tok) + k_begin + 4 * q;
        if (a.x_vec) {
          v[u] = __ldg(reinterpret_cast<const float4*>(xr));
        } else {
          v[u].x = __ldg(xr);
          v[u].y = __ldg(xr + 1);
          v[u].z = __ldg(xr + 2);
          v[u].w = __ldg(xr + 3);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kXUnroll; ++u) {
      const int i = base + u * kStThreads;
      if (i >= total) break;
      const int r = i / quads, q = i - r * quads;
      // quad stored as (k0, k2, k1, k3): word 0 = (k0, k2), word 1 = (k1, k3) (gd::st_x_slot)
      *reinterpret_cast<uint2*>(xs + size_t(r) * p.xs_ld + 4 * q) =
          make_uint2(pack_bf16x2(v[u].x, v[u].z), pack_bf16x2(v[u].y, v[u].w));
    }
  }
}

// One 64-wide K chunk of one warp: 16 weight rows (lo = g, hi = g + 8 of lane g) x NT n8 token tiles into tmp.
template <int NT>
__device__ __forceinline__ void chunk_mma(const uint4& wl, const uint4& wh, const uint16_t* xs_lane, int xs_ld,
                                          float (&tmp)[NT][4]) {
  const uint32_t lo[4] = {wl.x, wl.y, wl.z, wl.w}, hi[4] = {wh.x, wh.y, wh.z, wh.w};
  uint32_t A[4][4];
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    A[s][0] = bf16_scale2p120(gd::st_e4m3_even_bf16(lo[s]));  // row g,     k 2t, 2t+1
    A[s][1] = bf16_scale2p120(gd::st_e4m3_even_bf16(hi[s]));  // row g + 8, k 2t, 2t+1
    A[s][2] = bf16_scale2p120(gd::st_e4m3_odd_bf16(lo[s]));   // row g,     k 2t+8, 2t+9
    A[s][3] = bf16_scale2p120(gd::st_e4m3_odd_bf16(hi[s]));   // row g + 8, k 2t+8, 2t+9
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const uint4* xp = reinterpret_cast<const uint4*>(xs_lane + size_t(8 * n) * xs_ld);
    const uint4 x0 = xp[0], x1 = xp[1];
    mma_bf16_16816(tmp[n], A[0], x0.x, x0.y);
    mma_bf16_16816(tmp[n], A[1], x0.z, x0.w);
    mma_bf16_16816(tmp[n], A[2], x1.x, x1.y);
    mma_bf16_16816(tmp[n], A[3], x1.z, x1.w);
  }
}

// The weight, outputs and row block (within that weight) of one of the walk's 64-row blocks: a's own (group g)
// without segments; with them, the segment whose blocks hold it (its y has no group stride: groups are 1).
struct StreamOut {
  WPtr w;
  int64_t N;
  float* y;  // output row 0
  int64_t ldy;
  int64_t rb;
  float out_scale;
  bool scaled;
};
template <bool SEG>
__device__ __forceinline__ StreamOut stream_out(const GemmArgs& a, const GemmSegments* s, int64_t g, int64_t rb) {
  if constexpr (!SEG) {
    return {group_weight(a, g), a.N, a.y + g * a.y_gstride, a.ldy, rb, 1.0f, false};
  } else {
    int i = 0;
    while (i + 1 < s->count && rb >= s->seg[i + 1].block0) ++i;
    const GemmSegmentArgs& sg = s->seg[i];
    return {{sg.wdata, sg.wscale, 0}, sg.N, sg.y, sg.ldy, rb - sg.block0, sg.out_scale, sg.scaled};
  }
}

// The weight rows one lane streams for one 64-row block: rows g and g + 8 of its warp's 16 (clamped to row 0 of the
// group past N: loaded, never stored), the pointers at k_begin and the scale index of k_begin's scale block.
struct LaneRows {
  const uint8_t* lo;
  const uint8_t* hi;
  int64_t s_lo, s_hi;
  bool ok_lo, ok_hi;
};
__device__ __forceinline__ LaneRows lane_rows(const GemmArgs& a, const StreamOut& o, int warp, int gq, int tq,
                                              int64_t k_begin) {
  LaneRows r;
  const WPtr& w = o.w;
  const int64_t r_lo = o.rb * kStRows + warp * 16 + gq, r_hi = r_lo + 8;  // rows within the group
  r.ok_lo = r_lo < o.N;
  r.ok_hi = r_hi < o.N;
  r.lo = w.data + (w.row0 + (r.ok_lo ? r_lo : 0)) * a.K + k_begin + 16 * tq;
  r.hi = w.data + (w.row0 + (r.ok_hi ? r_hi : 0)) * a.K + k_begin + 16 * tq;
  r.s_lo = ((w.row0 + (r.ok_lo ? r_lo : 0)) / a.block_n) * a.scale_cols + k_begin / a.block_k;
  r.s_hi = ((w.row0 + (r.ok_hi ? r_hi : 0)) / a.block_n) * a.scale_cols + k_begin / a.block_k;
  return r;
}

// Chunk c of the lane's rows (weights and their raw scales from `scale`, the weight's); rows past N give zeros.
__device__ __forceinline__ void load_chunk(const GemmArgs& a, const uint8_t* scale, const LaneRows& r, int c, int cpb,
                                           uint4& bl, uint4& bh, uint32_t& sl, uint32_t& sh) {
  bl = bh = make_uint4(0, 0, 0, 0);
  sl = sh = 0;
  if (r.ok_lo) {
    bl = __ldg(reinterpret_cast<const uint4*>(r.lo + int64_t(c) * kStChunk));
    sl = load_scale_raw(a, scale, r.s_lo + c / cpb);
  }
  if (r.ok_hi) {
    bh = __ldg(reinterpret_cast<const uint4*>(r.hi + int64_t(c) * kStChunk));
    sh = load_scale_raw(a, scale, r.s_hi + c / cpb);
  }
}

// grid: x = K split (cluster rank), y = first 64-row block (then every gridDim.y-th), z = group * token_chunks +
// token chunk. SEG: the row blocks are s's (groups 1), else a's weight's.
template <int NT, int D, bool SEG>
__device__ __forceinline__ void stream_body(const GemmArgs& a, const StreamParams& p, const GemmSegments* s) {
  // PDL (cuda/pdl.h): as the GEMV kernel, a weight given by pointer has its first chunks' loads issued before the
  // wait (no kernel writes a weight); x, y and pointer arrays are touched after it.
  const bool early = a.wdata_arr == nullptr;
  if (!early) dsinfer::cuda::pdl_wait_then_release();
  constexpr int TP = 8 * NT;
  extern __shared__ uint4 smem4[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(smem4);             // [TP][xs_ld] bf16
  float* part = reinterpret_cast<float*>(xs + size_t(TP) * p.xs_ld);  // [TP][kStPartLd] fp32 partial tile
  const int split = int(blockIdx.x);
  const int64_t g = blockIdx.z / p.token_chunks, tok0 = int64_t(blockIdx.z % p.token_chunks) * TP;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
  const int64_t k_begin = int64_t(split) * p.kb_per_split * a.block_k;
  const int64_t k_end = min(a.K, k_begin + int64_t(p.kb_per_split) * a.block_k);
  const int nchunks = k_end > k_begin ? int((k_end - k_begin) / kStChunk) : 0;
  const int cpb = int(a.block_k / kStChunk);  // chunks per scale block (k_begin is a scale-block boundary)
  const int64_t row_blocks = SEG ? int64_t(s->blocks) : (a.N + kStRows - 1) / kStRows, rb_step = gridDim.y;
  // The prefetch runs on into the next row block when every slot maps to the same chunk there.
  const bool carry = nchunks % D == 0;

  int64_t rb = blockIdx.y;
  StreamOut out = stream_out<SEG>(a, s, g, rb);
  LaneRows cur = lane_rows(a, out, warp, gq, tq, k_begin);

  uint4 bl[D], bh[D];
  uint32_t sl[D], sh[D];
#pragma unroll
  for (int j = 0; j < D; ++j) {  // weight loads first: they are in flight while x is converted
    bl[j] = bh[j] = make_uint4(0, 0, 0, 0);
    sl[j] = sh[j] = 0;
    if (j < nchunks) load_chunk(a, out.w.scale, cur, j, cpb, bl[j], bh[j], sl[j], sh[j]);
  }
  if (early) dsinfer::cuda::pdl_wait_then_release();
  load_x_tile<TP>(a, p, g, tok0, k_begin, k_end, xs);
  __syncthreads();

  cg::cluster_group cl = cg::this_cluster();
  const uint16_t* xs_lane = xs + size_t(gq) * p.xs_ld + 16 * tq;
  for (; rb < row_blocks; rb += rb_step) {
    const int64_t n0 = (SEG ? out.rb : rb) * kStRows;
    const bool has_next = rb + rb_step < row_blocks;
    const StreamOut out_next = has_next ? stream_out<SEG>(a, s, g, rb + rb_step) : out;
    const LaneRows nxt = has_next ? lane_rows(a, out_next, warp, gq, tq, k_begin) : cur;
    float acc[NT][4], tmp[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[n][q] = tmp[n][q] = 0.0f;
    for (int c0 = 0; c0 < nchunks; c0 += D) {
#pragma unroll
      for (int j = 0; j < D; ++j) {
        const int c = c0 + j;
        if (c < nchunks) {
          const uint4 wl = bl[j], wh = bh[j];
          const uint32_t rl = sl[j], rh = sh[j];
          const int cn = c + D;  // refill this slot before computing on the copy
          if (cn < nchunks) load_chunk(a, out.w.scale, cur, cn, cpb, bl[j], bh[j], sl[j], sh[j]);
          else if (carry && has_next)
            load_chunk(a, out_next.w.scale, nxt, cn - nchunks, cpb, bl[j], bh[j], sl[j], sh[j]);
          chunk_mma<NT>(wl, wh, xs_lane + c * kStChunk, p.xs_ld, tmp);
          if (c % cpb == cpb - 1 || c == nchunks - 1) {  // end of a scale block: acc += scale * partial
            const float fl = scale_value(a, rl), fh = scale_value(a, rh);
#pragma unroll
            for (int n = 0; n < NT; ++n) {
              acc[n][0] = fmaf(fl, tmp[n][0], acc[n][0]);
              acc[n][1] = fmaf(fl, tmp[n][1], acc[n][1]);
              acc[n][2] = fmaf(fh, tmp[n][2], acc[n][2]);
              acc[n][3] = fmaf(fh, tmp[n][3], acc[n][3]);
              tmp[n][0] = tmp[n][1] = tmp[n][2] = tmp[n][3] = 0.0f;
            }
          }
        }
      }
    }
    if (has_next && !carry) {  // refill the slots with the next row block's first chunks
#pragma unroll
      for (int j = 0; j < D; ++j)
        if (j < nchunks) load_chunk(a, out_next.w.scale, nxt, j, cpb, bl[j], bh[j], sl[j], sh[j]);
    }

    // C fragment (row = weight row, col = token) -> part[token][row]
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int tk = 8 * n + 2 * tq, rl = warp * 16 + gq;
      part[tk * kStPartLd + rl] = acc[n][0];
      part[(tk + 1) * kStPartLd + rl] = acc[n][1];
      part[tk * kStPartLd + rl + 8] = acc[n][2];
      part[(tk + 1) * kStPartLd + rl + 8] = acc[n][3];
    }
    if (p.splits > 1) cl.sync();
    else __syncthreads();
    // this block writes the tile elements e = (split + splits * i) * threads + tid, summed over ranks 0..splits-1
    for (int e = split * kStThreads + int(threadIdx.x); e < TP * kStRows; e += p.splits * kStThreads) {
      const int tk = e / kStRows, rl = e % kStRows;
      const int64_t tok = tok0 + tk, nl = n0 + rl;
      if (tok >= a.M || nl >= (SEG ? out.N : a.N)) continue;
      float v = 0.0f;
      for (int r = 0; r < p.splits; ++r) {
        const float* src = p.splits > 1 ? cl.map_shared_rank(part, unsigned(r)) : part;
        v += src[tk * kStPartLd + rl];
      }
      float* yp = (SEG ? out.y + tok * out.ldy : y_row(a, g, tok)) + nl;
      if (SEG && out.scaled) v *= out.out_scale;
      *yp = a.accumulate ? *yp + v : v;
    }
    // every read of the partial tiles (the peers' too) ends before the next row block overwrites them, and the
    // peers' shared memory outlives the reads
    if (p.splits > 1) cl.sync();
    else __syncthreads();
    cur = nxt;
    out = out_next;
  }
}

template <int NT, int D>
__global__ void __launch_bounds__(kStThreads, 2) gemm_stream_kernel(const GemmArgs a, const StreamParams p) {
  stream_body<NT, D, false>(a, p, nullptr);
}

template <int NT, int D>
__global__ void __launch_bounds__(kStThreads, 2)
    gemm_stream_segments_kernel(const GemmArgs a, const StreamParams p, const GemmSegments s) {
  stream_body<NT, D, true>(a, p, &s);
}

// SEG: gemm_stream_segments_kernel over *sg (groups 1), else gemm_stream_kernel.
template <int NT, int D, bool SEG>
cudaError_t launch(const GemmArgs& a, const StreamParams& p, const GemmSegments* sg, cudaStream_t s) {
  const void* fn = SEG ? reinterpret_cast<const void*>(gemm_stream_segments_kernel<NT, D>)
                       : reinterpret_cast<const void*>(gemm_stream_kernel<NT, D>);
  const size_t smem = size_t(8 * NT) * size_t(p.xs_ld) * 2 + size_t(8 * NT) * kStPartLd * sizeof(float);
  if (smem > 48 * 1024) {  // smem follows K: raised, never set per call (ranks sharing a GPU; cuda/func_smem.h)
    const cudaError_t e = dsinfer::cuda::raise_max_dynamic_smem(fn, smem);
    if (e != cudaSuccess) return e;
  }
  const int64_t row_blocks = SEG ? int64_t(sg->blocks) : (a.N + kStRows - 1) / kStRows;
  const int64_t groups = SEG ? 1 : a.groups;
  const int64_t row_grid = p.row_grid > 0 && p.row_grid < row_blocks ? p.row_grid : row_blocks;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(p.splits), unsigned(row_grid), unsigned(p.token_chunks * groups));
  cfg.blockDim = dim3(kStThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  int na = 0;
  if (p.splits > 1) {
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = unsigned(p.splits);
    attr[na].val.clusterDim.y = 1;
    attr[na].val.clusterDim.z = 1;
    ++na;
  }
  if (dsinfer::cuda::pdl_enabled()) {  // cuda/pdl.h: the kernel's first statement is pdl_wait_then_release
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na].val.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  cfg.attrs = attr;
  cfg.numAttrs = unsigned(na);
  if constexpr (SEG) return cudaLaunchKernelEx(&cfg, gemm_stream_segments_kernel<NT, D>, a, p, *sg);
  else return cudaLaunchKernelEx(&cfg, gemm_stream_kernel<NT, D>, a, p);
}

template <int NT, bool SEG>
cudaError_t launch_depth(const GemmArgs& a, const StreamParams& p, const GemmSegments* sg, cudaStream_t s) {
  if (p.depth == 8) return launch<NT, 8, SEG>(a, p, sg, s);
  if (p.depth == 4) return launch<NT, 4, SEG>(a, p, sg, s);
  return cudaErrorInvalidValue;
}

template <bool SEG>
int launch_tokens(const GemmArgs& a, const StreamParams& p, const GemmSegments* sg, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p.tokens) {
    case 8: return int(launch_depth<1, SEG>(a, p, sg, s));
    case 16: return int(launch_depth<2, SEG>(a, p, sg, s));
    case 32: return int(launch_depth<4, SEG>(a, p, sg, s));
    case 64: return int(launch_depth<8, SEG>(a, p, sg, s));
  }
  return int(cudaErrorInvalidValue);
}

}  // namespace

int launch_gemm_stream(const GemmArgs& a, const StreamParams& p, void* stream) {
  return launch_tokens<false>(a, p, nullptr, stream);
}

int launch_gemm_stream_segments(const GemmArgs& a, const StreamParams& p, const GemmSegments& s, void* stream) {
  return launch_tokens<true>(a, p, &s, stream);
}

}  // namespace dsinfer::ops::cuda::detail
