// Upload of a DeepSeek-V4.1 checkpoint for the CUDA runner (see device_weights_v41.h): every tensor that
// model::resolve_weights_v41 validated, in its storage format, copied from the memory-mapped shard straight to the
// device in file order (shard by shard, each file read front to back), then bound to its DeviceLayerV41 slot by
// its official name. Conversions on the host touch only what the kernels read as fp32 (vectors, the mHC mixes,
// a gate with gate_temp != 1, Engram q * k, a float Engram table, F16 or BF16 scales), in bounded chunks: no fp32
// copy of the model on the host.
#include "backends/cuda/weights/device_weights_v41.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "io/quant.h"
#include "model/weights_v41.h"

namespace dsinfer::backends {

using model::StoredTensorV41;
using ops::cuda::DeviceWeight;
using ops::cuda::WeightFormat;

namespace {

constexpr int64_t kChunk = int64_t(1) << 20;  // floats converted per host chunk (4 MiB)

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// The slots of a layer that hold a DeviceWeight, by the official name's suffix after "layers.N.".
DeviceWeight* dense_slot(DeviceLayerV41& D, const std::string& key) {
  static const std::pair<const char*, DeviceWeight DeviceLayerV41::*> kSlots[] = {
      {"attn.wq_a.weight", &DeviceLayerV41::wq_a},
      {"attn.wq_b.weight", &DeviceLayerV41::wq_b},
      {"attn.wkv.weight", &DeviceLayerV41::wkv},
      {"attn.wo_a.weight", &DeviceLayerV41::wo_a},
      {"attn.wo_b.weight", &DeviceLayerV41::wo_b},
      {"attn.compressor.wkv.weight", &DeviceLayerV41::comp_wkv},
      {"attn.compressor.wgate.weight", &DeviceLayerV41::comp_wgate},
      {"attn.indexer.wk.weight", &DeviceLayerV41::idx_wk},
      {"attn.indexer.wq_b.weight", &DeviceLayerV41::idx_wq_b},
      {"attn.indexer.weights_proj.weight", &DeviceLayerV41::idx_wproj},
      {"ffn.gate.weight", &DeviceLayerV41::gate},
      {"engram.wkv.weight", &DeviceLayerV41::engram_wkv},
  };
  for (const auto& [k, m] : kSlots)
    if (key == k) return &(D.*m);
  if (key == "ffn.shared_experts.w1.weight") return &D.shared.w1;
  if (key == "ffn.shared_experts.w3.weight") return &D.shared.w3;
  if (key == "ffn.shared_experts.w2.weight") return &D.shared.w2;
  return nullptr;
}

// The slots of a layer that hold fp32 arrays (vectors and the mHC mixes).
const float** float_slot(DeviceLayerV41& D, const std::string& key) {
  static const std::pair<const char*, const float* DeviceLayerV41::*> kSlots[] = {
      {"attn_norm.weight", &DeviceLayerV41::attn_norm},
      {"ffn_norm.weight", &DeviceLayerV41::ffn_norm},
      {"attn.attn_sink", &DeviceLayerV41::sink},
      {"attn.q_norm.weight", &DeviceLayerV41::q_norm},
      {"attn.kv_norm.weight", &DeviceLayerV41::kv_norm},
      {"attn.compressor.norm.weight", &DeviceLayerV41::comp_norm},
      {"attn.indexer.k_norm.weight", &DeviceLayerV41::idx_k_norm},
      {"ffn.gate.bias", &DeviceLayerV41::gate_bias},
  };
  for (const auto& [k, m] : kSlots)
    if (key == k) return &(D.*m);
  for (auto [prefix, hc] : {std::pair{"hc_attn_", &D.hc_attn}, std::pair{"hc_ffn_", &D.hc_ffn}}) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string part = key.substr(std::string(prefix).size());
    if (part == "fn") return &hc->fn;
    if (part == "base") return &hc->base;
    if (part == "scale") return &hc->scale;
  }
  return nullptr;
}

}  // namespace

