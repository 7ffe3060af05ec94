// Expert dispatch / combine (see expert_dispatch.h).
#include "parallel/expert_dispatch.h"

#include <cstring>

#include "parallel/dispatch_plan.h"

namespace dsinfer::parallel {

namespace {

// One dispatched pair on the wire: the local expert id, the pair's routing weight, then x [D] (fp32).
constexpr size_t kPairHeader = sizeof(int32_t) + sizeof(float);
size_t pair_bytes(int64_t dim) { return kPairHeader + size_t(dim) * sizeof(float); }

Status check_shape(const DispatchShape& sh, std::span<const float> x, std::span<const int32_t> idx,
                   std::span<const float> wt) {
  if (int64_t(x.size()) != sh.tokens * sh.dim || int64_t(idx.size()) != sh.tokens * sh.topk ||
      wt.size() != idx.size())
    return Status::errorf("expert dispatch: {} inputs / {} expert ids / {} weights for {} tokens (D {}, top-k {})",
                          x.size(), idx.size(), wt.size(), sh.tokens, sh.dim, sh.topk);
  return Status::ok();
}

}  // namespace

Status dispatch_combine(Communicator& comm, const DispatchShape& sh, std::span<const float> x,
                        std::span<const int32_t> idx, std::span<const float> wt, const ExpertFn& compute,
                        std::vector<float>& y, DispatchStats* stats) {
  const int32_t n = comm.world();
  const int64_t T = sh.tokens, k = sh.topk, D = sh.dim;
  DSI_RETURN_IF_ERROR(check_shape(sh, x, idx, wt));
  DSI_ASSIGN_OR_RETURN(const DispatchPlan plan, plan_dispatch(idx, k, sh.experts, n));
  const int64_t per = sh.experts / n;
  // 1. Counts: how many pairs each rank receives from each.
  std::vector<int64_t> recv_count(static_cast<size_t>(n));
  const std::vector<size_t> eight(static_cast<size_t>(n), sizeof(int64_t));
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(plan.send_count.data(), eight, recv_count.data(), eight, nullptr));
  // 2. Dispatch: local expert id, weight and x of every pair, in the plan's packed order.
  const size_t pb = pair_bytes(D);
  std::vector<size_t> sbytes(static_cast<size_t>(n)), rbytes(static_cast<size_t>(n));
  size_t stotal = 0, rtotal = 0;
  for (int32_t q = 0; q < n; ++q) {
    if (recv_count[size_t(q)] < 0)
      return Status::errorf("expert dispatch: rank {} announced {} pairs", q, recv_count[size_t(q)]);
    sbytes[size_t(q)] = size_t(plan.send_count[size_t(q)]) * pb;
    rbytes[size_t(q)] = size_t(recv_count[size_t(q)]) * pb;
    stotal += sbytes[size_t(q)];
    rtotal += rbytes[size_t(q)];
  }
  std::vector<uint8_t> send(stotal), recv(rtotal);
  for (int64_t a = 0; a < T * k; ++a) {
    const int64_t p = plan.pos_of[size_t(a)];
    uint8_t* w = send.data() + size_t(p) * pb;
    std::memcpy(w, &plan.send_expert[size_t(p)], sizeof(int32_t));
    std::memcpy(w + sizeof(int32_t), &wt[size_t(a)], sizeof(float));
    std::memcpy(w + kPairHeader, x.data() + int64_t(plan.send_token[size_t(p)]) * D, size_t(D) * sizeof(float));
  }
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(send.data(), sbytes, recv.data(), rbytes, nullptr));
  // 3. The owned experts' outputs, in the order received; combine them back.
  const int64_t served = int64_t(rtotal / pb);
  const int32_t lo = int32_t(int64_t(comm.rank()) * per);
  std::vector<float> out(size_t(served * D));
  for (int64_t i = 0; i < served; ++i) {
    int32_t e = 0;
    float weight = 0.0f;
    std::memcpy(&e, recv.data() + size_t(i) * pb, sizeof(e));
    std::memcpy(&weight, recv.data() + size_t(i) * pb + sizeof(e), sizeof(weight));
    if (e < 0 || e >= per)
      return Status::errorf("expert dispatch: rank {} was sent local expert {} of {}", comm.rank(), e, per);
    std::vector<float> xi(static_cast<size_t>(D));
    std::memcpy(xi.data(), recv.data() + size_t(i) * pb + kPairHeader, size_t(D) * sizeof(float));
    compute(lo + e, weight, xi.data(), out.data() + i * D);
  }
  std::vector<size_t> cs(static_cast<size_t>(n)), cr(static_cast<size_t>(n));
  for (int32_t q = 0; q < n; ++q) {
    cs[size_t(q)] = size_t(recv_count[size_t(q)] * D) * sizeof(float);
    cr[size_t(q)] = size_t(plan.send_count[size_t(q)] * D) * sizeof(float);
  }
  std::vector<float> back(size_t(T * k * D));
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(out.data(), cs, back.data(), cr, nullptr));
  y.assign(size_t(T * k * D), 0.0f);
  for (int64_t a = 0; a < T * k; ++a)
    std::memcpy(y.data() + a * D, back.data() + int64_t(plan.pos_of[size_t(a)]) * D, size_t(D) * sizeof(float));
  if (stats) {
    stats->pairs_sent += T * k;
    stats->pairs_served += served;
    stats->bytes_sent += int64_t(stotal) + int64_t(served * D) * int64_t(sizeof(float));
  }
  return Status::ok();
}

Status gather_pair_outputs(Communicator& comm, const DispatchShape& sh, std::span<const float> x,
                           std::span<const int32_t> idx, std::span<const float> wt, const ExpertFn& compute,
                           std::vector<float>& y, DispatchStats* stats) {
  const int32_t n = comm.world();
  const int64_t T = sh.tokens, k = sh.topk, D = sh.dim;
  DSI_RETURN_IF_ERROR(check_shape(sh, x, idx, wt));
  if (sh.experts < n || sh.experts % n != 0)
    return Status::errorf("expert gather: {} experts do not split evenly over {} ranks", sh.experts, n);
  const int64_t per = sh.experts / n, lo = int64_t(comm.rank()) * per;
  y.assign(size_t(T * k * D), 0.0f);
  int64_t mine = 0;
  for (int64_t a = 0; a < T * k; ++a) {
    const int32_t e = idx[size_t(a)];
    if (e < 0 || e >= sh.experts)
      return Status::errorf("expert gather: token {} slot {} routes to expert {} outside [0, {})", a / k, a % k, e,
                            sh.experts);
    if (e < lo || e >= lo + per) continue;  // another rank's expert: this rank contributes zeros
    compute(e, wt[size_t(a)], x.data() + (a / k) * D, y.data() + a * D);
    ++mine;
  }
  DSI_RETURN_IF_ERROR(comm.all_reduce_sum(y.data(), y.size(), nullptr));
  if (stats) {
    stats->pairs_sent += T * k;
    stats->pairs_served += mine;
    stats->bytes_sent += T * k * D * int64_t(sizeof(float));  // what this rank contributes to the all-reduce
  }
  return Status::ok();
}

}  // namespace dsinfer::parallel
