// A fake "device sampling" runner for the CPU tests of asynchronous steps: it wraps the CPU runner (real logits of a
// small model) and implements the ModelRunner device-sampling API on the host with the reference Sampler. It checks
// what a GPU runner relies on: every kPendingToken input has a token_fills entry naming a row of the previous
// sampling (which it then takes from those sampled ids, as the device gather does), launched samplings are waited
// for in order, and no slot is handed to another sequence while a launched step that used it is unconsumed.
#pragma once
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "runner/model_runner.h"
#include "sampling/sampler.h"

namespace dsinfer::test {

class HostSamplingRunner final : public runner::ModelRunner {
 public:
  HostSamplingRunner(std::unique_ptr<runner::ModelRunner> inner, bool async) : inner_(std::move(inner)), async_(async) {}
  const io::ModelConfig& config() const override { return inner_->config(); }
  std::string name() const override { return "host-sampling(" + inner_->name() + ")"; }
  int32_t kv_elem_bytes() const override { return inner_->kv_elem_bytes(); }
  Status bind_state(const cache::StateLayout& l, int32_t slots, int32_t blocks, int64_t len) override {
    return inner_->bind_state(l, slots, blocks, len);
  }
  Status step(const scheduler::BatchPlan& plan, std::vector<float>& logits) override { return inner_->step(plan, logits); }
  runner::RunnerDiagnostics& diagnostics() override { return inner_->diagnostics(); }
  bool supports_device_sampling() const override { return true; }
  bool supports_async_steps() const override { return async_; }
  int64_t steps_with_fills = 0;  // plans that carried token_fills (the async path was taken)

  Status begin_sampled_step(const scheduler::BatchPlan& plan) override {
    if (!plan.token_fills.empty() && !async_) return Status::error("fake: token_fills without asynchronous steps");
    scheduler::BatchPlan p = plan;
    size_t f = 0;
    for (int32_t i = 0; i < p.num_tokens(); ++i) {
      if (p.token_ids[size_t(i)] != scheduler::kPendingToken) continue;
      if (f >= p.token_fills.size() || p.token_fills[f].token_index != i)
        return Status::errorf("fake: pending token {} has no fill", i);
      const int32_t row = p.token_fills[f++].sample_row;
      if (row < 0 || size_t(row) >= last_ids_.size()) return Status::errorf("fake: fill row {} of {}", row, last_ids_.size());
      const int32_t id = last_ids_[size_t(row)];
      p.token_ids[size_t(i)] = id >= 0 && id < config().vocab_size ? id : 0;
    }
    if (f != p.token_fills.size()) return Status::error("fake: a fill names a token that is not pending");
    if (!plan.token_fills.empty()) ++steps_with_fills;
    // Slot reuse: a slot of an unconsumed launched step may only be used by the same sequence.
    std::map<cache::SlotId, scheduler::SeqId> mine;
    for (const scheduler::SeqPlan& sp : p.seqs) {
      mine[sp.slot] = sp.seq_id;
      for (const auto& prev : unconsumed_slots_) {
        auto it = prev.find(sp.slot);
        if (it != prev.end() && it->second != sp.seq_id)
          return Status::errorf("fake: slot {} of sequence {} reused by {} while a step using it is in flight", sp.slot,
                                it->second, sp.seq_id);
      }
    }
    rows_.clear();
    for (const scheduler::SeqPlan& sp : p.seqs) {
      if (!sp.needs_logits) continue;
      Row r;
      r.params = sp.params;
      r.prompt = sp.prompt_tokens;
      r.output.assign(sp.output_tokens.begin(), sp.output_tokens.end());
      // The in-flight token is this step's last input (the device fills both from the same sampled id).
      if (!r.output.empty() && r.output.back() == scheduler::kPendingToken)
        r.output.back() = p.token_ids[size_t(sp.token_offset + sp.num_new_tokens - 1)];
      for (int32_t t : r.output)
        if (t < 0) return Status::error("fake: an output history holds a placeholder that is not the last token");
      r.rng = sp.rng;
      rows_.push_back(std::move(r));
    }
    DSI_RETURN_IF_ERROR(inner_->step(p, logits_));
    pending_slots_ = std::move(mine);
    return Status::ok();
  }

  Status sample_rows(const sampling::PackedRows& rows, std::vector<ops::SampleRowOut>& out) override {
    DSI_RETURN_IF_ERROR(launch_sample_rows(rows));
    return wait_sample_rows(out);
  }

  Status launch_sample_rows(const sampling::PackedRows& rows) override {
    if (launched_.size() >= 2) return Status::error("fake: more than two samplings outstanding");
    if (rows.rows.size() != rows_.size()) return Status::errorf("fake: {} packed rows for {} logits rows", rows.rows.size(), rows_.size());
    const int64_t V = config().vocab_size;
    std::vector<ops::SampleRowOut> res(rows_.size());
    last_ids_.assign(rows_.size(), -1);
    for (size_t j = 0; j < rows_.size(); ++j) {
      const ops::SampleRowDesc& d = rows.rows[j];
      sampling::SampleInput in;
      in.logits = std::span<const float>(logits_).subspan(size_t(d.logits_row) * size_t(V), size_t(V));
      if (d.mask_row >= 0)
        in.token_bitmask = std::span<const int32_t>(rows.mask_words).subspan(size_t(d.mask_row) * size_t(rows.words_per_row()),
                                                                           size_t(rows.words_per_row()));
      in.params = rows_[j].params;
      in.prompt_tokens = rows_[j].prompt;
      in.output_tokens = rows_[j].output;
      in.rng = rows_[j].rng;
      in.eos_token_id = config().eos_token_id;
      const sampling::SampleResult s = sampler_.sample(in);
      res[j].token = last_ids_[j] = s.token;
      res[j].logprob = s.logprob;
      res[j].num_top = int32_t(std::min<size_t>(s.top.size(), ops::kSampleMaxTop));
      for (int32_t k = 0; k < res[j].num_top; ++k) {
        res[j].top_token[k] = s.top[size_t(k)].token;
        res[j].top_logprob[k] = s.top[size_t(k)].logprob;
      }
    }
    launched_.push_back(std::move(res));
    unconsumed_slots_.push_back(std::move(pending_slots_));
    pending_slots_.clear();
    return Status::ok();
  }

  Status wait_sample_rows(std::vector<ops::SampleRowOut>& out) override {
    if (launched_.empty()) return Status::error("fake: wait_sample_rows with nothing launched");
    out = std::move(launched_.front());
    launched_.pop_front();
    unconsumed_slots_.pop_front();
    return Status::ok();
  }

 private:
  struct Row {
    const sampling::SamplingParams* params = nullptr;
    std::span<const int32_t> prompt;
    std::vector<int32_t> output;
    sampling::RngKey rng;
  };
  std::unique_ptr<runner::ModelRunner> inner_;
  bool async_;
  sampling::Sampler sampler_;
  std::vector<float> logits_;
  std::vector<Row> rows_;
  std::vector<int32_t> last_ids_;  // ids of the most recent launched sampling (what token_fills read)
  std::deque<std::vector<ops::SampleRowOut>> launched_;
  std::map<cache::SlotId, scheduler::SeqId> pending_slots_;
  std::deque<std::map<cache::SlotId, scheduler::SeqId>> unconsumed_slots_;
};

}  // namespace dsinfer::test
