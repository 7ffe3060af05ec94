// Checkpoint tensors read by name with every problem collected and reported together, each naming the tensor, its
// file and expected vs found: the one reader behind the DeepSeek-V4 (weights.cpp), V4.1 (weights_v41.cpp) and
// drafter (speculative/draft_weights.cpp) loaders.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"

namespace dsinfer::model {

class TensorReader {
 public:
  TensorReader() = default;  // no checkpoint: every read is "missing"
  // The checkpoint's tensors under the names `rename` gives them (an empty name leaves a tensor out; no rename:
  // their own names). Two tensors under one name are a problem.
  explicit TensorReader(const io::Checkpoint& ck,
                        const std::function<std::string(const std::string&)>& rename = nullptr);

  const io::TensorView* find(const std::string& name) const;  // no bookkeeping; null when absent
  const io::TensorView* take(const std::string& name);        // marks it read; absent: "missing tensor" problem

  // A weight of logical shape [rows, cols] in any storage format: F32 / BF16 / F16 ([rows, cols]; a vector,
  // rows == 1, also [cols]), F8_E4M3 with `<name minus .weight>.scale` F8_E8M0 / F32 / BF16 of shape
  // [ceil(rows / bn), ceil(cols / bk)] for fp8_block = {bn, bk}, or packed FP4 e2m1 (I8 / U8 [rows, cols / 2],
  // cols % 32 == 0) with a scale per 32 ([rows, cols / 32]). Everything is checked first; then, when dst is given,
  // dst is resized to rows * cols and the weight decoded to fp32 (so a corrupt size in config.json is a problem
  // naming the tensor, not an allocation failure). data is null when the tensor is absent or invalid.
  struct Weight {
    const io::TensorView* data = nullptr;
    const io::TensorView* scale = nullptr;
  };
  Weight weight(const std::string& name, int64_t rows, int64_t cols, std::pair<int64_t, int64_t> fp8_block,
                std::vector<float>* dst);
  // The scale tensor of `weight` (its name minus ".weight", plus ".scale"), checked against `want`.
  const io::TensorView* scale_for(const std::string& weight, const std::vector<int64_t>& want);

  void error(std::string problem) { errors_.push_back(std::move(problem)); }
  // Vectors (rows == 1: biases, norm weights) and block scales are checked for NaN / infinity (a problem naming
  // the tensor); matrices are not (too large to scan at load).
  // Tensors never taken, by name.
  std::vector<std::pair<std::string, const io::TensorView*>> unused() const;
  // "{what} does not match config.json (N problems):" with the first 12, or ok when there are none.
  Status finish(const std::string& what) const;

 private:
  void shape_error(const std::string& name, const io::TensorView* t, const std::vector<int64_t>& want);
  // A problem naming the tensor (its checkpoint name) when one of its first n values is NaN or infinite.
  void check_finite(const io::TensorView* t, int64_t n);

  std::map<std::string, const io::TensorView*> by_name_;
  std::set<std::string> used_;
  std::vector<std::string> errors_;
};

}  // namespace dsinfer::model
