// StepOutput (what the sampler hands the scheduler for one planned sequence) and SeqUpdate (what the scheduler
// did to it): plain data, beside batch_plan.h, so structured outputs and speculative decoding need no Scheduler.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/stop_checker.h"
#include "scheduler/batch_plan.h"

namespace dsinfer::scheduler {

// What the runner / sampler hands back for one SeqPlan with needs_logits.
struct StepOutput {
  int32_t plan_index = -1;                       // index into BatchPlan::seqs
  SeqId seq_id = 0;                              // must match seqs[plan_index].seq_id
  std::vector<sampling::SampleResult> samples;   // >= 1 tokens (several: accepted speculative tokens)
  std::vector<std::string> text;                 // optional, one detokenized delta per sample (stop strings)
};

// What happened to one sequence in update() (or abort()).
struct SeqUpdate {
  RequestId request_id = 0;
  SeqId seq_id = 0;
  uint32_t sample_index = 0;
  std::vector<int32_t> tokens;                   // appended this step
  std::vector<sampling::SampleResult> logprobs;  // per appended token when the request asked for logprobs
  std::string text;                              // released text (stop-string hold-back applied)
  bool finished = false;
  sampling::FinishReason finish_reason = sampling::FinishReason::None;
  int32_t stop_token = -1;
  std::string stop_string;
  bool request_finished = false;                 // this was the request's last live sequence
};

}  // namespace dsinfer::scheduler
