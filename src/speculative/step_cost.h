// StepCostModel: the time of one verify step as a function of (sequences in the step, rows per sequence), measured
// on the device in hand (perf/step_profile.h times real steps through the ModelRunner at engine start-up and
// caches the table per model, GPU and numerics in a small text file), or the CPU backend's fallback, where a step's
// time is proportional to its tokens (compute-bound: a verify row costs what a decode row costs). Host-side only:
// fitting (medians, then made non-decreasing in both directions) and lookup (linear in the sequences between the
// profiled batch sizes, extrapolated beyond the largest along its last slope).
//
// The speculative scheduler (speculative/verify_plan.h) weighs the confidence head's acceptance estimates against
// these times; one model per engine, resolved once (engine/step_cost_setup.h).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dsinfer::speculative {

class StepCostModel {
 public:
  StepCostModel() = default;
  // From raw timings: samples[i * max_rows + (r - 1)] are the step times (ms, any number >= 1 each) of seqs[i]
  // sequences with r rows each. seqs ascending, >= 1, max_rows >= 1. Each cell is the median of its samples, then
  // the table is made non-decreasing along rows and along sequences (a step never gets cheaper with more work: a
  // dip is timing noise). Errors name the cell.
  // draft_samples (empty = none): per batch size, the times of one drafting round (propose) of that many
  // sequences; their medians, made non-decreasing, become the "draft" line.
  // host_row_samples (empty = none): times (ms) of the host's sampling of one verified logits row; their median is
  // the "host" entry.
  // plain_samples (empty = none): per batch size, the times of one plain decode step as the engine takes it without
  // speculation (sampled on the device, launched before the step before is read); their medians, made
  // non-decreasing, become the "plain" line.
  // round_samples (empty = none): per batch size, the times of one one-wait round as the engine runs it (the verify
  // step of max_rows rows launched without a download, then the drafter's acceptance and next proposal on the
  // device, one download, one host wait); their medians, made non-decreasing, become the "round" line.
  static Result<StepCostModel> fit(std::string key, std::vector<int64_t> seqs, int32_t max_rows,
                                   const std::vector<std::vector<double>>& samples,
                                   const std::vector<std::vector<double>>& draft_samples = {},
                                   const std::vector<double>& host_row_samples = {},
                                   const std::vector<std::vector<double>>& plain_samples = {},
                                   const std::vector<std::vector<double>>& round_samples = {});
  // The CPU fallback: time = n * rows (arbitrary unit; only ratios matter).
  static StepCostModel proportional(int64_t max_seqs, int32_t max_rows);

  // The text form: "dsinfer-step-cost 1", "key <key>", "rows <max_rows>", then one line per profiled batch size:
  // "seqs <n> <ms for 1 row> ... <ms for max_rows rows>"; optionally "draft <ms per round for each batch size>" (the
  // drafting time of a round, profiled with the verify steps; 0 without the line); optionally "host <ms>" (the
  // host's verification of one sampled logits row; 0 without the line); optionally "plain <ms per step for each
  // batch size>" (the engine's plain decode step; the one-row verify step without the line).
  std::string serialize() const;
  // Parses serialize()'s form; `where` names the source in errors (with the line number).
  static Result<StepCostModel> parse(std::string_view text, const std::string& where);

  const std::string& key() const { return key_; }
  int32_t max_rows() const { return max_rows_; }
  const std::vector<int64_t>& seqs() const { return seqs_; }
  bool empty() const { return seqs_.empty(); }
  // Step time of n >= 1 sequences with rows in [1, max_rows] each (rows above max_rows: the max_rows column scaled
  // by rows / max_rows).
  double step_ms(int64_t n, int32_t rows) const;
  bool has_draft_cost() const { return !draft_ms_.empty(); }
  // The drafting time of a round of n sequences (interpolated like step_ms), 0 without a "draft" line.
  double draft_ms(int64_t n) const;
  // The host's time to verify one logits row of a speculative step (a plain step samples on the device where it
  // can: no host time), 0 without a "host" line. A verify step samples one row per emitted token.
  double host_row_ms() const { return host_row_ms_; }
  // The engine's plain decode step of n sequences, what a step at rest costs (interpolated like step_ms): the
  // "plain" line, else step_ms(n, 1).
  bool has_plain_cost() const { return !plain_ms_.empty(); }
  double plain_ms(int64_t n) const;
  // The time of one speculative step of n sequences verifying `rows` rows each and emitting `tokens` (what a
  // drafting round costs, the draft of the next step included): the device's part, plus host_row_ms() per emitted
  // token (the host's work per token after the round's wait: outputs, detokenize, the scheduler's update, serial in
  // a round where a plain step's overlaps the device; the Sampler's row time, a lower bound: session 21). The
  // device's part: with a "round" line the measured one-wait round less the verify rows it does not run
  // (round(n) - step_ms(n, max_rows) + step_ms(n, rows), at least step_ms(n, rows)); without it the parts timed
  // apart, end to end: step_ms(n, rows) + draft_ms(n) (the two-wait round). A model without_round_host() adds no host
  // time to the measured round.
  bool has_round_cost() const { return !round_ms_.empty(); }
  double round_ms(int64_t n, int32_t rows, double tokens) const;
  // This model without its "round" line (the engine's rounds are two-wait: DSINFER_SPEC_ONE_WAIT=0).
  StepCostModel without_round() const;
  // This model with no host time in a measured one-wait round (SpeculativeConfig::drain_gate): the device verifies
  // the drafts there and the host samples no row, so host_row_ms() (the Sampler's row) is not its cost; the round
  // the profile measured holds its device wait, and the host's bookkeeping after it measured ~0.07 ms at 64
  // sequences (~4 % of that round, bench/NOTES.md session 48), within SpecGate::kMargin. Where the model has no
  // "round" line the parts keep host_row_ms().
  StepCostModel without_round_host() const;

 private:
  double cell(size_t i, int32_t rows) const { return ms_[i * size_t(max_rows_) + size_t(rows - 1)]; }
  // Linear in n between the profiled batch sizes (at(i) = the value at seqs_[i]), the last slope beyond them.
  template <typename At>
  double along_seqs(int64_t n, At at) const;
  static Status check(const StepCostModel& m, const std::string& where);

  std::string key_;
  std::vector<int64_t> seqs_;
  int32_t max_rows_ = 0;
  std::vector<double> ms_;  // [seqs_.size(), max_rows_]
  std::vector<double> draft_ms_;  // [seqs_.size()] or empty
  std::vector<double> plain_ms_;  // [seqs_.size()] or empty
  std::vector<double> round_ms_;  // [seqs_.size()] or empty
  double host_row_ms_ = 0.0;
  bool round_host_ = true;  // without_round_host
};

}  // namespace dsinfer::speculative