Result<uint8_t*> DeviceWeightsV41::take(size_t bytes, const char* what) {
  const size_t aligned = (bytes + 255) & ~size_t(255);
  if (arena_.dry) {  // sizes only: a distinct, non-null stand-in address
    const size_t at = arena_.used;
    arena_.used += aligned;
    return reinterpret_cast<uint8_t*>(uintptr_t(256) + at);
  }
  if (arena_.base) {
    if (arena_.used + aligned > arena_.size)
      return Status::errorf("cuda weights (V4.1): {} does not fit the arena sized by the dry run", what);
    uint8_t* p = arena_.base + arena_.used;
    arena_.used += aligned;
    return p;
  }
  cuda::DeviceBuffer<uint8_t> b;  // no arena (the dummy weights' pointer arrays): a buffer of its own
  DSI_RETURN_IF_ERROR(b.alloc(bytes, what));
  uint8_t* p = b.data();
  buffers_.push_back(std::move(b));  // moving keeps the device memory in place
  return p;
}

Status DeviceWeightsV41::put(void* dst, const void* src, size_t bytes) {
  if (arena_.dry || bytes == 0) return Status::ok();
  if (arena_.host) {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  return cuda::detail::copy_to_device(dst, src, bytes);
}

Result<const float*> DeviceWeightsV41::floats(const io::TensorView& v, int64_t n, double div, const char* what) {
  if (!is_float(v.dtype) || v.numel() != n)
    return Status::errorf("cuda weights (V4.1): {} ({}) is not {} float values", v.name, v.file, n);
  DSI_ASSIGN_OR_RETURN(uint8_t* d, take(size_t(n) * 4, what));
  bytes_ += n * 4;
  if (arena_.dry) return reinterpret_cast<const float*>(d);
  std::vector<float> host(size_t(std::min(n, kChunk)));
  const size_t esize = dtype_size(v.dtype);
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    io::convert_to_f32(v.dtype, v.data + size_t(at) * esize, m, host.data());
    if (div != 1.0)  // as the CPU loader divides (weights_v41.cpp)
      for (int64_t i = 0; i < m; ++i) host[size_t(i)] = float(double(host[size_t(i)]) / div);
    DSI_RETURN_IF_ERROR(put(d + at * 4, host.data(), size_t(m) * 4));
  }
  return reinterpret_cast<const float*>(d);
}

Result<DeviceWeight> DeviceWeightsV41::stored(const StoredTensorV41& t) {
  const io::TensorView& v = *t.data;
  DeviceWeight w;
  w.rows = t.spec.rows;
  w.cols = t.spec.cols;
  const char* what = t.spec.name.c_str();
  if (v.dtype == DType::F16) {  // no F16 kernels: widened, in chunks
    DSI_ASSIGN_OR_RETURN(const float* p, floats(v, w.rows * w.cols, 1.0, what));
    w.data = p;
    return w;
  }
  w.fmt = v.dtype == DType::F32 ? WeightFormat::F32
          : v.dtype == DType::BF16 ? WeightFormat::BF16
          : v.dtype == DType::F8_E4M3 ? WeightFormat::FP8_BLOCK
                                      : WeightFormat::FP4_G32;  // I8 / U8 packed e2m1 (validated by the reader)
  const size_t nbytes = ops::cuda::weight_data_bytes(w.fmt, w.rows, w.cols);
  DSI_ASSIGN_OR_RETURN(uint8_t* d, take(nbytes, what));
  DSI_RETURN_IF_ERROR(put(d, v.data, nbytes));
  w.data = d;
  bytes_ += int64_t(nbytes);
  if (t.scale) {
    const io::TensorView& s = *t.scale;
    w.block_n = w.fmt == WeightFormat::FP8_BLOCK ? t.block_n : 1;
    w.block_k = w.fmt == WeightFormat::FP8_BLOCK ? t.block_k : 32;
    w.scale_e8m0 = s.dtype == DType::F8_E8M0;
    if (s.dtype == DType::F8_E8M0 || s.dtype == DType::F32) {
      DSI_ASSIGN_OR_RETURN(uint8_t* d2, take(s.nbytes, what));
      DSI_RETURN_IF_ERROR(put(d2, s.data, s.nbytes));
      w.scale = d2;
      bytes_ += int64_t(s.nbytes);
    } else {  // BF16 scales: fp32 on the device
      DSI_ASSIGN_OR_RETURN(const float* p, floats(s, s.numel(), 1.0, what));
      w.scale = p;
    }
  }
  DSI_RETURN_IF_ERROR(ops::cuda::validate_weight(w, what));
  return w;
}

