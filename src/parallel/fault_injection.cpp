// Fault injection specs (see fault_injection.h).
#include "parallel/fault_injection.h"

#include <new>
#include <vector>

namespace dsinfer::parallel {

Status FaultInjection::fire(int64_t k) const {
  if (at == At::kAlloc) throw std::bad_alloc();
  if (at == At::kLoad) return Status::error("injected fault while loading");
  return Status::errorf("injected fault in step {}", k);
}

Result<FaultInjection> parse_fault_injection(const std::string& spec, int32_t world, bool process_per_rank) {
  FaultInjection f;
  if (spec.empty()) return f;
  std::vector<std::string> parts;
  size_t b = 0;
  for (size_t i = 0; i <= spec.size(); ++i)
    if (i == spec.size() || spec[i] == ':') {
      parts.push_back(spec.substr(b, i - b));
      b = i + 1;
    }
  auto bad = [&] {
    return Status::errorf("--inject-fault '{}': expected RANK:load, RANK:step:K, RANK:alloc:K or RANK:plan:K with "
                          "RANK < {}", spec, world);
  };
  auto num = [](const std::string& s, int64_t& out) {
    if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::stoll(s);
    return true;
  };
  int64_t rank = 0;
  if (parts.size() < 2 || !num(parts[0], rank) || rank >= world) return bad();
  f.rank = int32_t(rank);
  if (parts[1] == "load" && parts.size() == 2) {
    f.at = FaultInjection::At::kLoad;
  } else if ((parts[1] == "step" || parts[1] == "alloc" || parts[1] == "plan") && parts.size() == 3 &&
             num(parts[2], f.step)) {
    f.at = parts[1] == "step"    ? FaultInjection::At::kStep
           : parts[1] == "alloc" ? FaultInjection::At::kAlloc
                                 : FaultInjection::At::kPlan;
  } else {
    return bad();
  }
  if (f.at == FaultInjection::At::kPlan && !process_per_rank)
    return Status::errorf("--inject-fault '{}': a plan fault needs one process per rank (torchrun variables, cpu "
                          "backend), where each step's plan is checked across the processes", spec);
  return f;
}

}  // namespace dsinfer::parallel
