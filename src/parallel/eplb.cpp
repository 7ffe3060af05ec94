// EPLB placement (see eplb.h): checks, the static and the greedy placements, load evaluation.
#include "parallel/eplb.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "ops/moe/expert_remap.h"

namespace dsinfer::parallel {

Status validate_eplb(int64_t experts, int32_t world, int32_t redundant, int64_t interval) {
  if (world < 2)
    return Status::errorf("--eplb balances the experts over several GPUs: it needs --gpus > 1 (found {})", world);
  if (experts < 1 || experts % world != 0)
    return Status::errorf("--eplb: {} routed experts cannot be split evenly over {} GPUs", experts, world);
  if (redundant < 0 || redundant % world != 0)
    return Status::errorf("--num-redundant-experts {} must be a multiple of --gpus {} (each GPU gets the same number "
                          "of extra expert slots)", redundant, world);
  if (int64_t(redundant) > experts * (world - 1))
    return Status::errorf("--num-redundant-experts {} is more than {} routed experts x ({} GPUs - 1): no expert "
                          "needs more replicas than there are GPUs", redundant, experts, world);
  if (interval < 1) return Status::errorf("--eplb-interval must be >= 1, found {}", interval);
  return Status::ok();
}

std::vector<int32_t> Placement::rank_slots(int32_t rank) const {
  const auto b = slot_expert.begin() + int64_t(rank) * slots_per_rank;
  return std::vector<int32_t>(b, b + slots_per_rank);
}

std::vector<int32_t> Placement::table() const {
  std::vector<int32_t> t(replica_offsets);
  t.insert(t.end(), replica_slots.begin(), replica_slots.end());
  return t;
}

Result<Placement> make_placement(std::vector<int32_t> slot_expert, int32_t experts, int32_t world) {
  if (experts < 1 || world < 1 || slot_expert.empty() || slot_expert.size() % size_t(world) != 0)
    return Status::errorf("eplb placement: {} slots cannot be split over {} ranks ({} experts)", slot_expert.size(),
                          world, experts);
  Placement p;
  p.experts = experts;
  p.world = world;
  p.slots_per_rank = int32_t(slot_expert.size() / size_t(world));
  p.replica_offsets.assign(size_t(experts) + 1, 0);
  for (size_t s = 0; s < slot_expert.size(); ++s) {
    const int32_t e = slot_expert[s];
    if (e < 0 || e >= experts) return Status::errorf("eplb placement: slot {} holds expert {} (of {})", s, e, experts);
    ++p.replica_offsets[size_t(e) + 1];
  }
  for (int32_t e = 0; e < experts; ++e) {
    if (p.replica_offsets[size_t(e) + 1] == 0) return Status::errorf("eplb placement: expert {} has no replica", e);
    p.replica_offsets[size_t(e) + 1] += p.replica_offsets[size_t(e)];
  }
  p.replica_slots.assign(slot_expert.size(), 0);
  std::vector<int32_t> next(p.replica_offsets.begin(), p.replica_offsets.end() - 1);
  for (size_t s = 0; s < slot_expert.size(); ++s) p.replica_slots[size_t(next[size_t(slot_expert[s])]++)] = int32_t(s);
  p.slot_expert = std::move(slot_expert);
  return p;
}

Placement static_placement(int32_t experts, int32_t world, int32_t redundant) {
  const int32_t per = experts / world, extra = redundant / world, S = per + extra;
  std::vector<int32_t> slots(size_t(world) * size_t(S));
  for (int32_t r = 0; r < world; ++r) {
    for (int32_t i = 0; i < per; ++i) slots[size_t(r * S + i)] = r * per + i;
    for (int32_t j = 0; j < extra; ++j) slots[size_t(r * S + per + j)] = (((r + 1) % world) * per + j) % experts;
  }
  return *make_placement(std::move(slots), experts, world);  // every expert has its home slot
}

namespace {

// Step 3: keep each expert a rank already held in its old local slot.
std::vector<int32_t> order_rank(std::vector<int32_t> experts, const std::vector<int32_t>* old) {
  std::sort(experts.begin(), experts.end());
  if (!old || old->size() != experts.size()) return experts;
  const size_t S = experts.size();
  std::vector<int32_t> out(S, -1);
  std::vector<bool> placed(S, false);
  for (size_t s = 0; s < S; ++s)
    for (size_t i = 0; i < S; ++i)
      if (!placed[i] && experts[i] == (*old)[s]) {
        out[s] = experts[i];
        placed[i] = true;
        break;
      }
  size_t free_slot = 0;
  for (size_t i = 0; i < S; ++i) {
    if (placed[i]) continue;
    while (out[free_slot] >= 0) ++free_slot;
    out[free_slot] = experts[i];
  }
  return out;
}

}  // namespace

Result<Placement> compute_placement(const std::vector<double>& load, int32_t world, int32_t redundant,
                                    const Placement* previous) {
  const int32_t E = int32_t(load.size());
  DSI_RETURN_IF_ERROR(validate_eplb(E, world, redundant, 1));
  for (double x : load)
    if (!std::isfinite(x) || x < 0) return Status::errorf("eplb: per-expert load {} is not finite and >= 0", x);
  const int32_t S = (E + redundant) / world;
  // 1. Replication: the redundant slots to the largest load per replica.
  std::vector<int32_t> reps(size_t(E), 1);
  for (int32_t i = 0; i < redundant; ++i) {
    int32_t best = -1;
    for (int32_t e = 0; e < E; ++e)
      if (reps[size_t(e)] < world &&
          (best < 0 || load[size_t(e)] / reps[size_t(e)] > load[size_t(best)] / reps[size_t(best)]))
        best = e;
    ++reps[size_t(best)];  // redundant <= E * (world - 1): some expert is below `world` replicas
  }
  // 2. Packing: heaviest replica first onto the lightest rank with room (not holding the expert if possible).
  struct Item {
    double w;
    int32_t e;
  };
  std::vector<Item> items;
  for (int32_t e = 0; e < E; ++e)
    for (int32_t j = 0; j < reps[size_t(e)]; ++j) items.push_back({load[size_t(e)] / reps[size_t(e)], e});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.w > b.w; });
  std::vector<double> rank_load(size_t(world), 0.0);
  std::vector<std::vector<int32_t>> held(static_cast<size_t>(world));
  for (const Item& it : items) {
    int32_t best = -1;
    bool best_new = false;
    for (int32_t r = 0; r < world; ++r) {
      const auto& h = held[size_t(r)];
      if (int32_t(h.size()) >= S) continue;
      const bool fresh = std::find(h.begin(), h.end(), it.e) == h.end();
      if (best < 0 || (fresh && !best_new) ||
          (fresh == best_new && rank_load[size_t(r)] < rank_load[size_t(best)])) {
        best = r;
        best_new = fresh;
      }
    }
    held[size_t(best)].push_back(it.e);  // world * S = E + redundant items: a rank with room always exists
    rank_load[size_t(best)] += it.w;
  }
  // 3. Slot order (stable against the previous placement).
  const bool same_shape = previous && previous->world == world && previous->slots_per_rank == S &&
                          previous->experts == E;
  std::vector<int32_t> slots;
  slots.reserve(size_t(world) * size_t(S));
  for (int32_t r = 0; r < world; ++r) {
    const std::vector<int32_t> old = same_shape ? previous->rank_slots(r) : std::vector<int32_t>{};
    const std::vector<int32_t> ordered = order_rank(held[size_t(r)], same_shape ? &old : nullptr);
    slots.insert(slots.end(), ordered.begin(), ordered.end());
  }
  return make_placement(std::move(slots), E, world);
}

