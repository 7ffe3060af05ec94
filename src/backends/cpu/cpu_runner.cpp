// CpuRunner (see cpu_runner.h).
#include "backends/cpu/cpu_runner.h"

#include <cstring>

namespace dsinfer::backends {

Status CpuRunner::bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t) {
  if (layout.kv_elem_bytes != 4) return Status::error("cpu runner: state layout must use fp32 rows");
  layout_ = layout;
  slots_.assign(size_t(num_slots) * size_t(layout.slot_bytes / 4), 0.0f);
  blocks_.assign(size_t(num_blocks) * size_t(layout.block_bytes / 4), 0.0f);
  num_slots_ = num_slots;
  num_blocks_ = num_blocks;
  return Status::ok();
}

Status CpuRunner::bind_snapshots(int32_t num_snapshots) {
  if (num_snapshots < 0) return Status::errorf("cpu runner: {} snapshots", num_snapshots);
  snapshots_.assign(size_t(num_snapshots) * size_t(layout_.slot_bytes / 4), 0.0f);
  num_snapshots_ = num_snapshots;
  return Status::ok();
}

Status CpuRunner::bind_host_blocks(int32_t num_host_blocks) {
  if (num_host_blocks < 0) return Status::errorf("cpu runner: {} host blocks", num_host_blocks);
  // A second pool of the same host memory: exercises the host tier's logic exactly as the CUDA runner does.
  host_blocks_.assign(size_t(num_host_blocks) * size_t(layout_.block_bytes / 4), 0.0f);
  num_host_blocks_ = num_host_blocks;
  return Status::ok();
}

cache::StateMemory CpuRunner::state_memory() {
  auto bytes = [](std::vector<float>& v) { return reinterpret_cast<uint8_t*>(v.data()); };
  return cache::StateMemory{bytes(slots_), bytes(blocks_), bytes(snapshots_), bytes(host_blocks_),
                            num_slots_, num_blocks_, num_snapshots_, num_host_blocks_,
                            layout_.slot_bytes, layout_.block_bytes};
}

Status CpuRunner::copy_state(std::span<const cache::StateCopy> copies) {
  return cache::copy_on_host(copies, state_memory(), "cpu runner");
}

Status CpuRunner::read_state(std::span<const cache::StateRegion> regions, std::span<uint8_t> out) {
  return cache::regions_on_host(regions, state_memory(), out.data(), out.size(), cache::CopyRun::Dir::kToHost,
                                "cpu runner");
}

Status CpuRunner::write_state(std::span<const cache::StateRegion> regions, std::span<const uint8_t> in) {
  // kToDevice only reads the buffer.
  return cache::regions_on_host(regions, state_memory(), const_cast<uint8_t*>(in.data()), in.size(),
                                cache::CopyRun::Dir::kToDevice, "cpu runner");
}

Status CpuRunner::step(const scheduler::BatchPlan& plan, std::vector<float>& logits) {
  // The reference forward returns, per sequence, logits of every token (all_logits) or of its last one. A
  // sequence gets all_logits when the plan asks for any token other than its last.
  const int64_t T = plan.num_tokens();
  std::vector<int32_t> seq_of(static_cast<size_t>(T));
  for (size_t i = 0; i < plan.seqs.size(); ++i)
    for (int32_t k = 0; k < plan.seqs[i].num_new_tokens; ++k) seq_of[size_t(plan.seqs[i].token_offset + k)] = int32_t(i);
  std::vector<bool> all(plan.seqs.size(), false);
  for (int32_t t : plan.logits_token_index) {
    if (t < 0 || t >= T) return Status::errorf("cpu runner: logits row for token {} of a {}-token step", t, T);
    const scheduler::SeqPlan& s = plan.seqs[size_t(seq_of[size_t(t)])];
    if (t != s.token_offset + s.num_new_tokens - 1) all[size_t(seq_of[size_t(t)])] = true;
  }
  chunks_.clear();
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduler::SeqPlan& s = plan.seqs[i];
    chunks_.push_back({s.slot, s.start_pos, s.block_table,
                       std::span<const int32_t>(plan.token_ids.data() + s.token_offset, size_t(s.num_new_tokens)), all[i]});
  }
  const model::StatePool pool{&layout_, slots_.data(), blocks_.data()};
  if (!capture_layers_.empty())
    hidden_.assign(size_t(T) * capture_layers_.size() * size_t(model_->config().hc_mult * model_->config().hidden_size), 0.0f);
  DSI_RETURN_IF_ERROR(model_->forward(pool, chunks_, out_));
  // Row of the forward's output holding token t.
  std::vector<int64_t> out_row(static_cast<size_t>(T), -1);
  int64_t row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduler::SeqPlan& s = plan.seqs[i];
    if (all[i]) {
      for (int32_t k = 0; k < s.num_new_tokens; ++k) out_row[size_t(s.token_offset + k)] = row++;
    } else {
      out_row[size_t(s.token_offset + s.num_new_tokens - 1)] = row++;
    }
  }
  const int64_t V = model_->config().vocab_size;
  logits.assign(size_t(plan.num_logits()) * size_t(V), 0.0f);
  for (size_t r = 0; r < plan.logits_token_index.size(); ++r)
    std::memcpy(logits.data() + r * size_t(V), out_.data() + size_t(out_row[size_t(plan.logits_token_index[r])]) * size_t(V),
                size_t(V) * 4);
  return Status::ok();
}

Status CpuRunner::set_hidden_capture(std::vector<int64_t> layers) {
  for (int64_t l : layers)
    if (l < 0 || l >= model_->config().num_hidden_layers)
      return Status::errorf("cpu runner: hidden-state capture of layer {} outside [0, {})", l, model_->config().num_hidden_layers);
  capture_layers_ = std::move(layers);
  if (capture_layers_.empty()) {
    model_->set_tap(nullptr);
    return Status::ok();
  }
  // The forward's "residual" tap is X [T, hc * D] after each layer; copy the captured layers interleaved.
  model_->set_tap([this](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols) {
    if (name != "residual") return;
    const size_t m = capture_layers_.size();
    for (size_t i = 0; i < m; ++i)
      if (capture_layers_[i] == layer)
        for (int64_t t = 0; t < rows; ++t)
          std::memcpy(hidden_.data() + (size_t(t) * m + i) * size_t(cols), data + t * cols, size_t(cols) * 4);
  });
  return Status::ok();
}

// RunnerOptions::batch_invariant is a no-op here: the reference forward computes every row on its own in a fixed
// order, so its results never depend on the batch.
Result<std::unique_ptr<runner::ModelRunner>> create_cpu_runner(const runner::RunnerOptions& opts) {
  if (opts.load_format != runner::LoadFormat::kAuto) return Status::error("dummy weights are only supported by the cuda backend");
  DSI_ASSIGN_OR_RETURN(auto m, load_cpu_model(opts.model_dir, opts.numerics));
  return std::unique_ptr<runner::ModelRunner>(new CpuRunner(std::move(m)));
}

}  // namespace dsinfer::backends
