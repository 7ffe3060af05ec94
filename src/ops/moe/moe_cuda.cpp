// MoE on the GPU (see moe_cuda.h): argument checks, the workspace, and the launch sequence of the expert layer:
//   1. permutation of the T * topk assignments into per-expert row groups (moe.cu);
//   2. grouped GEMMs over the permuted rows (x rows gathered through perm_token): h1 = x W1^T, h3 = x W3^T;
//   3. clamped SwiGLU in place (h1 <- silu(min(h1, L)) * clamp(h3, -L, L));
//   4. grouped GEMM y_p = h1 W2^T;
//   5. shared expert with gemm_cuda on all T rows;
//   6. combine: out[t] = sum_k weight[t,k] * y_p[pos_of[t,k]] in k order, + shared[t]. No float atomics anywhere.
// Which of these run: moe_plan.h. MoePath::Fast replaces 2-4 by moe_fast.cu: x's token rows to bf16 (in the
// one-launch moe_prep_kernel's spare blocks for T*topk <= kMoePrepMaxN), gate/up + SwiGLU kernel, down kernel, over
// the list of touched experts written by the count kernel (or by moe_prep_kernel), and runs 5 on the workspace's
// side stream concurrently with 1-4 (fork before 1, join before 6) unless the decode kernels take it
// (moe_shared_fused).
// Large T (MoePath::Fast above kMoeGroupedMinT, or GroupedRs) replaces 2-4 by moe_grouped_rs.cu (bf16 wgmma): x to
// bf16 in permuted order, the tile list, gate/up + SwiGLU GEMM, down GEMM; MoePath::GroupedFp8 likewise by
// moe_grouped_fp8.cu (x to two e4m3 terms), MoePath::Grouped by moe_grouped.cu (bf16 mma.sync).
#include "ops/moe/moe_cuda.h"

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_common.h"
#include "ops/gemm/gemm_common.h"
#include "ops/gemm/gemm_official_cuda.h"
#include "ops/moe/moe_fast_shared.h"
#include "ops/moe/moe_fp8_common.h"
#include "ops/moe/moe_grouped_common.h"
#include "ops/moe/moe_grouped_cutlass_launch.h"
#include "ops/moe/moe_grouped_launch.h"

namespace dsinfer::ops::cuda {

Status MoeWorkspace::reserve(int64_t T, int64_t topk, int64_t dim, int64_t inter, int64_t experts) {
  if (T < 0 || topk <= 0 || dim <= 0 || inter <= 0 || experts <= 0)
    return Status::errorf("MoeWorkspace::reserve: bad sizes T={} topk={} dim={} inter={} experts={}", T, topk, dim,
                          inter, experts);
  if (T <= T_ && topk <= topk_ && dim <= dim_ && inter <= inter_ && experts <= experts_) return side_.create();
  T = std::max(T, T_);
  topk = std::max(topk, topk_);
  dim = std::max(dim, dim_);
  inter = std::max(inter, inter_);
  experts = std::max(experts, experts_);
  const size_t tk = size_t(std::max<int64_t>(T * topk, 1)), t1 = size_t(std::max<int64_t>(T, 1));
  DSI_RETURN_IF_ERROR(offsets_.alloc(size_t(experts + 1), "moe offsets"));
  DSI_RETURN_IF_ERROR(perm_token_.alloc(tk, "moe perm_token"));
  DSI_RETURN_IF_ERROR(pos_of_.alloc(tk, "moe pos_of"));
  DSI_RETURN_IF_ERROR(h1_.alloc(tk * size_t(inter), "moe h1"));
  // h3 doubles as the fast path's bf16 x rows [T, dim], the grouped paths' x rows [tk, dim] and the FP8 path's two
  // e4m3 terms of x [tk, dim] + scales
  const int64_t x_floats = (dim + 1) / 2 + (dim + 127) / 128;
  const size_t h3_floats = std::max(tk * size_t(std::max<int64_t>(inter, x_floats)), (tk + t1) * size_t((dim + 1) / 2));
  DSI_RETURN_IF_ERROR(h3_.alloc(h3_floats, "moe h3"));
  // the touched experts, then the experts with more than 8 rows (MoePlan::paired): [1 + experts] each
  DSI_RETURN_IF_ERROR(active_.alloc(2 * size_t(experts + 1), "moe active experts"));
  DSI_RETURN_IF_ERROR(tiles_.alloc(size_t(1 + 2 * moe_detail::grp_max_tiles(int64_t(tk), experts)), "moe tile list"));
  DSI_RETURN_IF_ERROR(yp_.alloc(tk * size_t(dim), "moe expert outputs"));
  DSI_RETURN_IF_ERROR(wrow_.alloc(tk, "moe row weights"));
  DSI_RETURN_IF_ERROR(sh1_.alloc(t1 * size_t(inter), "moe shared h1"));
  DSI_RETURN_IF_ERROR(sh3_.alloc(t1 * size_t(inter), "moe shared h3"));
  DSI_RETURN_IF_ERROR(sh16_.alloc(t1 * size_t(inter), "moe shared bf16 h"));
  DSI_RETURN_IF_ERROR(shy_.alloc(t1 * size_t(dim), "moe shared out"));
  // rounded to 256 bytes: the argument arrays and CUTLASS's tensor maps after the scales need 128-byte alignment (a
  // 96-byte scale region gave cudaErrorMisalignedAddress on the H200)
  cutlass_scale_bytes_ = (size_t(3 * experts * ((inter + 127) / 128) * ((dim + 127) / 128)) * sizeof(float) + 255) &
                         ~size_t(255);
  DSI_RETURN_IF_ERROR(cutlass_.alloc(cutlass_scale_bytes_ + detail::moe_cutlass_workspace_bytes(2 * experts),
                                     "moe CUTLASS arguments"));
  T_ = T;
  topk_ = topk;
  dim_ = dim;
  inter_ = inter;
  experts_ = experts;
  return side_.create();
}

Status MoeSideStream::create() {
  if (stream_) return Status::ok();
  DSI_CUDA_TRY(cudaGetDevice(&device_));
  // The greatest priority: the shared expert's blocks are scheduled ahead of the routed kernels' as SM slots free up,
  // so its latency-bound GEMMs run under the routed experts' weight stream instead of after it (bench/NOTES.md
  // "Session 15 — MoE decode"). Kernel nodes captured from this stream keep the priority.
  int least = 0, greatest = 0;
  DSI_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  DSI_CUDA_TRY(cudaStreamCreateWithPriority(reinterpret_cast<cudaStream_t*>(&stream_), cudaStreamNonBlocking, greatest));
  DSI_CUDA_TRY(cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(&fork_), cudaEventDisableTiming));
  DSI_CUDA_TRY(cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(&join_), cudaEventDisableTiming));
  return Status::ok();
}

