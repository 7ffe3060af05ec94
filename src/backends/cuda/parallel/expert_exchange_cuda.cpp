// DP attention + EP on a CUDA shard (cuda_forward.h CudaForward::moe_exchange; docs/multi_gpu.md "DP attention"):
// one MoE layer of this shard's own tokens with the routed experts spread over the ranks.
//   1. the routing comes to the host and parallel::plan_dispatch packs the (token, slot) pairs by destination rank;
//   2. all_to_all_v of the pair counts (device buffers, so NCCL and the in-process group both take them);
//   (1-2 with the fixed-capacity exchange, ranks sharing one GPU: the pairs are planned on the device into segments
//   of the sender's worst case, T x k pairs each, whose sizes every rank knows from the step's per-rank token counts:
//   nothing waits for the device; dp_dispatch_cuda.h)
//   3. all_to_all_v of each pair's local expert id and of its input row in the wire type (input_wire);
//   4. this rank's experts on the pairs it received (moe_cuda with top-k 1 and weight 1: y = 1 * expert(x));
//   5. all_to_all_v of those outputs back to the pairs' ranks (output_wire);
//   6. the token's rank: its shared expert and the weighted sum of its pairs' outputs in top-k order, through
//      moe_cuda's own shared-expert GEMMs and combine kernel (moe_shared_cuda / moe_combine_cuda).
// With --batch-invariant every step here computes the bits one rank computes: a pair's expert output does not
// depend on the other rows of the call (ops/moe/moe_plan.h, MoePath::Invariant), the wire carries exactly what the
// expert kernels read and write, and the combine is the same kernel over the same values in the same order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>

#include "backends/cuda/parallel/dp_dispatch_cuda.h"
#include "backends/cuda/parallel/fp8_wire_cuda.h"
#include "backends/cuda/runner/cuda_forward.h"
#include "cuda/cuda_common.h"
#include "ops/moe/moe_exchange_cuda.h"
#include "parallel/dispatch_plan.h"
#include "parallel/fp8_wire.h"