Status DeviceWeightsV41::pointer_array(const std::vector<const void*>& ptrs, const void* const*& out) {
  const size_t nbytes = ptrs.size() * sizeof(void*);
  DSI_ASSIGN_OR_RETURN(uint8_t* d, take(nbytes, "expert pointers"));
  DSI_RETURN_IF_ERROR(put(d, ptrs.data(), nbytes));
  out = reinterpret_cast<const void* const*>(d);
  bytes_ += int64_t(nbytes);
  return Status::ok();
}

// A routed expert's tensor: uploaded once per local slot holding it (none when this rank holds no slot of it).
Status DeviceWeightsV41::expert(const io::ModelConfig& cfg, const StoredTensorV41& t, const std::vector<int32_t>& held,
                                ExpertViews& X) {
  const std::string& n = t.spec.name;
  const int k = n.ends_with(".w1.weight") ? 0 : n.ends_with(".w3.weight") ? 1 : n.ends_with(".w2.weight") ? 2 : -1;
  if (k < 0 || t.spec.expert >= cfg.n_routed_experts) return Status::errorf("cuda weights (V4.1): no slot for '{}'", n);
  for (size_t i = 0; i < held.size(); ++i) {
    if (held[i] != t.spec.expert) continue;
    DSI_ASSIGN_OR_RETURN(X.w[k][i], stored(t));
  }
  return Status::ok();
}

// The layer's three expert pointer arrays (data pointers, then scale pointers: moe_cuda's layout).
Status DeviceWeightsV41::expert_arrays(const io::ModelConfig& cfg, int64_t l, const std::vector<int32_t>& held,
                                       const ExpertViews& X, DeviceLayerV41& D) {
  static const char* const kRole[] = {"w1", "w3", "w2"};
  ops::cuda::DeviceExpertWeights* views[3] = {&D.experts.w1, &D.experts.w3, &D.experts.w2};
  const size_t E = held.size();
  for (int k = 0; k < 3; ++k) {
    std::vector<const void*> ptrs(2 * E);
    for (size_t i = 0; i < E; ++i) {
      const DeviceWeight& w = X.w[k][i];
      if (!w.data)
        return Status::errorf("cuda weights (V4.1): layers.{}.ffn.experts.{}.{} was not uploaded", l, held[i],
                              kRole[k]);
      if (w.fmt != X.w[k][0].fmt)
        return Status::errorf("layers.{}.ffn.experts.{}.{}: experts of one layer must share a format", l, held[i],
                              kRole[k]);
      ptrs[i] = w.data;
      ptrs[E + i] = w.scale;
    }
    const DeviceWeight& w0 = X.w[k][0];
    ops::cuda::DeviceExpertWeights& x = *views[k];
    x = {w0.fmt, w0.rows, w0.cols, w0.scale_e8m0, w0.block_n, w0.block_k, nullptr, nullptr};
    DSI_RETURN_IF_ERROR(pointer_array(ptrs, x.data));
    x.scale = w0.fmt == WeightFormat::F32 || w0.fmt == WeightFormat::BF16 ? nullptr : x.data + E;
  }
  D.experts.experts = int64_t(E);
  D.experts.dim = cfg.hidden_size;
  D.experts.inter = cfg.moe_intermediate_size;
  return Status::ok();
}

