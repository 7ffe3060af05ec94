// Parameters and kernel launchers behind engram_cuda.h (no CUDA types, no Status; validated by engram_cuda.cpp).
#pragma once
#include <cstdint>

#include "core/host_device.h"
#include "ops/step_cuda.h"

namespace dsinfer::ops::cuda {

// The n-gram hashing of all Engram layers (EngramHashLayout on the device) and where the slot keeps the history.
struct EngramHashCudaParams {
  int64_t max_ngram = 0, heads = 0, layers = 0;  // cols = (max_ngram - 1) * heads
  int64_t pad_id = 0;
  const int64_t* multipliers = nullptr;  // [layers, max_ngram]
  const int64_t* primes = nullptr;       // [layers, cols]
  const int64_t* offsets = nullptr;      // [layers, cols]
  const int32_t* token_map = nullptr;    // [vocab] token id -> compressed id (ids are checked on the host)
  float* slots = nullptr;                // slot pool base (the history is int32 rows inside each slot)
  int64_t slot_stride = 0;               // floats per slot
  int64_t ngram_offset = 0, ngram_rows = 0;  // history: floats from the slot base, rows (>= max_ngram)
  DSI_HD int64_t cols() const { return (max_ngram - 1) * heads; }
};

// One Engram layer's table: fp32 rows [rows, hd], or FP8 e4m3 rows with one E8M0 scale byte per 32 channels
// (scale [rows, hd / 32]). wrap: ids are taken modulo rows (dummy weights with a truncated table, benchmarks only).
struct EngramTableDevice {
  const void* data = nullptr;
  const uint8_t* scale = nullptr;  // null: fp32 table
  int64_t rows = 0, hd = 0;
  bool wrap = false;
};

namespace detail {
void launch_engram_hash(const StepDevice& st, const EngramHashCudaParams& p, int64_t* hashes, void* stream);
void launch_engram_history_write(const StepDevice& st, const EngramHashCudaParams& p, void* stream);
void launch_engram_gather(const int64_t* hashes, int64_t T, int64_t layers, int64_t layer, int64_t cols,
                          const EngramTableDevice& table, float* out, void* stream);
void launch_engram_gate(float* X, int64_t T, int64_t n, int64_t dim, const float* kv, const float* weight, float eps,
                        void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
