// Shared by the scheduler tests (test_scheduler.cpp, test_async_scheduler.cpp, test_spec_scheduler.cpp): the small
// two-layer model (one sliding, one CSA layer with ratio 4) whose state layout they schedule against.
#pragma once
#include <cstdint>

#include "io/config.h"

namespace dsinfer::test {

inline io::ModelConfig scheduler_test_model(int64_t vocab) {
  io::ModelConfig c;
  c.head_dim = 32;
  c.index_head_dim = 16;
  c.sliding_window = 8;
  c.layer_types = {io::AttnType::Sliding, io::AttnType::CSA};
  c.compress_ratios = {0, 4};
  c.num_hidden_layers = 2;
  c.vocab_size = vocab;
  return c;
}

}  // namespace dsinfer::test