// A float table (a fixture's): fp32 on the device. The release's FP8 rows with E8M0 scales per 32 channels: as
// stored. (FP8 rows with F32 or BF16 scales have no gather kernel.)
// tables_on_host: the same upload into the pinned host arena (take / put / floats work on arena_, so the two arenas
// trade places around it), its bytes counted as host memory.
Status DeviceWeightsV41::engram_table(const StoredTensorV41& t, DeviceLayerV41& D) {
  if (!tables_on_host_) return engram_table_on_device(t, D);
  std::swap(arena_, host_arena_);
  const int64_t before = bytes_;
  const Status st = engram_table_on_device(t, D);
  host_bytes_ += bytes_ - before;
  bytes_ = before;
  std::swap(arena_, host_arena_);
  return st;
}

Status DeviceWeightsV41::engram_table_on_device(const StoredTensorV41& t, DeviceLayerV41& D) {
  D.engram = true;
  D.engram_table.rows = t.spec.rows;
  D.engram_table.hd = t.spec.cols;
  if (is_float(t.data->dtype)) {
    DSI_ASSIGN_OR_RETURN(const float* p, floats(*t.data, t.spec.rows * t.spec.cols, 1.0, t.spec.name.c_str()));
    D.engram_table.data = p;
    return Status::ok();
  }
  const bool fp8_rows = t.data->dtype == DType::F8_E4M3 && t.scale && t.scale->dtype == DType::F8_E8M0 &&
                        t.block_n == 1 && t.block_k == 32;
  if (!fp8_rows)
    return Status::errorf("cuda weights (V4.1): Engram table '{}' ({}) must be float, or FP8 rows with F8_E8M0 "
                          "scales per 32 channels", t.spec.name, t.data->file);
  DSI_ASSIGN_OR_RETURN(const DeviceWeight w, stored(t));
  D.engram_table.data = w.data;
  D.engram_table.scale = static_cast<const uint8_t*>(w.scale);
  return Status::ok();
}

// Engram's q_weight * k_weight (only the product is used), formed on the host: [n * D] values.
Status DeviceWeightsV41::engram_qk(const io::TensorView& q, const io::TensorView& k, int64_t n, DeviceLayerV41& D) {
  if (!is_float(q.dtype) || !is_float(k.dtype) || q.numel() != n || k.numel() != n)
    return Status::errorf("cuda weights (V4.1): Engram q_weight / k_weight ({}) are not {} float values", q.file, n);
  DSI_ASSIGN_OR_RETURN(uint8_t* d, take(size_t(n) * 4, "engram q * k"));
  D.engram_qk = reinterpret_cast<const float*>(d);
  bytes_ += n * 4;
  if (arena_.dry) return Status::ok();
  std::vector<float> a(static_cast<size_t>(n));
  std::vector<float> b(a.size());
  io::convert_to_f32(q.dtype, q.data, n, a.data());
  io::convert_to_f32(k.dtype, k.data, n, b.data());
  for (size_t i = 0; i < a.size(); ++i) a[i] *= b[i];
  return put(d, a.data(), a.size() * 4);
}

