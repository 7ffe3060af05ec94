// Multi-GPU plan (see parallel_plan.h): option checks, expert ranges, per-rank memory.
#include "parallel/parallel_plan.h"

#include <algorithm>
#include <cstdlib>

namespace dsinfer::parallel {

namespace {

bool parse_int(const std::string& s, long long* out) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end) return false;
  *out = v;
  return true;
}

}  // namespace

std::map<std::string, std::string> torchrun_env() {
  std::map<std::string, std::string> env;
  for (const char* k : {"WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
    if (const char* v = std::getenv(k)) env[k] = v;
  return env;
}

Result<int32_t> validate_parallel(const ParallelSizes& s, const std::map<std::string, std::string>& env,
                                  int32_t local_gpus) {
  if (s.gpus < 1) return Status::errorf("--gpus must be >= 1, found {}", s.gpus);
  if (s.data_parallel != 1 && s.data_parallel != s.gpus)
    return Status::errorf("--data-parallel-size {} must be 1 (attention and state replicated on every GPU) or --gpus "
                          "{} (DP attention: each GPU its own sequences and their state; docs/multi_gpu.md)",
                          s.data_parallel, s.gpus);
  if (s.tensor_parallel != 1)
    return Status::errorf("--tensor-parallel-size {}: tensor parallelism is not implemented yet (only 1; see "
                          "docs/multi_gpu.md)", s.tensor_parallel);
  const int32_t ep = s.expert_parallel == 0 ? s.gpus : s.expert_parallel;
  if (ep != s.gpus)
    return Status::errorf("--expert-parallel-size {} must equal --gpus {} (expert parallelism over every GPU is the "
                          "only layout implemented yet)", ep, s.gpus);
  if (auto it = env.find("WORLD_SIZE"); it != env.end()) {
    long long world = 0;
    if (!parse_int(it->second, &world) || world < 1)
      return Status::errorf("WORLD_SIZE='{}' is not a positive integer", it->second);
    if (local_gpus >= 0 && world > local_gpus)
      return Status::errorf("WORLD_SIZE={} is more than the {} GPUs of this node: multi-node inference is not "
                            "implemented yet (one process drives every GPU of one node; see docs/multi_gpu.md)",
                            world, local_gpus);
  }
  if (local_gpus >= 0 && s.gpus > local_gpus)
    return Status::errorf("--gpus {} but only {} CUDA device(s) are visible", s.gpus, local_gpus);
  return ep;
}

Layout layout_of(const ParallelSizes& s) {
  return s.gpus > 1 && s.data_parallel == s.gpus ? Layout::kDataParallel : Layout::kExpertParallel;
}

const char* layout_name(Layout l) {
  return l == Layout::kDataParallel ? "DP attention + expert parallel" : "expert parallel";
}

Result<ExpertRange> expert_range(int64_t experts, int32_t rank, int32_t world) {
  if (world < 1 || rank < 0 || rank >= world)
    return Status::errorf("expert parallelism: rank {} of {} is out of range", rank, world);
  if (experts < 1 || experts % world != 0)
    return Status::errorf("expert parallelism: {} routed experts cannot be split evenly over {} GPUs "
                          "(n_routed_experts % expert-parallel size must be 0)", experts, world);
  const int64_t per = experts / world;
  return ExpertRange{int32_t(rank * per), int32_t((rank + 1) * per)};
}

double storage_bytes(const model::TensorSpec& s) {
  const DType dt = model::official_storage(s);
  const double n = double(s.rows * s.cols);
  return s.kind != model::TensorKind::Matrix ? n * 4
         : dt == DType::I8                   ? n * (0.5 + 1.0 / 32)
         : dt == DType::F8_E4M3              ? n * (1 + 1.0 / 16384)
                                             : n * double(dtype_size(dt));
}

RankMemory rank_memory(const std::vector<model::TensorSpec>& specs, int32_t world, int32_t redundant,
                       double (*bytes)(const model::TensorSpec&)) {
  RankMemory m;
  double experts = 0;
  int64_t count = 0;  // routed experts per layer (ids 0 .. count-1)
  for (const model::TensorSpec& s : specs) {
    (s.expert >= 0 ? experts : m.dense_bytes) += bytes(s);
    count = std::max<int64_t>(count, s.expert + 1);
  }
  // Experts of one layer share a shape: a redundant slot costs one average expert.
  const double per_expert = count > 0 ? experts / double(count) : 0.0;
  m.expert_bytes = (experts + per_expert * double(std::max(redundant, 0))) / double(world < 1 ? 1 : world);
  return m;
}

Status check_rank_fits(const RankMemory& m, int32_t world, int32_t gpu, int64_t free_bytes, const std::string& gpu_name) {
  const double need = m.weight_bytes(), gib = double(1 << 30);
  if (need <= kWeightFraction * double(free_bytes)) return Status::ok();
  return Status::errorf("model needs {:.1f} GiB of weights per GPU on {} GPU(s) ({:.1f} GiB replicated + {:.1f} GiB "
                        "of routed experts) plus {:.0f}% headroom, but only {:.1f} GiB are free on GPU {} ('{}'); use "
                        "more GPUs (--gpus) or fewer layers (--layers / num_hidden_layers in config.json)",
                        need / gib, world, m.dense_bytes / gib, m.expert_bytes / gib, 100 * (1 - kWeightFraction),
                        double(free_bytes) / gib, gpu, gpu_name);
}

}  // namespace dsinfer::parallel
