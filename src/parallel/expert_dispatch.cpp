// Expert dispatch / combine (see expert_dispatch.h).
#include "parallel/expert_dispatch.h"

#include <cstring>

namespace dsinfer::parallel {

namespace {

// One dispatched pair on the wire: the expert id, then x [D] (fp32).
size_t pair_bytes(int64_t dim) { return sizeof(int32_t) + size_t(dim) * sizeof(float); }

}  // namespace

Status dispatch_combine(Communicator& comm, const DispatchShape& sh, std::span<const float> x,
                        std::span<const int32_t> idx, const ExpertFn& compute, std::vector<float>& y,
                        DispatchStats* stats) {
  const int32_t n = comm.world();
  const int64_t T = sh.tokens, k = sh.topk, D = sh.dim;
  if (n < 1 || sh.experts < n || sh.experts % n != 0)
    return Status::errorf("expert dispatch: {} experts cannot be split over {} ranks", sh.experts, n);
  if (int64_t(x.size()) != T * D || int64_t(idx.size()) != T * k)
    return Status::errorf("expert dispatch: {} inputs / {} expert ids for {} tokens (D {}, top-k {})", x.size(),
                          idx.size(), T, D, k);
  const int64_t per = sh.experts / n;
  // Pairs by destination, in (token, slot) order.
  std::vector<std::vector<int64_t>> to(static_cast<size_t>(n));
  for (int64_t a = 0; a < T * k; ++a) {
    const int32_t e = idx[size_t(a)];
    if (e < 0 || e >= sh.experts)
      return Status::errorf("expert dispatch: token {} slot {} routes to expert {} outside [0, {})", a / k, a % k, e,
                            sh.experts);
    to[size_t(e / per)].push_back(a);
  }
  // 1. Counts: how many pairs each rank receives from each.
  std::vector<int64_t> send_count(static_cast<size_t>(n)), recv_count(static_cast<size_t>(n));
  for (int32_t q = 0; q < n; ++q) send_count[size_t(q)] = int64_t(to[size_t(q)].size());
  const std::vector<size_t> eight(static_cast<size_t>(n), sizeof(int64_t));
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(send_count.data(), eight, recv_count.data(), eight, nullptr));
  // 2. Dispatch: expert id + x of every pair.
  const size_t pb = pair_bytes(D);
  std::vector<size_t> sbytes(static_cast<size_t>(n)), rbytes(static_cast<size_t>(n));
  size_t stotal = 0, rtotal = 0;
  for (int32_t q = 0; q < n; ++q) {
    if (recv_count[size_t(q)] < 0)
      return Status::errorf("expert dispatch: rank {} announced {} pairs", q, recv_count[size_t(q)]);
    sbytes[size_t(q)] = to[size_t(q)].size() * pb;
    rbytes[size_t(q)] = size_t(recv_count[size_t(q)]) * pb;
    stotal += sbytes[size_t(q)];
    rtotal += rbytes[size_t(q)];
  }
  std::vector<uint8_t> send(stotal), recv(rtotal);
  uint8_t* w = send.data();
  for (int32_t q = 0; q < n; ++q)
    for (int64_t a : to[size_t(q)]) {
      const int32_t e = idx[size_t(a)];
      std::memcpy(w, &e, sizeof(e));
      std::memcpy(w + sizeof(e), x.data() + (a / k) * D, size_t(D) * sizeof(float));
      w += pb;
    }
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(send.data(), sbytes, recv.data(), rbytes, nullptr));
  // 3. The owned experts' outputs, in the order received; combine them back.
  const int64_t served = int64_t(rtotal / pb);
  const int64_t lo = int64_t(comm.rank()) * per;
  std::vector<float> out(size_t(served * D));
  for (int64_t i = 0; i < served; ++i) {
    int32_t e = 0;
    std::memcpy(&e, recv.data() + size_t(i) * pb, sizeof(e));
    if (e < lo || e >= lo + per)
      return Status::errorf("expert dispatch: rank {} was sent expert {}, which it does not own", comm.rank(), e);
    std::vector<float> xi(static_cast<size_t>(D));
    std::memcpy(xi.data(), recv.data() + size_t(i) * pb + sizeof(e), size_t(D) * sizeof(float));
    compute(e, xi.data(), out.data() + i * D);
  }
  std::vector<size_t> cs(static_cast<size_t>(n)), cr(static_cast<size_t>(n));
  for (int32_t q = 0; q < n; ++q) {
    cs[size_t(q)] = size_t(recv_count[size_t(q)] * D) * sizeof(float);
    cr[size_t(q)] = to[size_t(q)].size() * size_t(D) * sizeof(float);
  }
  std::vector<float> back(size_t(T * k * D));
  DSI_RETURN_IF_ERROR(comm.all_to_all_v(out.data(), cs, back.data(), cr, nullptr));
  y.assign(size_t(T * k * D), 0.0f);
  const float* b = back.data();
  for (int32_t q = 0; q < n; ++q)
    for (int64_t a : to[size_t(q)]) {
      std::memcpy(y.data() + a * D, b, size_t(D) * sizeof(float));
      b += D;
    }
  if (stats) {
    stats->pairs_sent += T * k;
    stats->pairs_served += served;
    stats->bytes_sent += int64_t(stotal) + int64_t(served * D) * int64_t(sizeof(float));
  }
  return Status::ok();
}

}  // namespace dsinfer::parallel