// One tensor to its slot (top-level or layer), by its official name.
Status DeviceWeightsV41::bind(const io::ModelConfig& cfg, const StoredTensorV41& t, const ExpertSlots& slots,
                              std::vector<ExpertViews>& experts, std::map<int64_t, const io::TensorView*>& engram_q) {
  const std::string& n = t.spec.name;
  const int64_t count = t.spec.rows * t.spec.cols;
  if (n == "embed.weight" || n == "head.weight") {
    DSI_ASSIGN_OR_RETURN((n == "embed.weight" ? embed_ : head_), stored(t));
    return Status::ok();
  }
  if (n == "norm.weight") {
    DSI_ASSIGN_OR_RETURN(final_norm_, floats(*t.data, count, 1.0, "norm"));
    return Status::ok();
  }
  const int64_t l = t.spec.layer;
  const std::string prefix = fmt::format("layers.{}.", l);
  if (l < 0 || l >= int64_t(layers_.size()) || n.rfind(prefix, 0) != 0)
    return Status::errorf("cuda weights (V4.1): no slot for '{}'", n);
  const std::string key = n.substr(prefix.size());
  DeviceLayerV41& D = layers_[size_t(l)];
  if (t.spec.expert >= 0) return expert(cfg, t, slots[size_t(l)], experts[size_t(l)]);
  if (key == "ffn.gate.weight" && cfg.v41.gate_temp != 1.0) {  // the logits divided once, as the CPU loader does
    if (!is_float(t.data->dtype)) return Status::errorf("cuda weights (V4.1): '{}' must be a float tensor", n);
    DSI_ASSIGN_OR_RETURN(const float* p, floats(*t.data, count, cfg.v41.gate_temp, "gate"));
    D.gate = DeviceWeight{};
    D.gate.rows = t.spec.rows;
    D.gate.cols = t.spec.cols;
    D.gate.data = p;
    return Status::ok();
  }
  if (DeviceWeight* w = dense_slot(D, key)) {
    DSI_ASSIGN_OR_RETURN(*w, stored(t));
    return Status::ok();
  }
  if (const float** f = float_slot(D, key)) {
    DSI_ASSIGN_OR_RETURN(*f, floats(*t.data, count, 1.0, n.c_str()));
    return Status::ok();
  }
  if (key == "engram.embed.weight") return engram_table(t, D);
  if (key == "engram.q_weight" || key == "engram.k_weight") {
    auto [it, first] = engram_q.emplace(l, t.data);
    if (first) return Status::ok();  // the other factor comes later
    return engram_qk(*it->second, *t.data, count, D);
  }
  if (key == "ffn.gate.bias_vl") return Status::ok();  // vision routing: the GPU forward runs text only
  return Status::errorf("cuda weights (V4.1): no slot for '{}'", n);
}

// Every slot a layer's forward reads is filled (a missing one is an error naming it, never a null at run time).
Status DeviceWeightsV41::check_layer(const io::ModelConfig& cfg, int64_t l) const {
  const DeviceLayerV41& D = layers_[size_t(l)];
  auto missing = [&](const char* what) { return Status::errorf("cuda weights (V4.1): layer {} has no {}", l, what); };
  if (!D.attn_norm || !D.ffn_norm || !D.sink || !D.q_norm || !D.kv_norm) return missing("norm / sink vector");
  if (!D.hc_attn.fn || !D.hc_attn.base || !D.hc_attn.scale || !D.hc_ffn.fn || !D.hc_ffn.base || !D.hc_ffn.scale)
    return missing("mHC tensors");
  if (!D.wq_a.data || !D.wq_b.data || !D.wkv.data || !D.wo_a.data || !D.wo_b.data)
    return missing("attention projection");
  if (cfg.kv_source_of(l) == l &&
      (!D.comp_wkv.data || (cfg.ratio(l) > 1 && !D.comp_wgate.data) || !D.comp_norm || !D.idx_wk.data || !D.idx_k_norm))
    return missing("compressor / indexer key tensors");
  const auto& ids = cfg.v41.index_source_layer_ids;
  if (cfg.ratio(l) > 0 && std::find(ids.begin(), ids.end(), l) != ids.end() && (!D.idx_wq_b.data || !D.idx_wproj.data))
    return missing("indexer query tensors");
  if (!D.gate.data || !D.gate_bias) return missing("router");
  if (!D.shared.w1.data || !D.shared.w3.data || !D.shared.w2.data) return missing("shared expert");
  if (cfg.engram_index(l) >= 0 && (!D.engram || !D.engram_table.data || !D.engram_wkv.data || !D.engram_qk))
    return missing("Engram tensors");
  return Status::ok();
}

