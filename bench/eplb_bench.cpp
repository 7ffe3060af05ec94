// EPLB's balance on a skewed synthetic routing (docs/multi_gpu.md "EPLB"): V4-Flash's 256 routed experts, top-6,
// expert popularity Zipf(s) over a random permutation of the experts. The placement is computed from the loads of
// one batch of tokens (the "measured" interval) and evaluated on another batch from the same distribution, with
// the remap's own replica choice (token index modulo the replica count). Prints, per GPU count N, redundant slots
// R and skew s, the max / mean per-rank load (1 = perfect balance) of the static split and of EPLB, and the share
// of a rank's slots a rebalance from the static placement reloads. The ratio bounds the MoE step time: every rank
// waits for the busiest one at the all-reduce. Host only; usage: dsinfer_eplb_bench [tokens 4096].
#include <cstdio>
#include <cstdlib>

#include "parallel/eplb.h"

using namespace dsinfer::parallel;

int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int32_t E = 256, k = 6;
  std::printf("EPLB on Zipf-skewed routing: %d experts, top-%d, %lld tokens (placed on one batch, measured on another)\n",
              E, k, static_cast<long long>(T));
  std::printf("%4s %4s %5s %16s %14s %14s %10s\n", "N", "R", "zipf", "static max/mean", "eplb max/mean", "1st reload", "next");
  for (double s : {0.6, 1.0, 1.2}) {
    const std::vector<int32_t> train = zipf_routing(E, T, k, s, 7, 1), test = zipf_routing(E, T, k, s, 7, 2);
    const std::vector<double> load = expert_histogram(train, E);
    for (int32_t N : {2, 4, 8, 16}) {
      for (int32_t R : {0, N, 32}) {
        const Placement st = static_placement(E, N, R);
        auto p = compute_placement(load, N, R, &st);
        if (!p.is_ok()) {
          std::fprintf(stderr, "%s\n", p.status().message().c_str());
          return 1;
        }
        auto next = compute_placement(expert_histogram(test, E), N, R, &*p);
        if (!next.is_ok()) return 1;
        int64_t changed = 0, changed_next = 0;
        for (int32_t r = 0; r < N; ++r) changed += changed_slots(st, *p, r), changed_next += changed_slots(*p, *next, r);
        const double slots = double(int64_t(N) * p->slots_per_rank);
        std::printf("%4d %4d %5.1f %16.3f %14.3f %13.0f%% %9.0f%%\n", N, R, s,
                    max_mean_ratio(routed_rank_loads(st, test.data(), T, k)),
                    max_mean_ratio(routed_rank_loads(*p, test.data(), T, k)), 100.0 * double(changed) / slots,
                    100.0 * double(changed_next) / slots);
      }
    }
  }
  return 0;
}
