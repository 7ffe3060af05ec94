// CpuRunner (see cpu_runner.h) and the backend factory.
#include "runtime/cpu_runner.h"

#include <cstring>

#include "runtime/cuda_runner.h"

namespace dsinfer::runtime {

Status CpuRunner::bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks) {
  if (layout.kv_elem_bytes != 4) return Status::error("cpu runner: state layout must use fp32 rows");
  layout_ = layout;
  slots_.assign(size_t(num_slots) * size_t(layout.slot_bytes / 4), 0.0f);
  blocks_.assign(size_t(num_blocks) * size_t(layout.block_bytes / 4), 0.0f);
  return Status::ok();
}

Status CpuRunner::step(const scheduler::BatchPlan& plan, std::vector<float>& logits) {
  // The reference forward returns logits for the last token of every sequence that needs them; sequences
  // without logits (mid-prompt prefill chunks) still run.
  chunks_.clear();
  for (const scheduler::SeqPlan& s : plan.seqs)
    chunks_.push_back({s.slot, s.start_pos, s.block_table,
                       std::span<const int32_t>(plan.token_ids.data() + s.token_offset, size_t(s.num_new_tokens)), false});
  const model::StatePool pool{&layout_, slots_.data(), blocks_.data()};
  DSI_RETURN_IF_ERROR(model_->forward(pool, chunks_, out_));
  const int64_t V = model_->config().vocab_size;
  logits.assign(size_t(plan.num_logits()) * size_t(V), 0.0f);
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduler::SeqPlan& s = plan.seqs[i];
    if (s.needs_logits) std::memcpy(logits.data() + size_t(s.logits_row) * size_t(V), out_.data() + i * size_t(V), size_t(V) * 4);
  }
  return Status::ok();
}

Result<std::unique_ptr<ModelRunner>> create_runner(const RunnerOptions& opts) {
  if (opts.backend == "cuda") return create_cuda_runner(opts);
  if (opts.backend != "cpu") return Status::errorf("unknown backend '{}' (expected cpu or cuda)", opts.backend);
  if (opts.load_format != "auto")
    return Status::errorf("--load-format {} is only supported by the cuda backend", opts.load_format);
  DSI_ASSIGN_OR_RETURN(model::Numerics num, model::Numerics::from_name(opts.numerics));
  DSI_ASSIGN_OR_RETURN(auto m, model::DeepseekV4Cpu::load(opts.model_dir, num));
  return std::unique_ptr<ModelRunner>(new CpuRunner(std::move(m)));
}

}  // namespace dsinfer::runtime
