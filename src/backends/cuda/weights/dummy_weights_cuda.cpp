// Dummy weights (see dummy_weights_cuda.h): the fill of each table entry by role.
#include "backends/cuda/weights/dummy_weights_cuda.h"

#include <cmath>
#include <numeric>
#include <random>

#include "cuda/cuda_common.h"
#include "ops/dummy_fill/dummy_fill_cuda.h"
#include "parallel/parallel_plan.h"

namespace dsinfer::backends {

using model::TensorKind;
using model::TensorRole;
using ops::cuda::DummyFill;
using ops::cuda::DummySpec;
using ops::cuda::fill_dummy_cuda;
using ops::cuda::WeightFormat;

double dummy_weight_bytes(const std::vector<model::TensorSpec>& specs) {
  double need = 0;
  for (const auto& s : specs) need += parallel::storage_bytes(s);  // one sizing for every fit check
  return need;
}

namespace {

// tid2eid: each row a random choice of `cols` distinct experts.
Status dummy_hash_table(const model::TensorSpec& spec, int64_t experts, uint64_t seed, DevTensor& t) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> host(size_t(spec.rows * spec.cols));
  std::vector<int32_t> perm(static_cast<size_t>(experts));
  for (int64_t r = 0; r < spec.rows; ++r) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t k = 0; k < spec.cols; ++k) {
      std::swap(perm[size_t(k)], perm[size_t(k) + rng() % (perm.size() - size_t(k))]);
      host[size_t(r * spec.cols + k)] = perm[size_t(k)];
    }
  }
  return t.data.upload_bytes(host.data(), host.size() * 4, spec.name.c_str());
}

bool is_norm_weight(TensorRole r) {
  return r == TensorRole::FinalNorm || r == TensorRole::AttnNorm || r == TensorRole::FfnNorm || r == TensorRole::QNorm ||
         r == TensorRole::KvNorm || r == TensorRole::CompNorm || r == TensorRole::IdxCompNorm;
}
bool is_hc_scale(TensorRole r) {
  return r == TensorRole::HcHeadScale || r == TensorRole::HcAttnScale || r == TensorRole::HcFfnScale;
}

Status dummy_matrix(const model::TensorSpec& spec, uint64_t seed, void* stream, DevTensor& t) {
  const DType dt = model::official_storage(spec);
  t.w.rows = spec.rows;
  t.w.cols = spec.cols;
  t.w.fmt = dt == DType::F8_E4M3 ? WeightFormat::FP8_BLOCK
            : dt == DType::I8    ? WeightFormat::FP4_G32
            : dt == DType::F32   ? WeightFormat::F32
                                 : WeightFormat::BF16;
  const size_t bytes = ops::cuda::weight_data_bytes(t.w.fmt, t.w.rows, t.w.cols);
  DSI_RETURN_IF_ERROR(t.data.alloc(bytes, spec.name.c_str()));
  DummySpec ds;
  size_t count = bytes;
  // Weight magnitudes ~ 1/sqrt(fan_in) keep activations O(1) through many layers.
  const float std_w = 1.0f / std::sqrt(float(spec.cols));
  if (t.w.fmt == WeightFormat::FP8_BLOCK) ds.fill = DummyFill::Fp8Codes;
  else if (t.w.fmt == WeightFormat::FP4_G32) ds.fill = DummyFill::Fp4Codes;
  else {
    ds = {DummyFill::Uniform, t.w.fmt == WeightFormat::BF16, 0.0f, std_w * 1.7f};
    count = size_t(spec.rows * spec.cols);
  }
  DSI_RETURN_IF_ERROR(fill_dummy_cuda(t.data.data(), count, ds, seed, stream));
  t.w.data = t.data.data();
  if (t.w.fmt == WeightFormat::FP8_BLOCK || t.w.fmt == WeightFormat::FP4_G32) {
    const size_t sbytes = ops::cuda::weight_scale_bytes(t.w.fmt, t.w.rows, t.w.cols, true, 128, 128);
    DSI_RETURN_IF_ERROR(t.scale.alloc(sbytes, (spec.name + " scale").c_str()));
    // Codes are O(1) (fp8 |v| <= 1.875, fp4 |v| <= 6): the E8M0 scale brings them to ~1/sqrt(fan_in).
    const int e = int(std::lround(std::log2(double(std_w) / (t.w.fmt == WeightFormat::FP8_BLOCK ? 0.8 : 2.5))));
    DSI_RETURN_IF_ERROR(
        fill_dummy_cuda(t.scale.data(), sbytes, {DummyFill::Constant8, false, 0, 0, uint8_t(127 + e)}, seed, stream));
    t.w.scale = t.scale.data();
  }
  return Status::ok();
}

}  // namespace

Result<DevTensor> make_dummy_tensor(const model::TensorSpec& spec, int64_t experts, uint64_t seed, void* stream) {
  DevTensor t;
  if (spec.kind == TensorKind::IndexTable) {
    DSI_RETURN_IF_ERROR(dummy_hash_table(spec, experts, seed, t));
  } else if (spec.kind == TensorKind::Vector) {
    DSI_RETURN_IF_ERROR(t.data.alloc(size_t(spec.cols) * 4, spec.name.c_str()));
    DummySpec ds;  // norms ~1, mHC scales 1, everything else small around 0
    if (is_norm_weight(spec.role)) ds = {DummyFill::Uniform, false, 1.0f, 0.05f};
    else if (is_hc_scale(spec.role)) ds = {DummyFill::Uniform, false, 1.0f, 0.1f};
    else ds = {DummyFill::Uniform, false, 0.0f, 0.1f};
    DSI_RETURN_IF_ERROR(fill_dummy_cuda(t.data.data(), size_t(spec.cols), ds, seed, stream));
  } else {
    DSI_RETURN_IF_ERROR(dummy_matrix(spec, seed, stream, t));
  }
  return t;
}

}  // namespace dsinfer::backends
