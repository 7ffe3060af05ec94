// Expert dispatch bookkeeping (see dispatch_plan.h).
#include "parallel/dispatch_plan.h"

namespace dsinfer::parallel {

Result<DispatchPlan> plan_dispatch(std::span<const int32_t> idx, int64_t topk, int64_t experts, int32_t world) {
  if (world < 1 || experts < world || experts % world != 0)
    return Status::errorf("expert dispatch: {} experts cannot be split over {} ranks", experts, world);
  if (topk < 1 || int64_t(idx.size()) % topk != 0)
    return Status::errorf("expert dispatch: {} expert ids are not whole rows of top-k {}", idx.size(), topk);
  const int64_t per = experts / world, n = int64_t(idx.size());
  DispatchPlan p;
  p.send_count.assign(size_t(world), 0);
  for (int64_t a = 0; a < n; ++a) {
    const int32_t e = idx[size_t(a)];
    if (e < 0 || e >= experts)
      return Status::errorf("expert dispatch: token {} slot {} routes to expert {} outside [0, {})", a / topk,
                            a % topk, e, experts);
    ++p.send_count[size_t(e / per)];
  }
  // Start of each destination's run, then every pair placed in (token, slot) order.
  std::vector<int64_t> next(size_t(world), 0);
  for (int32_t q = 1; q < world; ++q) next[size_t(q)] = next[size_t(q - 1)] + p.send_count[size_t(q - 1)];
  p.send_token.resize(size_t(n));
  p.send_expert.resize(size_t(n));
  p.pos_of.resize(size_t(n));
  for (int64_t a = 0; a < n; ++a) {
    const int32_t e = idx[size_t(a)];
    const int64_t q = e / per, at = next[size_t(q)]++;
    p.send_token[size_t(at)] = int32_t(a / topk);
    p.send_expert[size_t(at)] = int32_t(e - q * per);
    p.pos_of[size_t(a)] = int32_t(at);
  }
  return p;
}

}  // namespace dsinfer::parallel