namespace dsinfer::backends {

using ops::cuda::WireType;

struct CudaForward::ExchangeScratch {
  std::vector<int32_t> idx;     // host: the routing [T * k]
  std::vector<int32_t> meta;    // host: send_token [P], send_expert [P], pos_of [T * k]
  std::vector<int64_t> counts;  // host: pairs sent to [N], then received from [N] each rank
  cuda::DeviceBuffer<int32_t> meta_dev, recv_expert;
  cuda::DeviceBuffer<int64_t> counts_dev;
  cuda::DeviceBuffer<uint8_t> xs, xr, ys, yb;  // wire rows: inputs sent / received, outputs sent / received
  cuda::DeviceBuffer<float> xr32, yr, yb32, ones, shy;
  ops::cuda::MoeWorkspace ws;
};

namespace {

// The wire types, decided here only. Inputs travel as the expert kernels read them: bf16 (rounded to nearest even,
// as the fast FP4 kernels round x themselves: nothing is lost) where those kernels run (fast and batch-invariant
// modes, FP4 experts), fp32 otherwise (the exact kernels read fp32; the fixtures' fp32 experts). Outputs come back
// in fp32 where the results must not move (exact: the reference checks; batch-invariant: bit-identical to one
// rank), in bf16 otherwise (half the bytes; each pair's output rounded once before the top-k sum). A single-term
// FP8 dispatch (e4m3 + one scale per 128, DeepEP's) would halve the input bytes again but change what the experts
// read, so N ranks would no longer compute one rank's results (docs/decisions.md 2026-12-02, issue 27).
WireType input_wire(ops::KernelMode mode, const ops::cuda::MoeExpertsDevice& e) {
  const bool fast_kernels = mode == ops::KernelMode::kFast || mode == ops::KernelMode::kBatchInvariant;
  return fast_kernels && ops::cuda::moe_fast_supported(e) ? WireType::kBf16 : WireType::kF32;
}
// FP8 dispatch (docs/multi_gpu.md "FP8 dispatch", parallel/fp8_wire.h): opt-in with DSINFER_DP_DISPATCH=fp8, in fast
// mode only (exact and batch-invariant runs keep what the experts read bit for bit). The inputs then travel as e4m3
// with a scale per 128 values (1.03 bytes a value) and the experts read their dequantized values, which one rank
// never does: N ranks then differ from one rank by that rounding (measured: GpuMultiGpu.DpFp8DispatchAgainstBf16).
bool fp8_dispatch(ops::KernelMode mode) {
  if (mode != ops::KernelMode::kFast) return false;
  const char* v = std::getenv("DSINFER_DP_DISPATCH");  // read per layer (tests switch it within one process)
  return v && std::string(v) == "fp8";
}
WireType output_wire(ops::KernelMode mode) {
  return mode == ops::KernelMode::kExact || mode == ops::KernelMode::kBatchInvariant ? WireType::kF32 : WireType::kBf16;
}

// Bytes per rank of `rows[q]` rows of `row_bytes` each.
std::vector<size_t> sizes(std::span<const int64_t> rows, int64_t row_bytes) {
  std::vector<size_t> out(rows.size());
  for (size_t q = 0; q < rows.size(); ++q) out[q] = size_t(rows[q] * row_bytes);
  return out;
}

}  // namespace

Status CudaForward::serve_experts() {
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
    DSI_RETURN_IF_ERROR(moe_exchange(l, nullptr, 0, nullptr, nullptr, nullptr));
  return Status::ok();
}

Status CudaForward::moe_exchange(int64_t l, const float* x, int64_t T, const int32_t* ridx, const float* rw,
                                 float* out) {
  if (!comm_) return Status::error("cuda runner: DP attention without a communicator");
  if (!xchg_) xchg_ = std::make_shared<ExchangeScratch>();
  ExchangeScratch& X = *xchg_;
  const MoeLayerView L = moe_layer(l);
  const ops::cuda::MoeExpertsDevice& ex = *L.experts;
  const ops::KernelMode mode = kernel_mode();
  const int32_t N = comm_->world();
  const int64_t D = cfg_.hidden_size, k = cfg_.num_experts_per_tok, E = cfg_.n_routed_experts;
  const WireType wx = input_wire(mode, ex), wy = output_wire(mode);
  const bool fp8 = fp8_dispatch(mode);
  const int64_t bx = fp8 ? parallel::fp8_wire_row_bytes(D) : ops::cuda::wire_bytes(wx) * D;  // bytes per row
  const int64_t by = ops::cuda::wire_bytes(wy) * D;

  // 1-3. Plan, counts, ids and inputs out.
  DSI_RETURN_IF_ERROR(mark("moe_dispatch", l, true));
  const bool fixed = !core_.dp_rank_tokens_.empty();  // the fixed-capacity exchange: no count reaches the host
  std::vector<int64_t> sent_rows, got_rows;
  int64_t P = 0;
  DSI_RETURN_IF_ERROR(plan_exchange(ridx, T, P, sent_rows, got_rows));
  const int32_t* send_token = X.meta_dev.data();
  const int32_t* send_expert = send_token + P;
  const int32_t* pos_of = send_token + 2 * P;
  const std::span<const int64_t> sent(sent_rows), got(got_rows);
  const int64_t R = std::accumulate(got.begin(), got.end(), int64_t(0));
  DSI_RETURN_IF_ERROR(grow(X.xs, size_t(P * bx), "expert dispatch inputs"));
  if (fp8) {
    detail::launch_fp8_wire_pack(x, D, send_token, P, X.xs.data(), stream_);
    DSI_CUDA_TRY(cudaGetLastError());
  } else {
    DSI_RETURN_IF_ERROR(ops::cuda::pack_rows_cuda(x, D, send_token, P, wx, X.xs.data(), stream_));
  }
  DSI_RETURN_IF_ERROR(grow(X.recv_expert, size_t(R), "expert dispatch ids"));
  DSI_RETURN_IF_ERROR(comm_->all_to_all_v(send_expert, sizes(sent, sizeof(int32_t)), X.recv_expert.data(),
                                          sizes(got, sizeof(int32_t)), stream_));
  DSI_RETURN_IF_ERROR(grow(X.xr, size_t(R * bx), "expert dispatch inputs"));
  DSI_RETURN_IF_ERROR(comm_->all_to_all_v(X.xs.data(), sizes(sent, bx), X.xr.data(), sizes(got, bx), stream_));
  DSI_RETURN_IF_ERROR(mark("moe_dispatch", l, false));

  // 4. This rank's experts on the received pairs (top-k 1, weight 1), in the chunks moe_cuda's plan wants.
  DSI_RETURN_IF_ERROR(mark("moe", l, true));
  const int64_t shared_inter = L.shared ? L.shared->w1.rows : 0;
  const int64_t served_chunk = std::max<int64_t>(ops::cuda::moe_chunk_tokens(mode, R, ex.experts, 1), 1);
  const int64_t own_chunk = std::max<int64_t>(ops::cuda::moe_chunk_tokens(mode, T, E, k), 1);
  const void* ws_before = X.ws.pos_of();
  DSI_RETURN_IF_ERROR(X.ws.reserve(std::max(served_chunk, own_chunk), k, D, std::max(ex.inter, shared_inter), ex.experts));
  if (X.ws.pos_of() != ws_before) ++scratch_gen_;  // the workspace moved: captured graphs hold its old pointers
  const float* xin = X.xr.as<float>();
  if (fp8) {
    DSI_RETURN_IF_ERROR(grow(X.xr32, size_t(R * D), "expert dispatch inputs"));
    detail::launch_fp8_wire_unpack(X.xr.data(), R, D, X.xr32.data(), stream_);
    DSI_CUDA_TRY(cudaGetLastError());
    xin = X.xr32.data();
  } else if (wx != WireType::kF32) {
    DSI_RETURN_IF_ERROR(grow(X.xr32, size_t(R * D), "expert dispatch inputs"));
    DSI_RETURN_IF_ERROR(ops::cuda::widen_rows_cuda(X.xr.data(), R, D, wx, X.xr32.data(), stream_));
    xin = X.xr32.data();
  }
  DSI_RETURN_IF_ERROR(grow(X.yr, size_t(R * D), "expert dispatch outputs"));
  DSI_RETURN_IF_ERROR(grow(X.ones, size_t(R), "expert dispatch weights"));
  DSI_RETURN_IF_ERROR(ops::cuda::fill_cuda(X.ones.data(), R, 1.0f, stream_));
  const ops::cuda::MoePath served_path = ops::cuda::moe_path(mode, R);
  for (int64_t c = 0; c < R; c += served_chunk) {
    const int64_t m = std::min(served_chunk, R - c);
    DSI_RETURN_IF_ERROR(ops::cuda::moe_cuda(xin + c * D, m, X.recv_expert.data() + c, X.ones.data() + c, 1, ex,
                                            nullptr, L.limit, 0.0f, X.yr.data() + c * D, X.ws, stream_,
                                            served_path));
  }
  DSI_RETURN_IF_ERROR(mark("moe", l, false));

  // 5. Outputs back, in the order each rank sent its pairs.
  DSI_RETURN_IF_ERROR(mark("moe_combine", l, true));
  const void* ysend = X.yr.data();
  if (wy != WireType::kF32) {
    DSI_RETURN_IF_ERROR(grow(X.ys, size_t(R * by), "expert dispatch outputs"));
    DSI_RETURN_IF_ERROR(ops::cuda::pack_rows_cuda(X.yr.data(), D, nullptr, R, wy, X.ys.data(), stream_));
    ysend = X.ys.data();
  }
  DSI_RETURN_IF_ERROR(grow(X.yb, size_t(P * by), "expert dispatch outputs"));
  DSI_RETURN_IF_ERROR(comm_->all_to_all_v(ysend, sizes(got, by), X.yb.data(), sizes(sent, by), stream_));
  DSI_RETURN_IF_ERROR(mark("moe_combine", l, false));

  // 6. The shared expert and the top-k sum of this rank's tokens, chunked as one rank chunks its MoE.
  DSI_RETURN_IF_ERROR(mark("moe_shared", l, true));
  const float* yin = X.yb.as<float>();
  if (wy != WireType::kF32) {
    DSI_RETURN_IF_ERROR(grow(X.yb32, size_t(P * D), "expert dispatch outputs"));
    DSI_RETURN_IF_ERROR(ops::cuda::widen_rows_cuda(X.yb.data(), P, D, wy, X.yb32.data(), stream_));
    yin = X.yb32.data();
  }
  DSI_RETURN_IF_ERROR(moe_shared_and_combine(l, x, T, own_chunk, yin, pos_of, rw, X.shy, X.ws, out));
  DSI_RETURN_IF_ERROR(mark("moe_shared", l, false));
  core_.traffic_.bytes += (fixed ? 0 : N * int64_t(sizeof(int64_t))) + P * int64_t(sizeof(int32_t)) + P * bx + R * by;
  core_.traffic_.calls += fixed ? 3 : 4;
  return Status::ok();
}

Status CudaForward::plan_exchange(const int32_t* ridx, int64_t T, int64_t& P, std::vector<int64_t>& sent,
                                  std::vector<int64_t>& got) {
  ExchangeScratch& X = *xchg_;
  const int32_t N = comm_->world();
  const int64_t k = cfg_.num_experts_per_tok, E = cfg_.n_routed_experts;
  auto* cs = static_cast<cudaStream_t>(stream_);
  sent.clear();
  got.clear();
  const std::vector<int64_t>& rank_tokens = core_.dp_rank_tokens_;
  if (!rank_tokens.empty()) {
    // Rank p may send all of its T_p x k pairs to any one rank, so each of its segments holds T_p x k pairs (the
    // padding: expert -1, which the MoE kernels skip). The sizes follow from the step's per-rank token counts (the
    // same on every rank); the pairs are planned on the device.
    if (rank_tokens.size() != size_t(N) || rank_tokens[size_t(comm_->rank())] != T)
      return Status::errorf("expert dispatch: rank {} has {} tokens, the step's per-rank counts ({} ranks) say {}",
                            comm_->rank(), T, rank_tokens.size(),
                            size_t(comm_->rank()) < rank_tokens.size() ? rank_tokens[size_t(comm_->rank())] : -1);
    if (N > detail::kDpDispatchMaxRanks)
      return Status::errorf("expert dispatch: {} ranks (the device plan takes up to {})", N,
                            detail::kDpDispatchMaxRanks);
    const int64_t cap = T * k;
    P = N * cap;
    sent.assign(size_t(N), cap);
    for (int64_t t : rank_tokens) got.push_back(t * k);
    DSI_RETURN_IF_ERROR(grow(X.meta_dev, size_t(2 * P + T * k), "expert dispatch plan"));
    detail::launch_dp_dispatch_plan(ridx, T, int32_t(k), int32_t(E), N, cap, X.meta_dev.data(),
                                    X.meta_dev.data() + P, X.meta_dev.data() + 2 * P, stream_);
    DSI_CUDA_TRY(cudaGetLastError());
  } else {
    X.idx.resize(size_t(T * k));
    if (T > 0) {
      DSI_CUDA_TRY(cudaMemcpyAsync(X.idx.data(), ridx, size_t(T * k) * sizeof(int32_t), cudaMemcpyDeviceToHost, cs));
      DSI_CUDA_TRY(cudaStreamSynchronize(cs));
    }
    DSI_ASSIGN_OR_RETURN(const parallel::DispatchPlan plan, parallel::plan_dispatch(X.idx, k, E, N));
    P = plan.pairs();
    X.meta.assign(plan.send_token.begin(), plan.send_token.end());
    X.meta.insert(X.meta.end(), plan.send_expert.begin(), plan.send_expert.end());
    X.meta.insert(X.meta.end(), plan.pos_of.begin(), plan.pos_of.end());
    DSI_RETURN_IF_ERROR(grow(X.meta_dev, X.meta.size(), "expert dispatch plan"));
    if (!X.meta.empty())
      DSI_CUDA_TRY(cudaMemcpyAsync(X.meta_dev.data(), X.meta.data(), X.meta.size() * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, cs));
    X.counts.assign(size_t(2 * N), 0);
    std::copy(plan.send_count.begin(), plan.send_count.end(), X.counts.begin());
    DSI_RETURN_IF_ERROR(grow(X.counts_dev, size_t(2 * N), "expert dispatch counts"));
    DSI_CUDA_TRY(cudaMemcpyAsync(X.counts_dev.data(), X.counts.data(), size_t(N) * sizeof(int64_t),
                                 cudaMemcpyHostToDevice, cs));
    const std::vector<size_t> eight(size_t(N), sizeof(int64_t));
    DSI_RETURN_IF_ERROR(comm_->all_to_all_v(X.counts_dev.data(), eight, X.counts_dev.data() + N, eight, stream_));
    DSI_CUDA_TRY(cudaMemcpyAsync(X.counts.data() + N, X.counts_dev.data() + N, size_t(N) * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, cs));
    DSI_CUDA_TRY(cudaStreamSynchronize(cs));
    for (int32_t q = 0; q < N; ++q)
      if (X.counts[size_t(N + q)] < 0 || X.counts[size_t(N + q)] > int64_t(1) << 30)
        return Status::errorf("expert dispatch: rank {} announced {} pairs to rank {}", q, X.counts[size_t(N + q)],
                              comm_->rank());
    sent.assign(plan.send_count.begin(), plan.send_count.end());
    got.assign(X.counts.begin() + N, X.counts.end());
  }
  return Status::ok();
}

Status CudaForward::moe_shared_and_combine(int64_t l, const float* x, int64_t T, int64_t own_chunk, const float* y,
                                           const int32_t* pos, const float* rw, cuda::DeviceBuffer<float>& shared_out,
                                           ops::cuda::MoeWorkspace& ws, float* out) {
  const MoeLayerView L = moe_layer(l);
  const int64_t D = cfg_.hidden_size;
  const int64_t k = cfg_.num_experts_per_tok;
  if (L.shared) DSI_RETURN_IF_ERROR(grow(shared_out, size_t(own_chunk * D), "shared expert output"));
  const ops::cuda::MoePath own_path = ops::cuda::moe_path(kernel_mode(), T);
  for (int64_t r = 0; r < T; r += own_chunk) {
    const int64_t m = std::min(own_chunk, T - r);
    if (L.shared)
      DSI_RETURN_IF_ERROR(ops::cuda::moe_shared_cuda(x + r * D, m, *L.shared, L.shared_limit, shared_out.data(), ws,
                                                     stream_, own_path));
    const ops::RoutedSum f{y, pos + r * k, rw + r * k, k, L.shared ? shared_out.data() : nullptr};
    DSI_RETURN_IF_ERROR(ops::cuda::moe_combine_cuda(f, m, D, out + r * D, stream_));
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
