// See tensor_reader.h.
#include "model/tensor_reader.h"

#include <algorithm>
#include <cmath>

#include "io/quant.h"

namespace dsinfer::model {

using io::TensorView;

namespace {

// Index of the first NaN or infinity among the first n values of a float tensor (F32 / BF16 / F16, or F8_E8M0
// scales, whose 0xFF byte is NaN), or -1. Decoded in chunks: no copy of the tensor.
int64_t first_nonfinite(const TensorView& t, int64_t n) {
  if (t.dtype == DType::F8_E8M0) {
    for (int64_t i = 0; i < n; ++i)
      if (t.data[i] == 0xFF) return i;
    return -1;
  }
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16) return -1;
  constexpr int64_t kChunk = 4096;
  float buf[kChunk];
  const size_t esize = dtype_size(t.dtype);
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t m = std::min(kChunk, n - b);
    io::convert_to_f32(t.dtype, t.data + size_t(b) * esize, m, buf);
    for (int64_t i = 0; i < m; ++i)
      if (!std::isfinite(buf[i])) return b + i;
  }
  return -1;
}

}  // namespace

void TensorReader::check_finite(const TensorView* t, int64_t n) {
  if (const int64_t i = first_nonfinite(*t, n); i >= 0)
    error(fmt::format("tensor '{}' ({}): element {} is not a finite number (NaN or infinity); biases, norms and "
                      "scales must be finite", t->name, t->file, i));
}

TensorReader::TensorReader(const io::Checkpoint& ck, const std::function<std::string(const std::string&)>& rename) {
  for (const auto& [name, t] : ck.tensors()) {
    const std::string n = rename ? rename(name) : name;
    if (n.empty()) continue;
    if (auto it = by_name_.find(n); it != by_name_.end())
      error(fmt::format("tensors '{}' and '{}' both map to '{}'", it->second->name, name, n));
    by_name_[n] = &t;
  }
}

const TensorView* TensorReader::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView* TensorReader::take(const std::string& name) {
  used_.insert(name);
  const TensorView* t = find(name);
  if (!t) error(fmt::format("missing tensor '{}'", name));
  return t;
}

const TensorView* TensorReader::scale_for(const std::string& weight, const std::vector<int64_t>& want) {
  const std::string sname = weight.substr(0, weight.size() - (weight.ends_with(".weight") ? 7 : 0)) + ".scale";
  const TensorView* s = take(sname);
  if (!s) return nullptr;
  if ((s->dtype != DType::F8_E8M0 && s->dtype != DType::F32 && s->dtype != DType::BF16) || s->shape != want) {
    error(fmt::format("tensor '{}' ({}): expected F8_E8M0 or F32 scales {}, found {} {}", sname, s->file,
                      io::shape_str(want), dtype_name(s->dtype), io::shape_str(s->shape)));
    return nullptr;
  }
  check_finite(s, s->numel());  // one scale per block: cheap
  return s;
}

void TensorReader::shape_error(const std::string& name, const TensorView* t, const std::vector<int64_t>& want) {
  error(fmt::format("tensor '{}' ({}): expected shape {}, found {} {}", name, t->file, io::shape_str(want),
                    dtype_name(t->dtype), io::shape_str(t->shape)));
}

TensorReader::Weight TensorReader::weight(const std::string& name, int64_t rows, int64_t cols,
                                          std::pair<int64_t, int64_t> fp8_block, std::vector<float>* dst) {
  Weight w;
  const TensorView* t = take(name);
  if (!t) return w;
  const std::vector<int64_t> logical{rows, cols};
  // Vectors are stored 1-D: [n] is the logical [1, n].
  const bool shape_ok = t->shape == logical || (rows == 1 && t->shape == std::vector<int64_t>{cols});
  auto out = [&]() -> float* {
    if (!dst) return nullptr;
    dst->assign(size_t(rows * cols), 0.0f);
    return dst->data();
  };
  switch (t->dtype) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
      if (!shape_ok) {
        shape_error(name, t, rows == 1 ? std::vector<int64_t>{cols} : logical);
        return w;
      }
      if (rows == 1) check_finite(t, cols);  // vectors: biases, norm weights (cheap to check)
      if (float* d = out()) io::convert_to_f32(t->dtype, t->data, rows * cols, d);
      w.data = t;
      return w;
    case DType::F8_E4M3: {
      if (!shape_ok) {
        shape_error(name, t, rows == 1 ? std::vector<int64_t>{cols} : logical);
        return w;
      }
      const auto [bn, bk] = fp8_block;
      w.scale = scale_for(name, {(rows + bn - 1) / bn, (cols + bk - 1) / bk});
      if (!w.scale) return w;
      if (float* d = out()) io::dequant_fp8_block(t->data, rows, cols, w.scale->data, w.scale->dtype, bn, bk, d);
      w.data = t;
      return w;
    }
    case DType::I8:
    case DType::U8: {
      const std::vector<int64_t> packed{rows, cols / 2};
      if (cols % 32 || t->shape != packed) {
        error(fmt::format("tensor '{}' ({}): FP4 e2m1 storage of logical {} needs packed shape {} with in % 32 == 0, "
                          "found {} {}", name, t->file, io::shape_str(logical), io::shape_str(packed),
                          dtype_name(t->dtype), io::shape_str(t->shape)));
        return w;
      }
      w.scale = scale_for(name, {rows, cols / 32});
      if (!w.scale) return w;
      if (float* d = out()) io::dequant_fp4_e2m1(t->data, rows, cols, w.scale->data, w.scale->dtype, 32, d);
      w.data = t;
      return w;
    }
    default:
      error(fmt::format("tensor '{}' ({}): dtype {} is not a weight format (expected F32, BF16, F16, F8_E4M3 or "
                        "packed FP4 I8)", name, t->file, dtype_name(t->dtype)));
      return w;
  }
}

std::vector<std::pair<std::string, const TensorView*>> TensorReader::unused() const {
  std::vector<std::pair<std::string, const TensorView*>> out;
  for (const auto& [n, t] : by_name_)
    if (!used_.count(n)) out.emplace_back(n, t);
  return out;
}

Status TensorReader::finish(const std::string& what) const {
  if (errors_.empty()) return Status::ok();
  std::string msg = fmt::format("{} does not match config.json ({} problem{}):", what, errors_.size(),
                                errors_.size() > 1 ? "s" : "");
  for (size_t i = 0; i < errors_.size() && i < 12; ++i) msg += "\n  " + errors_[i];
  if (errors_.size() > 12) msg += fmt::format("\n  ... and {} more", errors_.size() - 12);
  return Status::error(msg);
}

}  // namespace dsinfer::model
