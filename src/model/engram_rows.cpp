// EngramRows (see engram_rows.h).
#include "model/engram_rows.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/dtypes.h"
#include "io/quant.h"

namespace dsinfer::model {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Result<EngramPlacement> parse_engram_placement(const std::string& name) {
  if (name == "device") return EngramPlacement::kDevice;
  if (name == "sharded") return EngramPlacement::kSharded;
  if (name == "host") return EngramPlacement::kHost;
  return Status::errorf("unknown Engram placement '{}' (expected device, sharded or host)", name);
}

const char* engram_placement_name(EngramPlacement p) {
  switch (p) {
    case EngramPlacement::kSharded: return "sharded";
    case EngramPlacement::kHost: return "host";
    case EngramPlacement::kDevice: break;
  }
  return "device";
}

Status check_engram_placement(const io::ModelConfig& cfg, EngramPlacement p, const std::string& model_dir) {
  const bool tables = cfg.is_v41() && !cfg.v41.engram_layer_ids.empty();
  if (p == EngramPlacement::kDevice || tables) return Status::ok();
  return Status::errorf("{}: --engram-placement {}: the model has no Engram tables", model_dir, engram_placement_name(p));
}

EngramRows::EngramRows(std::vector<Mat> tables) : tables_(std::move(tables)) {
  for (const Mat& t : tables_) table_rows_.push_back(t.rows);
}

EngramRows::EngramRows(std::shared_ptr<const io::Checkpoint> ckpt, std::vector<StoredTensorV41> tables)
    : placement_(EngramPlacement::kHost), ckpt_(std::move(ckpt)), stored_(std::move(tables)) {
  for (const StoredTensorV41& t : stored_) table_rows_.push_back(t.spec.rows);
  staged_.resize(stored_.size());
}

EngramRows::~EngramRows() {
  if (pending_.valid()) pending_.wait();
}

int64_t EngramRows::layers() const { return int64_t(table_rows_.size()); }

int64_t EngramRows::hd() const {
  if (!stored_.empty()) return stored_[0].spec.cols;
  return tables_.empty() ? 0 : tables_[0].cols;
}

Status EngramRows::check_id(int64_t e, int64_t id) const {
  if (id < 0 || id >= table_rows_[size_t(e)])
    return Status::errorf("Engram layer {}: row {} is outside its table of {} rows", e, id, table_rows_[size_t(e)]);
  return Status::ok();
}

Status EngramRows::shard(EngramShard s) {
  if (placement_ != EngramPlacement::kDevice)
    return Status::errorf("Engram tables already placed ({}); only full tables can be sharded", engram_placement_name(placement_));
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world || !s.gather)
    return Status::errorf("Engram shard: rank {} of {} without a gather", s.rank, s.world);
  const int64_t w = s.world, r = s.rank;
  for (Mat& t : tables_) {
    Mat local;
    local.cols = t.cols;
    local.rows = t.rows > r ? (t.rows - r + w - 1) / w : 0;
    local.data.resize(size_t(local.rows * local.cols));
    for (int64_t i = 0; i < local.rows; ++i)
      std::copy_n(t.p() + (i * w + r) * t.cols, t.cols, local.data.data() + i * t.cols);
    t = std::move(local);
  }
  shard_ = std::move(s);
  placement_ = EngramPlacement::kSharded;
  return Status::ok();
}

double EngramRows::bytes() const {
  double b = 0;
  for (const Mat& t : tables_) b += double(t.data.size()) * sizeof(float);
  for (const StoredTensorV41& t : stored_) b += double(t.data->nbytes) + (t.scale ? double(t.scale->nbytes) : 0.0);
  return b;
}

Status EngramRows::fetch(std::span<const int64_t> hashes, int64_t T, int64_t cols) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t L = layers(), n = hd();
  for (int64_t e = 0; e < L; ++e) {
    const StoredTensorV41& t = stored_[size_t(e)];
    std::vector<float>& out = staged_[size_t(e)];
    out.resize(size_t(T * cols * n));
    const size_t elem = dtype_size(t.data->dtype);
    const int64_t groups = (n + 31) / 32;
    for (int64_t i = 0; i < T * cols; ++i) {
      const int64_t id = hashes[size_t((i / cols * L + e) * cols + i % cols)];
      DSI_RETURN_IF_ERROR(check_id(e, id));
      float* dst = out.data() + i * n;
      const uint8_t* src = t.data->data + size_t(id * n) * elem;
      if (t.data->dtype == DType::F8_E4M3)
        io::dequant_fp8_row32(src, 1, n, t.scale->data + size_t(id * groups) * dtype_size(t.scale->dtype), t.scale->dtype, dst);
      else
        io::convert_to_f32(t.data->dtype, src, n, dst);
    }
  }
  fetch_ms_ = ms_since(t0);
  return Status::ok();
}

void EngramRows::prefetch(std::span<const int64_t> hashes, int64_t T, int64_t cols) {
  if (placement_ != EngramPlacement::kHost) return;
  if (pending_.valid()) (void)pending_.get();  // a step that ended early (an error) left its fetch running
  ids_.assign(hashes.begin(), hashes.end());    // the worker reads its own copy: the step may end first
  pending_ = std::async(std::launch::async, [this, T, cols] { return fetch(ids_, T, cols); });
}

Status EngramRows::rows(int64_t e, std::span<const int64_t> hashes, int64_t T, int64_t cols, std::vector<float>& out) {
  const int64_t L = layers(), n = hd();
  if (e < 0 || e >= L) return Status::errorf("Engram layer {} of {}", e, L);
  if (placement_ == EngramPlacement::kHost) {
    if (pending_.valid()) {
      const auto t0 = std::chrono::steady_clock::now();
      const Status st = pending_.get();
      wait_ms_ = ms_since(t0);
      DSI_RETURN_IF_ERROR(st);
    }
    if (int64_t(staged_[size_t(e)].size()) != T * cols * n) return Status::error("Engram rows: no fetch for this step");
    out = staged_[size_t(e)];
    return Status::ok();
  }
  std::vector<int64_t> ids(size_t(T * cols));
  for (int64_t i = 0; i < T * cols; ++i) {
    ids[size_t(i)] = hashes[size_t((i / cols * L + e) * cols + i % cols)];
    DSI_RETURN_IF_ERROR(check_id(e, ids[size_t(i)]));
  }
  out.resize(ids.size() * size_t(n));
  const Mat& t = tables_[size_t(e)];
  if (placement_ == EngramPlacement::kDevice) {
    for (size_t i = 0; i < ids.size(); ++i) std::copy_n(t.p() + ids[i] * n, n, out.data() + i * size_t(n));
    return Status::ok();
  }
  const int64_t w = shard_.world, r = shard_.rank;
  const EngramServe serve = [&t, w, r, n, e](std::span<const int64_t> want, float* dst) -> Status {
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i] < 0 || want[i] % w != r || want[i] / w >= t.rows)
        return Status::errorf("Engram layer {}: rank {} was asked for row {}, which it does not hold", e, r, want[i]);
      std::copy_n(t.p() + (want[i] / w) * n, n, dst + i * size_t(n));
    }
    return Status::ok();
  };
  return shard_.gather(ids, n, serve, out.data());
}

}  // namespace dsinfer::model