// Every tensor uploaded and bound (one pass; the dry run only lays the arena out).
Status DeviceWeightsV41::upload_all(const io::ModelConfig& cfg, const std::vector<StoredTensorV41>& tensors,
                                    const ExpertSlots& slots) {
  bytes_ = 0;
  fp32_storage_ = true;
  layers_.assign(size_t(cfg.num_hidden_layers), DeviceLayerV41{});
  embed_ = head_ = DeviceWeight{};
  final_norm_ = nullptr;
  std::vector<ExpertViews> experts(size_t(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    for (auto& w : experts[size_t(l)].w) w.assign(slots[size_t(l)].size(), DeviceWeight{});
  std::map<int64_t, const io::TensorView*> engram_q;
  for (const StoredTensorV41& t : tensors) {
    fp32_storage_ &= t.data->dtype == DType::F32;
    DSI_RETURN_IF_ERROR(bind(cfg, t, slots, experts, engram_q));
  }
  if (cfg.tie_word_embeddings) head_ = embed_;
  if (!embed_.data || !head_.data || !final_norm_)
    return Status::error("cuda weights (V4.1): embed, head or norm missing");
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    DSI_RETURN_IF_ERROR(check_layer(cfg, l));
    DSI_RETURN_IF_ERROR(expert_arrays(cfg, l, slots[size_t(l)], experts[size_t(l)], layers_[size_t(l)]));
  }
  return Status::ok();
}

Status DeviceWeightsV41::load_checkpoint(const io::ModelConfig& cfg, const std::string& model_dir,
                                         const ExpertSlots& slots, bool tables_on_host) {
  if (slots.size() < size_t(cfg.num_hidden_layers))
    return Status::error("cuda weights (V4.1): expert slots per layer missing");
  DSI_ASSIGN_OR_RETURN(io::Checkpoint ckpt, model::open_checkpoint_v41(model_dir));
  auto resolved = model::resolve_weights_v41(cfg, ckpt);
  if (!resolved.is_ok()) return resolved.status().with_context(model_dir);
  std::vector<StoredTensorV41>& tensors = resolved.value();
  // Shard by shard, each front to back: the mapping is read once, in order.
  std::sort(tensors.begin(), tensors.end(), [](const StoredTensorV41& a, const StoredTensorV41& b) {
    return a.data->file != b.data->file ? a.data->file < b.data->file : a.data->data < b.data->data;
  });
  // One device arena for the whole model, laid out by a dry run of the same upload (nothing read or copied): one
  // buffer per tensor costs the allocator's page rounding (+1.9 % at V4.1-Flash layer shapes, measured).
  buffers_.clear();
  host_buffers_.clear();
  tables_on_host_ = tables_on_host;
  arena_ = Arena{};
  arena_.dry = true;
  host_arena_ = Arena{nullptr, 0, 0, true, true};
  DSI_RETURN_IF_ERROR(upload_all(cfg, tensors, slots).with_context(model_dir));
  cuda::DeviceBuffer<uint8_t> arena;
  DSI_RETURN_IF_ERROR(arena.alloc(std::max<size_t>(arena_.used, 256), "V4.1 weights"));
  arena_ = Arena{arena.data(), 0, arena.bytes(), false};
  buffers_.push_back(std::move(arena));
  if (tables_on_host) {
    cuda::PinnedHostBuffer tables;
    DSI_RETURN_IF_ERROR(tables.alloc(std::max<size_t>(host_arena_.used, 256), "Engram tables (pinned host memory)"));
    host_arena_ = Arena{tables.data(), 0, tables.size(), false, true};
    host_buffers_.push_back(std::move(tables));
  }
  host_bytes_ = 0;
  const Status st = upload_all(cfg, tensors, slots).with_context(model_dir);
  arena_ = Arena{};  // later pointer arrays (none today) would get buffers of their own
  host_arena_ = Arena{};
  return st;
}

}  // namespace dsinfer::backends