std::vector<double> routed_rank_loads(const Placement& p, const int32_t* idx, int64_t tokens, int32_t topk) {
  std::vector<double> loads(size_t(p.world), 0.0);
  const std::vector<int32_t> table = p.table();
  for (int64_t i = 0; i < tokens * topk; ++i)
    for (int32_t r = 0; r < p.world; ++r)  // the remap's own replica choice (one definition)
      if (ops::remap_expert_eplb(idx[i], i / topk, table.data(), p.experts, r, p.slots_per_rank) >= 0) loads[size_t(r)] += 1;
  return loads;
}

std::vector<double> expected_rank_loads(const Placement& p, const std::vector<double>& load) {
  std::vector<double> loads(size_t(p.world), 0.0);
  for (size_t s = 0; s < p.slot_expert.size(); ++s) {
    const int32_t e = p.slot_expert[s];
    loads[s / size_t(p.slots_per_rank)] += load[size_t(e)] / p.replicas(e);
  }
  return loads;
}

double max_mean_ratio(const std::vector<double>& rank_loads) {
  if (rank_loads.empty()) return 1.0;
  const double sum = std::accumulate(rank_loads.begin(), rank_loads.end(), 0.0);
  if (sum <= 0) return 1.0;
  return *std::max_element(rank_loads.begin(), rank_loads.end()) / (sum / double(rank_loads.size()));
}

int32_t changed_slots(const Placement& before, const Placement& after, int32_t rank) {
  int32_t n = 0;
  for (int32_t s = 0; s < after.slots_per_rank; ++s) {
    const size_t p = size_t(rank) * size_t(after.slots_per_rank) + size_t(s);
    n += p >= before.slot_expert.size() || before.slot_expert[p] != after.slot_expert[p];
  }
  return n;
}

std::vector<int32_t> zipf_routing(int32_t experts, int64_t tokens, int32_t topk, double s, uint64_t perm_seed,
                                  uint64_t seed) {
  std::vector<int32_t> perm(size_t(std::max(experts, 0)));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 prng(perm_seed), rng(seed);
  std::shuffle(perm.begin(), perm.end(), prng);
  std::vector<double> w(perm.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0 / std::pow(double(i + 1), s);
  std::discrete_distribution<int32_t> pick(w.begin(), w.end());
  const int32_t k = std::min(topk, experts);
  std::vector<int32_t> idx;
  idx.reserve(size_t(tokens) * size_t(std::max(k, 0)));
  std::vector<int32_t> chosen;
  for (int64_t t = 0; t < tokens; ++t) {
    chosen.clear();
    while (int32_t(chosen.size()) < k) {  // k distinct experts (rejection: k <= experts)
      const int32_t e = perm[size_t(pick(rng))];
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    idx.insert(idx.end(), chosen.begin(), chosen.end());
  }
  return idx;
}

std::vector<double> expert_histogram(const std::vector<int32_t>& idx, int32_t experts) {
  std::vector<double> h(size_t(std::max(experts, 0)), 0.0);
  for (int32_t e : idx)
    if (e >= 0 && e < experts) h[size_t(e)] += 1;
  return h;
}

}  // namespace dsinfer::parallel