bool MoeSideStream::usable() const {
  int dev = -1;
  return stream_ && fork_ && join_ && cudaGetDevice(&dev) == cudaSuccess && dev == device_;
}

Status MoeSideStream::fork(void* main_stream) {
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(fork_), static_cast<cudaStream_t>(main_stream)));
  DSI_CUDA_TRY(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), static_cast<cudaEvent_t>(fork_), 0));
  return Status::ok();
}

Status MoeSideStream::join(void* main_stream) {
  DSI_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(join_), static_cast<cudaStream_t>(stream_)));
  DSI_CUDA_TRY(cudaStreamWaitEvent(static_cast<cudaStream_t>(main_stream), static_cast<cudaEvent_t>(join_), 0));
  return Status::ok();
}

void MoeSideStream::release() {
  if (fork_) cudaEventDestroy(static_cast<cudaEvent_t>(fork_));
  if (join_) cudaEventDestroy(static_cast<cudaEvent_t>(join_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  stream_ = fork_ = join_ = nullptr;
  device_ = -1;
}

void MoeSideStream::swap(MoeSideStream& o) noexcept {
  std::swap(stream_, o.stream_);
  std::swap(fork_, o.fork_);
  std::swap(join_, o.join_);
  std::swap(device_, o.device_);
}

Status route_cuda(const float* logits, int64_t T, const float* bias, const int32_t* hash_table, const int32_t* tokens,
                  const RouterCudaParams& p, int32_t* idx, float* weight, void* stream) {
  if (p.experts <= 0 || p.experts > 1024)
    return Status::errorf("route_cuda: experts must be in [1, 1024], got {}", p.experts);
  if (p.topk <= 0 || p.topk > p.experts)
    return Status::errorf("route_cuda: topk {} must be in [1, experts = {}]", p.topk, p.experts);
  if (T < 0) return Status::errorf("route_cuda: negative token count {}", T);
  if (T == 0) return Status::ok();
  if (!logits || !idx || !weight) return Status::error("route_cuda: null logits / idx / weight");
  if (hash_table && (!tokens || p.hash_vocab <= 0))
    return Status::error("route_cuda: a hash table needs token ids and hash_vocab > 0");
  if (p.score != ScoreFunc::SqrtSoftplus && p.score != ScoreFunc::Softmax && p.score != ScoreFunc::Sigmoid)
    return Status::error("route_cuda: unknown score function");
  if (T > 0x7fffffff)
    return Status::error("route_cuda: too many tokens");
  detail::launch_route(logits, T, bias, hash_table, tokens, p, idx, weight, stream);
  DSI_CUDA_LAUNCHED("route_kernel");
  return Status::ok();
}

namespace {

Status check_experts(const DeviceExpertWeights& w, int64_t rows, int64_t cols, const char* what) {
  if (w.rows != rows || w.cols != cols)
    return Status::errorf("moe {}: expected [{}, {}], got [{}, {}]", what, rows, cols, w.rows, w.cols);
  if (!w.data) return Status::errorf("moe {}: null device pointer array", what);
  DeviceWeight probe;  // shape/format rules are those of a single weight (the pointers are checked per array)
  probe.fmt = w.fmt;
  probe.rows = rows;
  probe.cols = cols;
  probe.data = w.data;
  probe.scale = w.scale;
  probe.scale_e8m0 = w.scale_e8m0;
  probe.block_n = w.block_n;
  probe.block_k = w.block_k;
  return validate_weight(probe, what);
}

Status check_shared(const MoeSharedDevice& sh, int64_t D) {
  const int64_t Is = sh.w1.rows;
  DSI_RETURN_IF_ERROR(validate_weight(sh.w1, "moe shared w1"));
  DSI_RETURN_IF_ERROR(validate_weight(sh.w3, "moe shared w3"));
  DSI_RETURN_IF_ERROR(validate_weight(sh.w2, "moe shared w2"));
  if (sh.w1.cols != D || sh.w3.rows != Is || sh.w3.cols != D || sh.w2.rows != D || sh.w2.cols != Is)
    return Status::errorf("moe_cuda: shared expert shapes w1 [{}, {}] w3 [{}, {}] w2 [{}, {}] do not fit dim {}",
                          sh.w1.rows, sh.w1.cols, sh.w3.rows, sh.w3.cols, sh.w2.rows, sh.w2.cols, D);
  return Status::ok();
}

// Grouped GEMM over the permuted rows of all experts, on the kernel plan_moe_expert_gemm chooses.
// skinny_ok = false (MoePath::Invariant): always the tiled kernel, whose per-row sums do not depend on T.
// Arguments of a grouped GEMM over the permuted rows of all experts (x rows gathered through x_rows when not null).
detail::GemmArgs expert_args(const float* x, int64_t ldx, const int32_t* x_rows, const int32_t* offsets,
                             int64_t experts, const DeviceExpertWeights& w, float* y, int64_t ldy) {
  detail::GemmArgs a{.x = x, .ldx = ldx, .x_rows = x_rows, .y = y, .ldy = ldy, .row_off = offsets, .groups = experts,
                     .N = w.rows, .K = w.cols};
  // The experts' common format and shape (no data: the per-expert pointers are aligned by contract).
  const DeviceWeight probe{.fmt = w.fmt, .rows = w.rows, .cols = w.cols, .scale_e8m0 = w.scale_e8m0,
                           .block_n = w.block_n, .block_k = w.block_k};
  detail::set_weight_args(a, probe);
  a.wdata = nullptr;
  a.wscale = nullptr;
  a.wdata_arr = w.data;
  a.wscale_arr = w.scale;
  detail::set_x_vec(a);
  return a;
}

Status expert_gemm(const float* x, int64_t ldx, const int32_t* x_rows, const int32_t* offsets, int64_t total_rows,
                   int64_t experts, const DeviceExpertWeights& w, float* y, int64_t ldy, void* stream,
                   bool skinny_ok) {
  detail::GemmArgs a = expert_args(x, ldx, x_rows, offsets, experts, w, y, ldy);
  const MoeExpertGemmPlan p = plan_moe_expert_gemm(skinny_ok, total_rows, experts, a.w_vec);
  if (p.kernel == GemmKernel::kSkinny) {
    detail::launch_gemm_skinny(w.fmt, a, stream);
    DSI_CUDA_LAUNCHED("gemm_skinny_kernel");
    return Status::ok();
  }
  a.m_tiles_z = p.m_tiles_z;
  detail::launch_gemm_tiled(w.fmt, a, stream);
  DSI_CUDA_LAUNCHED("gemm_tiled_kernel");
  return Status::ok();
}

// Fast path of the routed experts (after the permutation): yp rows of all valid assignments; with `sh` (the plan's
// moe_shared_fused) the shared expert too, on the same launches (x's token rows of xb, its h rows after the n
// permuted rows of hb, its output in shy [T, D]).
// x_written (MoePlan::x_bf16_in_prep): the permutation's launch wrote xb. big (MoePlan::paired): its list of the
// experts with more than 8 rows, for the paired kernel.
void moe_fast_experts(const float* x, int64_t T, int64_t n, const MoeExpertsDevice& ex, float limit,
                      const int32_t* offsets, const int32_t* perm, const int32_t* active, const int32_t* big,
                      uint16_t* xb, uint16_t* hb, float* yp, bool x_written, const MoeSharedDevice* sh,
                      float shared_limit, float* shy, void* stream) {
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter, max_active = std::min(E, n);
  if (!x_written) detail::launch_moe_x_bf16({.x = x, .T = T, .K = D, .xb = xb}, stream);
  MoeFastShared sgu, sdn;
  if (sh) {
    sgu = {.w1 = sh->w1.data, .s1 = sh->w1.scale, .w3 = sh->w3.data, .s3 = sh->w3.scale, .rows = T, .row0 = n,
           .limit = shared_limit};
    sdn = {.w1 = sh->w2.data, .s1 = sh->w2.scale, .rows = T, .row0 = n, .out = shy};
  }
  const int64_t big_grid = big ? moe_paired_grid(n, E) : 0;
  const MoeFastArgs gate_up{.active = active, .offsets = offsets, .xb = xb, .perm = perm, .w1 = ex.w1.data,
                            .s1 = ex.w1.scale, .w3 = ex.w3.data, .s3 = ex.w3.scale, .K = D, .N = I, .limit = limit,
                            .hout = hb, .big = big, .big_grid = big_grid};
  const MoeFastVariant variant = moe_fast_variant();
  detail::launch_moe_fast_shared(true, gate_up, sgu, max_active, stream, variant);
  const MoeFastArgs down{.active = active, .offsets = offsets, .xb = hb, .w1 = ex.w2.data, .s1 = ex.w2.scale, .K = I,
                         .N = D, .yout = yp, .big = big, .big_grid = big_grid};
  detail::launch_moe_fast_shared(false, down, sdn, max_active, stream, variant);
}

// Grouped (prefill) path of the routed experts: yp rows of all valid assignments, bf16 (MoePlan::yp_bf16).
void moe_grouped_experts(const float* x, int64_t T, int64_t n, const MoeExpertsDevice& ex, float limit,
                         const int32_t* offsets, const int32_t* perm, int32_t* tiles, uint16_t* xb, uint16_t* hb,
                         uint16_t* yp16, void* stream) {
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter, max_tiles = moe_detail::grp_max_tiles(n, E);
  detail::launch_moe_grouped_x(x, T, D, xb, stream);
  detail::launch_moe_tile_list(offsets, E, tiles, stream);
  const MoeGroupedArgs gate_up{.tiles = tiles, .offsets = offsets, .perm_token = perm, .a = xb, .w1 = ex.w1.data,
                               .s1 = ex.w1.scale, .w3 = ex.w3.data, .s3 = ex.w3.scale, .K = D, .N = I,
                               .limit = limit, .hout = hb};
  detail::launch_moe_grouped(true, gate_up, max_tiles, stream);
  const MoeGroupedArgs down{.tiles = tiles, .offsets = offsets, .a = hb, .w1 = ex.w2.data, .s1 = ex.w2.scale, .K = I,
                            .N = D, .yout16 = yp16};
  detail::launch_moe_grouped(false, down, max_tiles, stream);
}

// FP8 grouped path of the routed experts: x quantized in permuted row order (row p = token perm_token[p]; each token
// quantized once and written to its rows pos_of[t * topk + j]) to two e4m3 terms [n, D] each + 1x128 scales in the x
// scratch, the SwiGLU output as two e4m3 terms [n, I] + 1x64 scales in the h scratch (both fit: MoeWorkspace::reserve
// sizes h3 for it; h1 holds fp32 [n, I]).
Status moe_grouped_fp8_experts(const float* x, int64_t T, int64_t topk, const MoeExpertsDevice& ex, float limit,
                               const int32_t* offsets, const int32_t* pos, int32_t* tiles, uint8_t* xscratch,
                               uint8_t* hscratch, float* yp, void* stream) {
  const int64_t n = T * topk;
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter, max_tiles = moe_detail::grp_max_tiles(n, E);
  uint8_t* xq = xscratch;
  uint8_t* xlo = xscratch + n * D;                             // n * D % 128 == 0: 16-byte aligned
  float* xs = reinterpret_cast<float*>(xscratch + 2 * n * D);
  uint8_t* hq = hscratch;
  uint8_t* hlo = hscratch + n * I;
  float* hs = reinterpret_cast<float*>(hscratch + 2 * n * I);
  detail::launch_moe_quant(x, pos, T, topk, D, moe_detail::kFp8BlockGateUp, xq, xlo, xs, stream);
  detail::launch_moe_tile_list(offsets, E, tiles, stream);
  const MoeGroupedFp8Args gate_up{.tiles = tiles, .offsets = offsets, .a = xq, .a_lo = xlo, .a_scale = xs,
                                  .rows_a = n, .w1 = ex.w1.data, .s1 = ex.w1.scale, .w3 = ex.w3.data,
                                  .s3 = ex.w3.scale, .K = D, .N = I, .limit = limit, .hq = hq, .hq_lo = hlo, .hs = hs};
  const MoeGroupedFp8Args down{.tiles = tiles, .offsets = offsets, .a = hq, .a_lo = hlo, .a_scale = hs, .rows_a = n,
                               .w1 = ex.w2.data, .s1 = ex.w2.scale, .K = I, .N = D, .yout = yp};
  if (!detail::launch_moe_grouped_fp8(true, gate_up, max_tiles, stream) ||
      !detail::launch_moe_grouped_fp8(false, down, max_tiles, stream))
    return Status::errorf("moe_cuda: the FP8 grouped MoE cannot make its TMA tensor map (driver without "
                          "cuTensorMapEncodeTiled?) for n = {} rows, dim = {}, inter = {}", n, D, I);
  return Status::ok();
}

// RS grouped path of the routed experts (bf16 wgmma, FP4 weights in registers): x rounded to bf16 in chunk layout in
// permuted row order (row p = token perm_token[p], written through pos_of) in the x scratch (gathered from x16, the
// caller's rounding of x, where given), the SwiGLU output bf16 [n, I] in the h scratch, yp bf16 (MoePlan::yp_bf16).
Status moe_grouped_rs_experts(const float* x, const uint16_t* x16, int64_t T, int64_t topk, const MoeExpertsDevice& ex,
                              float limit, const int32_t* offsets, const int32_t* pos, int32_t* tiles, uint16_t* xp,
                              uint16_t* hb, uint16_t* yp16, void* stream) {
  const int64_t n = T * topk;
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter, max_tiles = moe_detail::grp_max_tiles(n, E);
  detail::launch_moe_grouped_xp(x, x16, pos, T, topk, D, xp, stream);
  detail::launch_moe_tile_list(offsets, E, tiles, stream);
  const MoeGroupedRsArgs gate_up{.tiles = tiles, .offsets = offsets, .a = xp, .rows_a = n, .w1 = ex.w1.data,
                                 .s1 = ex.w1.scale, .w3 = ex.w3.data, .s3 = ex.w3.scale, .K = D, .N = I,
                                 .limit = limit, .hout = hb, .cwg = kMoeGroupedRsCwg, .variant = moe_rs_variant()};
  const MoeGroupedRsArgs down{.tiles = tiles, .offsets = offsets, .a = hb, .rows_a = n, .w1 = ex.w2.data,
                              .s1 = ex.w2.scale, .K = I, .N = D, .yout16 = yp16, .cwg = kMoeGroupedRsCwg,
                              .variant = moe_rs_variant()};
  if (!detail::launch_moe_grouped_rs(true, gate_up, max_tiles, stream) ||
      !detail::launch_moe_grouped_rs(false, down, max_tiles, stream))
    return Status::errorf("moe_cuda: the RS grouped MoE cannot make its TMA tensor map (driver without "
                          "cuTensorMapEncodeTiled?) for n = {} rows, dim = {}, inter = {}", n, D, I);
  return Status::ok();
}

// CUTLASS grouped FP8 path of the routed experts (FP8_BLOCK experts): x quantized in permuted row order to e4m3 +
// 1x128 scales in h3; gate (into h1) and up (into yp) bf16 [n, I] by one grouped GEMM of 2 E groups; clamped SwiGLU
// quantized like x into h3 (x is dead by then); the down GEMM into yp as bf16 [n, D] (moe_cuda's combine reads it
// through launch_moe_cutlass_combine). E8M0 weight scales are widened to fp32 in the workspace first (fp32 ones are
// read in place).
Status moe_cutlass_experts(const float* x, int64_t n, const MoeExpertsDevice& ex, float limit, const int32_t* offsets,
                           const int32_t* perm, float* h1, float* h3, float* yp, uint8_t* cws, size_t scale_bytes,
                           size_t cws_bytes, void* stream) {
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter, B = kMoeCutlassBlock;
  const int64_t count = (I / B) * (D / B);  // scale blocks per expert weight, [N / 128, K / 128]
  auto* q = reinterpret_cast<uint8_t*>(h3);
  auto* qs = reinterpret_cast<float*>(q + n * std::max(D, I));
  float* fs = reinterpret_cast<float*>(cws);
  const DeviceExpertWeights* w[3] = {&ex.w1, &ex.w3, &ex.w2};
  const float* flat[3] = {};
  for (int i = 0; i < 3; ++i)
    if (w[i]->scale_e8m0) {
      flat[i] = fs + i * E * count;
      detail::launch_moe_cutlass_scales(w[i]->scale, E, count, fs + i * E * count, stream);
    }
  detail::launch_moe_cutlass_quant(x, perm, offsets, E, n, D, q, qs, stream);
  MoeCutlassGemmArgs gate_up{.experts = E, .N = I, .K = D, .offsets = offsets, .a = q, .a_scale = qs, .sets = 2};
  MoeCutlassGemmArgs down{.experts = E, .N = D, .K = I, .offsets = offsets, .a = q, .a_scale = qs, .sets = 1};
  gate_up.w[0] = ex.w1.data;
  gate_up.w[1] = ex.w3.data;
  gate_up.w_scale[0] = flat[0];
  gate_up.w_scale[1] = flat[1];
  gate_up.w_scale_ptr[0] = ex.w1.scale;
  gate_up.w_scale_ptr[1] = ex.w3.scale;
  gate_up.d[0] = h1;
  gate_up.d[1] = yp;
  gate_up.cluster_n = moe_cutlass_cluster_n(n, E, I);
  down.w[0] = ex.w2.data;
  down.w_scale[0] = flat[2];
  down.w_scale_ptr[0] = ex.w2.scale;
  down.d[0] = yp;
  down.cluster_n = moe_cutlass_cluster_n(n, E, D);
  uint8_t* args_ws = cws + scale_bytes;
  if (const char* why = detail::launch_moe_cutlass_gemm(gate_up, args_ws, cws_bytes - scale_bytes, stream))
    return Status::errorf("moe_cuda: CUTLASS grouped FP8 gate/up GEMM (n = {} rows, dim = {}, inter = {}): {}", n, D,
                          I, why);
  detail::launch_moe_cutlass_swiglu_quant(h1, yp, offsets, E, n, I, limit, q, qs, stream);
  if (const char* why = detail::launch_moe_cutlass_gemm(down, args_ws, cws_bytes - scale_bytes, stream))
    return Status::errorf("moe_cuda: CUTLASS grouped FP8 down GEMM (n = {} rows, dim = {}, inter = {}): {}", n, D, I,
                          why);
  return Status::ok();
}

// Routed experts through the grouped GEMMs (MoePath::Exact, and Invariant for formats the fast path lacks).
Status exact_experts(const float* x, int64_t n, const MoeExpertsDevice& ex, float limit, const int32_t* offsets,
                     const int32_t* perm, float* h1, float* h3, float* yp, void* stream, bool skinny_ok) {
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter;
  DSI_RETURN_IF_ERROR(expert_gemm(x, D, perm, offsets, n, E, ex.w1, h1, I, stream, skinny_ok));
  DSI_RETURN_IF_ERROR(expert_gemm(x, D, perm, offsets, n, E, ex.w3, h3, I, stream, skinny_ok));
  detail::launch_swiglu(h1, h3, n, offsets + E, I, limit, stream);
  DSI_CUDA_LAUNCHED("swiglu_kernel");
  return expert_gemm(h1, I, nullptr, offsets, n, E, ex.w2, yp, D, stream, skinny_ok);
}

// Shared expert on all T rows: s1 = x W1^T, s3 = x W3^T, SwiGLU in place, shy = s1 W2^T. The GEMMs go through
// `proj` (the caller's projection, MoePlan::shared_projection, with x16 for gate and up, and the SwiGLU's bf16
// rounding s16 [T, inter] for down) when given, else gemm_cuda at moe_shared_precision.
Status shared_expert(const float* x, const uint16_t* x16, int64_t T, int64_t D, const MoeSharedDevice& sh,
                     float shared_limit, MoePath path, float* s1, float* s3, uint16_t* s16, float* shy, void* stream,
                     const MoeSharedGemm* proj) {
  const int64_t Is = sh.w1.rows;
  auto gemm = [&](const float* a, const uint16_t* a16, int64_t K, const DeviceWeight& w, float* y, int64_t N) {
    if (proj) return (*proj)(a, a16, T, K, w, y, N);
    return gemm_cuda(a, T, K, w, y, N, false, stream, moe_shared_precision(path, T, N));
  };
  DSI_RETURN_IF_ERROR(gemm(x, x16, D, sh.w1, s1, Is));
  DSI_RETURN_IF_ERROR(gemm(x, x16, D, sh.w3, s3, Is));
  uint16_t* h16 = proj ? s16 : nullptr;
  detail::launch_swiglu(s1, s3, T, nullptr, Is, shared_limit, stream, h16);
  DSI_CUDA_LAUNCHED("swiglu_kernel(shared)");
  return gemm(s1, h16, Is, sh.w2, shy, D);
}

Status check_launch_status(const char* name) {
  DSI_CUDA_LAUNCHED(name);
  return Status::ok();
}

}  // namespace

// The checks moe_cuda and moe_official_cuda share (shapes, formats, pointers, the workspace's capacity).
Status MoeWorkspace::check_call(const void* x, int64_t T, const int32_t* idx, const float* weight, int64_t topk,
                                const MoeExpertsDevice& ex, const MoeSharedDevice* shared, float* out) const {
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter;
  if (T < 0 || topk <= 0) return Status::errorf("moe_cuda: bad T = {} or topk = {}", T, topk);
  if (E <= 0 || E > detail::kMoeMaxExperts || D <= 0 || I <= 0)
    return Status::errorf("moe_cuda: bad experts = {} (max {}), dim = {}, inter = {}", E, detail::kMoeMaxExperts, D, I);
  DSI_RETURN_IF_ERROR(check_experts(ex.w1, I, D, "w1"));
  DSI_RETURN_IF_ERROR(check_experts(ex.w3, I, D, "w3"));
  DSI_RETURN_IF_ERROR(check_experts(ex.w2, D, I, "w2"));
  const int64_t Is = shared ? shared->w1.rows : 0;
  if (shared) DSI_RETURN_IF_ERROR(check_shared(*shared, D));
  if (T == 0) return Status::ok();
  if (!x || !idx || !weight || !out) return Status::error("moe_cuda: null x / idx / weight / out");
  if (T > T_ || topk > topk_ || D > dim_ || I > inter_ || Is > inter_ || E > experts_)
    return Status::errorf(
        "moe_cuda: workspace reserved for T={} topk={} dim={} inter={} experts={}, call needs T={} topk={} dim={} "
        "inter={} experts={}",
        T_, topk_, dim_, inter_, experts_, T, topk, D, std::max(I, Is), E);
  if (T * topk > 0x7fffffff) return Status::error("moe_cuda: T * topk exceeds int32 row indices");
  return Status::ok();
}

MoePlan MoeWorkspace::plan(const MoeExpertsDevice& ex, bool has_shared, int64_t T, int64_t topk, MoePath path) const {
  return plan_moe(path, moe_fast_supported(ex), T, topk, has_shared, moe_cutlass_supported(ex), bool(shared_gemm_),
                  ex.experts, moe_paired_route());
}

bool moe_x16_suffices(const MoeWorkspace& ws, const MoeExpertsDevice& ex, bool has_shared, int64_t T, int64_t topk,
                      MoePath path) {
  const MoePlan p = ws.plan(ex, has_shared, T, topk, path);
  return p.experts == MoeExpertKernels::kGroupedRs && (!has_shared || p.shared_projection);
}

Status moe_cuda(const float* x, int64_t T, const int32_t* idx, const float* weight, int64_t topk,
                const MoeExpertsDevice& ex, const MoeSharedDevice* shared, float limit, float shared_limit, float* out,
                MoeWorkspace& ws, void* stream, MoePath path, const uint16_t* x16, RoutedSum* defer) {
  const int64_t E = ex.experts, D = ex.dim;
  if (defer) *defer = RoutedSum{};
  DSI_RETURN_IF_ERROR(ws.check_call(x ? static_cast<const void*>(x) : x16, T, idx, weight, topk, ex, shared, out));
  if (T == 0) return Status::ok();
  if (!x && !moe_x16_suffices(ws, ex, shared != nullptr, T, topk, path))
    return Status::errorf("moe_cuda: no fp32 x, and the plan for {} tokens reads it (moe_x16_suffices)", T);
  const int64_t n = T * topk;
  int32_t* offsets = ws.offsets_.data();
  int32_t* perm = ws.perm_token_.data();
  int32_t* pos = ws.pos_of_.data();
  float *h1 = ws.h1_.data(), *h3 = ws.h3_.data(), *yp = ws.yp_.data();

  const MoePlan plan = ws.plan(ex, shared != nullptr, T, topk, path);
  const bool fast = plan.experts != MoeExpertKernels::kGemm;
  int32_t* active = fast ? ws.active_.data() : nullptr;
  int32_t* big = plan.paired ? ws.active_.data() + (E + 1) : nullptr;
  // Decode sizes: the shared expert inside the routed experts' kernels (moe_fast_shared.h), no side stream.
  const bool fused_shared = shared && moe_shared_fused(path, plan.experts, T, ex, *shared);

  // Fast path: the shared expert on the side stream, concurrently with the routed experts. The join precedes the
  // combine and is recorded whatever happened in between (a captured forward never ends with the side stream
  // unjoined).
  const bool side = plan.side_stream && !fused_shared && ws.side_.usable();
  float *s1 = ws.sh1_.data(), *s3 = ws.sh3_.data(), *shy = shared ? ws.shy_.data() : nullptr;
  if (side) DSI_RETURN_IF_ERROR(ws.side_.fork(stream));
  Status st = Status::ok();
  if (plan.prep_one_launch) {
    // count + scatter in one launch, and the fast kernels' bf16 x rows beside them (MoePlan::x_bf16_in_prep)
    MoeXBf16 xc;
    if (plan.x_bf16_in_prep) xc = {.x = x, .T = T, .K = D, .xb = reinterpret_cast<uint16_t*>(h3)};
    detail::launch_moe_prep(idx, n, topk, E, offsets, perm, pos, active, stream, xc, big);
    st = check_launch_status("moe_prep_kernel");
  } else {
    detail::launch_moe_count(idx, n, E, offsets, pos, active, stream, big);
    st = check_launch_status("moe_count_kernel");
    if (st.is_ok()) detail::launch_moe_scatter(idx, n, topk, E, offsets, perm, pos, stream);
    if (st.is_ok()) st = check_launch_status("moe_scatter_kernel");
  }
  if (st.is_ok() && plan.experts == MoeExpertKernels::kCutlassFp8) {
    st = moe_cutlass_experts(x, n, ex, limit, offsets, perm, h1, h3, yp, ws.cutlass_.data(), ws.cutlass_scale_bytes_,
                             ws.cutlass_.size(), stream);
    if (st.is_ok()) st = check_launch_status("moe_cutlass_quant_kernel / CUTLASS grouped GEMM / swiglu_quant");
  } else if (st.is_ok() && plan.experts == MoeExpertKernels::kGroupedFp8) {
    st = moe_grouped_fp8_experts(x, T, topk, ex, limit, offsets, pos, ws.tiles_.data(),
                                 reinterpret_cast<uint8_t*>(h3), reinterpret_cast<uint8_t*>(h1), yp, stream);
    if (st.is_ok())
      st = check_launch_status("moe_quant_kernel / moe_tile_list_by_size_kernel / moe_grouped_fp8_kernel");
  } else if (st.is_ok() && plan.experts == MoeExpertKernels::kGroupedRs) {
    st = moe_grouped_rs_experts(x, x16, T, topk, ex, limit, offsets, pos, ws.tiles_.data(),
                                reinterpret_cast<uint16_t*>(h3), reinterpret_cast<uint16_t*>(h1),
                                reinterpret_cast<uint16_t*>(yp), stream);
    if (st.is_ok())
      st = check_launch_status("moe_grouped_xp_kernel / moe_tile_list_by_size_kernel / moe_grouped_rs_kernel");
  } else if (st.is_ok() && plan.experts == MoeExpertKernels::kGrouped) {
    moe_grouped_experts(x, T, n, ex, limit, offsets, perm, ws.tiles_.data(), reinterpret_cast<uint16_t*>(h3),
                        reinterpret_cast<uint16_t*>(h1), reinterpret_cast<uint16_t*>(yp), stream);
    st = check_launch_status("moe_grouped_x_kernel / moe_tile_list_by_size_kernel / moe_grouped_kernel");
  } else if (st.is_ok() && fast) {
    moe_fast_experts(x, T, n, ex, limit, offsets, perm, active, big, reinterpret_cast<uint16_t*>(h3),
                     reinterpret_cast<uint16_t*>(h1), yp, plan.x_bf16_in_prep,
                     fused_shared ? shared : nullptr, shared_limit, shy, stream);
    st = check_launch_status("moe_x_bf16_kernel / moe_fast_kernel");
  } else if (st.is_ok()) {
    st = exact_experts(x, n, ex, limit, offsets, perm, h1, h3, yp, stream, plan.gemm_skinny_ok);
  }
  // launched after the routed kernels (host launch time stays off the routed critical path), forked before them
  if (st.is_ok() && shared && !fused_shared)
    st = shared_expert(x, x16, T, D, *shared, shared_limit, path, s1, s3, ws.sh16_.data(), shy,
                       side ? ws.side_.stream() : stream, plan.shared_projection ? &ws.shared_gemm_ : nullptr);
  if (side) {
    const Status joined = ws.side_.join(stream);
    if (st.is_ok()) st = joined;
  }
  DSI_RETURN_IF_ERROR(st);
  if (plan.experts == MoeExpertKernels::kCutlassFp8) {
    detail::launch_moe_cutlass_combine(yp, pos, weight, T, topk, D, shy, out, stream);
    DSI_CUDA_LAUNCHED("moe_cutlass_combine_kernel");
    return Status::ok();
  }
  const RoutedSum sum{yp, pos, weight, topk, shy, plan.yp_bf16};
  if (defer) {
    *defer = sum;
    return Status::ok();
  }
  detail::launch_combine(sum, T, D, out, stream);
  DSI_CUDA_LAUNCHED("combine_kernel");
  return Status::ok();
}

Status moe_shared_cuda(const float* x, int64_t T, const MoeSharedDevice& shared, float shared_limit, float* out,
                       MoeWorkspace& ws, void* stream, MoePath path) {
  const int64_t D = shared.w2.rows;
  DSI_RETURN_IF_ERROR(check_shared(shared, D));
  if (T < 0) return Status::errorf("moe_shared_cuda: bad T = {}", T);
  if (T == 0) return Status::ok();
  if (!x || !out) return Status::error("moe_shared_cuda: null x / out");
  if (T > ws.T_ || shared.w1.rows > ws.inter_)
    return Status::errorf("moe_shared_cuda: workspace reserved for T={} inter={}, call needs T={} inter={}", ws.T_,
                          ws.inter_, T, shared.w1.rows);
  return shared_expert(x, nullptr, T, D, shared, shared_limit, path, ws.sh1_.data(), ws.sh3_.data(), nullptr, out,
                       stream, nullptr);
}

Status moe_combine_cuda(const RoutedSum& f, int64_t T, int64_t dim, float* out, void* stream) {
  if (T < 0 || f.topk <= 0 || dim <= 0)
    return Status::errorf("moe_combine_cuda: bad T={} topk={} dim={}", T, f.topk, dim);
  if (T == 0) return Status::ok();
  if (!f.yp || !f.pos_of || !f.weight || !out)
    return Status::error("moe_combine_cuda: null yp / pos_of / weight / out");
  detail::launch_combine(f, T, dim, out, stream);
  DSI_CUDA_LAUNCHED("combine_kernel");
  return Status::ok();
}

Status moe_official_cuda(const float* x, int64_t T, const int32_t* idx, const float* weight, int64_t topk,
                         const MoeExpertsDevice& ex, const MoeSharedDevice* shared, float limit, float* out,
                         MoeWorkspace& ws, void* stream) {
  const int64_t E = ex.experts, D = ex.dim, I = ex.inter, Is = shared ? shared->w1.rows : 0;
  DSI_RETURN_IF_ERROR(ws.check_call(x, T, idx, weight, topk, ex, shared, out));
  if (T == 0) return Status::ok();
  const int64_t n = T * topk;
  int32_t *offsets = ws.offsets_.data(), *perm = ws.perm_token_.data(), *pos = ws.pos_of_.data();
  float *h1 = ws.h1_.data(), *h3 = ws.h3_.data(), *yp = ws.yp_.data(), *wrow = ws.wrow_.data();
  detail::launch_moe_count(idx, n, E, offsets, pos, nullptr, stream);
  DSI_CUDA_LAUNCHED("moe_count_kernel");
  detail::launch_moe_scatter(idx, n, topk, E, offsets, perm, pos, stream);
  DSI_CUDA_LAUNCHED("moe_scatter_kernel");
  detail::launch_row_weight(pos, weight, n, wrow, stream);
  DSI_CUDA_LAUNCHED("row_weight_kernel");
  // The routed experts: the official (quantized, bf16-out) GEMMs over the permuted rows, the official SwiGLU, the down
  // GEMM; then the shared expert the same way on all T rows.
  const auto grouped = [&](const float* in, int64_t ld, const int32_t* rows, const DeviceExpertWeights& w, float* y,
                           int64_t ldy) {
    detail::launch_gemm_official(w.fmt, expert_args(in, ld, rows, offsets, E, w, y, ldy), OfficialGemm::kQuantized,
                                 stream);
  };
  grouped(x, D, perm, ex.w1, h1, I);
  grouped(x, D, perm, ex.w3, h3, I);
  detail::launch_official_swiglu(h1, h3, wrow, n, offsets + E, I, limit, stream);
  grouped(h1, I, nullptr, ex.w2, yp, D);
  DSI_CUDA_LAUNCHED("gemm_official_kernel / official_swiglu_kernel");
  float *s1 = ws.sh1_.data(), *s3 = ws.sh3_.data(), *shy = shared ? ws.shy_.data() : nullptr;
  if (shared) {
    const OfficialGemm q = OfficialGemm::kQuantized;
    DSI_RETURN_IF_ERROR(gemm_official_cuda(x, T, D, shared->w1, s1, Is, q, stream));
    DSI_RETURN_IF_ERROR(gemm_official_cuda(x, T, D, shared->w3, s3, Is, q, stream));
    detail::launch_official_swiglu(s1, s3, nullptr, T, nullptr, Is, limit, stream);
    DSI_CUDA_LAUNCHED("official_swiglu_kernel(shared)");
    DSI_RETURN_IF_ERROR(gemm_official_cuda(s1, T, Is, shared->w2, shy, D, q, stream));
  }
  detail::launch_official_combine(yp, pos, idx, T, topk, D, shy, out, stream);
  DSI_CUDA_LAUNCHED("official_combine_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
