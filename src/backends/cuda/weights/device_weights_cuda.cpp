// Weight upload of the CUDA backend (see device_weights.h): checkpoint tensors as stored (F16 and BF16 scales
// widened to fp32, vectors and kernel-read matrices converted to fp32 arrays), then every tensor bound to its slot
// by role.
#include "backends/cuda/weights/device_weights.h"

#include "backends/cuda/weights/dummy_weights_cuda.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "model/weights.h"

namespace dsinfer::backends {

using model::TensorKind;
using model::TensorRole;
using ops::cuda::DeviceWeight;
using ops::cuda::WeightFormat;

namespace {

// A checkpoint tensor on the device in its storage format.
Result<DevTensor> upload_tensor(const model::ResolvedTensor& r, const io::ModelConfig& cfg) {
  DevTensor t;
  const io::TensorView& v = *r.data;
  const model::TensorSpec& spec = r.spec;
  const char* name = spec.name.c_str();
  if (spec.kind == TensorKind::Vector || model::read_as_floats(spec.role)) {
    std::vector<float> host(size_t(spec.rows * spec.cols));
    io::convert_to_f32(v.dtype, v.data, spec.rows * spec.cols, host.data());
    DSI_RETURN_IF_ERROR(t.data.upload_bytes(host.data(), host.size() * 4, name));
    return t;
  }
  if (spec.kind == TensorKind::IndexTable) {
    std::vector<int32_t> host(size_t(v.numel()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = int32_t(v.int_at(int64_t(i)));
    DSI_RETURN_IF_ERROR(t.data.upload_bytes(host.data(), host.size() * 4, name));
    return t;
  }
  t.w.rows = spec.rows;
  t.w.cols = spec.cols;
  const void* src = v.data;
  std::vector<float> converted;
  switch (v.dtype) {
    case DType::F32: t.w.fmt = WeightFormat::F32; break;
    case DType::BF16: t.w.fmt = WeightFormat::BF16; break;
    case DType::F16:
      converted.resize(size_t(v.numel()));
      io::convert_to_f32(v.dtype, v.data, v.numel(), converted.data());
      src = converted.data();
      t.w.fmt = WeightFormat::F32;
      break;
    case DType::F8_E4M3: t.w.fmt = WeightFormat::FP8_BLOCK; break;
    default: t.w.fmt = WeightFormat::FP4_G32; break;  // I8 / U8 packed e2m1 (validated by resolve_weights)
  }
  DSI_RETURN_IF_ERROR(t.data.upload_bytes(src, ops::cuda::weight_data_bytes(t.w.fmt, t.w.rows, t.w.cols), name));
  t.w.data = t.data.data();
  if (r.scale) {
    const io::TensorView& s = *r.scale;
    std::vector<float> sf;
    const void* ssrc = s.data;
    t.w.scale_e8m0 = s.dtype == DType::F8_E8M0;
    if (s.dtype == DType::BF16) {
      sf.resize(size_t(s.numel()));
      io::convert_to_f32(s.dtype, s.data, s.numel(), sf.data());
      ssrc = sf.data();
    }
    t.w.block_n = cfg.fp8_block_n;
    t.w.block_k = cfg.fp8_block_k;
    const size_t sbytes =
        ops::cuda::weight_scale_bytes(t.w.fmt, t.w.rows, t.w.cols, t.w.scale_e8m0, t.w.block_n, t.w.block_k);
    DSI_RETURN_IF_ERROR(t.scale.upload_bytes(ssrc, sbytes, (spec.name + " scale").c_str()));
    t.w.scale = t.scale.data();
  }
  DSI_RETURN_IF_ERROR(ops::cuda::validate_weight(t.w, name));
  return t;
}

}  // namespace

ExpertSlots range_slots(int64_t layers, parallel::ExpertRange experts) {
  std::vector<int32_t> ids(size_t(experts.count()));
  for (int32_t i = 0; i < experts.count(); ++i) ids[size_t(i)] = experts.lo + i;
  return ExpertSlots(size_t(layers), ids);
}

Status DeviceWeights::load_checkpoint(const io::ModelConfig& cfg, const std::string& model_dir, ExpertSlots slots) {
  DSI_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(model_dir));
  ckpt_ = std::make_unique<io::Checkpoint>(std::move(ckpt));  // resolved views point into it: it stays alive
  auto resolved = model::resolve_weights(cfg, *ckpt_);
  if (!resolved) return resolved.status().with_context(model_dir);
  start(cfg, std::move(slots));
  for (const auto& r : *resolved) {
    fp32_storage_ &= r.spec.kind == TensorKind::IndexTable || r.data->dtype == DType::F32;
    if (r.spec.expert >= 0) {  // made only for the slots holding it (other ranks' experts are never read)
      DSI_RETURN_IF_ERROR(add_expert(cfg, {r.spec, 0, r.data, r.scale}, nullptr));
      continue;
    }
    DSI_ASSIGN_OR_RETURN(DevTensor t, upload_tensor(r, cfg));
    DSI_RETURN_IF_ERROR(add(r.spec, std::move(t)));
  }
  return finish(cfg);
}

Status DeviceWeights::generate_dummy(const io::ModelConfig& cfg, ExpertSlots slots, void* stream) {
  const std::vector<model::TensorSpec> specs = model::weight_specs(cfg);
  start(cfg, std::move(slots));
  fp32_storage_ = false;
  uint64_t seed = 1;
  for (const auto& s : specs) {
    const uint64_t sd = seed++;  // a tensor's seed does not depend on the rank: 1 and N GPUs hold the same weights
    if (s.expert >= 0) {
      DSI_RETURN_IF_ERROR(add_expert(cfg, {s, sd, nullptr, nullptr}, stream));
      continue;
    }
    DSI_ASSIGN_OR_RETURN(DevTensor t, make_dummy_tensor(s, cfg.n_routed_experts, sd, stream));
    DSI_RETURN_IF_ERROR(add(s, std::move(t)));
  }
  return finish(cfg);
}

void DeviceWeights::start(const io::ModelConfig& cfg, ExpertSlots slots) {
  slots_ = std::move(slots);
  slots_.resize(size_t(cfg.num_hidden_layers));
  num_experts_ = cfg.n_routed_experts;
  const size_t S = slots_.empty() ? 0 : slots_[0].size();
  tensors_.clear();
  sources_.assign(size_t(cfg.num_hidden_layers * num_experts_) * 3, ExpertSource{});
  expert_tensors_.clear();
  expert_tensors_.resize(size_t(cfg.num_hidden_layers) * S * 3);
  pointer_arrays_.clear();
  pointer_arrays_.resize(size_t(cfg.num_hidden_layers) * 3);
  layers_.assign(size_t(cfg.num_hidden_layers), DeviceLayer{});
  expert_views_.assign(size_t(cfg.num_hidden_layers), ExpertViews{});
  for (auto& v : expert_views_) {
    v.w1.resize(S);
    v.w3.resize(S);
    v.w2.resize(S);
  }
  embed_ = head_ = DeviceWeight{};
  final_norm_ = nullptr;
  hc_head_ = HcDevice{};
  bytes_ = 0;
  fp32_storage_ = true;
}

namespace {
int expert_role_index(TensorRole r) { return r == TensorRole::ExpertW1 ? 0 : r == TensorRole::ExpertW3 ? 1 : 2; }
}  // namespace

Result<DevTensor> DeviceWeights::make_expert(const io::ModelConfig& cfg, const ExpertSource& src, void* stream) const {
  if (src.data) return upload_tensor(model::ResolvedTensor{src.spec, src.data, src.scale}, cfg);
  return make_dummy_tensor(src.spec, cfg.n_routed_experts, src.seed, stream);
}

Status DeviceWeights::add_expert(const io::ModelConfig& cfg, ExpertSource src, void* stream) {
  const model::TensorSpec& s = src.spec;
  if (s.layer < 0 || size_t(s.layer) >= slots_.size() || s.expert >= num_experts_)
    return Status::errorf("cuda weights: routed expert tensor '{}' is out of range", s.name);
  const int role = expert_role_index(s.role);
  const std::vector<int32_t>& ids = slots_[size_t(s.layer)];
  for (size_t slot = 0; slot < ids.size(); ++slot) {
    if (ids[slot] != s.expert) continue;
    DSI_ASSIGN_OR_RETURN(DevTensor t, make_expert(cfg, src, stream));
    bytes_ += int64_t(t.data.bytes() + t.scale.bytes());
    ExpertViews& X = expert_views_[size_t(s.layer)];
    (role == 0 ? X.w1 : role == 1 ? X.w3 : X.w2)[slot] = t.w;
    expert_tensors_[(size_t(s.layer) * ids.size() + slot) * 3 + size_t(role)] = std::move(t);
  }
  sources_[size_t(s.layer * num_experts_ + s.expert) * 3 + size_t(role)] = std::move(src);
  return Status::ok();
}

Result<int32_t> DeviceWeights::reload_slots(const io::ModelConfig& cfg, int64_t layer, const std::vector<int32_t>& slots,
                                            void* stream) {
  if (layer < 0 || size_t(layer) >= slots_.size() || slots.size() != slots_[size_t(layer)].size())
    return Status::errorf("cuda weights: EPLB reload of layer {} with {} slots does not match", layer, slots.size());
  std::vector<int32_t>& cur = slots_[size_t(layer)];
  ExpertViews& X = expert_views_[size_t(layer)];
  int32_t reloaded = 0;
  for (size_t slot = 0; slot < slots.size(); ++slot) {
    const int32_t e = slots[slot];
    if (e == cur[slot]) continue;
    if (e < 0 || e >= num_experts_) return Status::errorf("cuda weights: EPLB slot {} names expert {}", slot, e);
    for (int role = 0; role < 3; ++role) {
      const ExpertSource& src = sources_[size_t(layer * num_experts_ + e) * 3 + size_t(role)];
      DSI_ASSIGN_OR_RETURN(DevTensor t, make_expert(cfg, src, stream));
      DevTensor& old = expert_tensors_[(size_t(layer) * slots.size() + slot) * 3 + size_t(role)];
      bytes_ += int64_t(t.data.bytes() + t.scale.bytes()) - int64_t(old.data.bytes() + old.scale.bytes());
      (role == 0 ? X.w1 : role == 1 ? X.w3 : X.w2)[slot] = t.w;
      old = std::move(t);  // frees the previous expert's memory (the stream is idle: nothing reads it)
    }
    cur[slot] = e;
    ++reloaded;
  }
  if (reloaded > 0) DSI_RETURN_IF_ERROR(expert_arrays(layer));
  return reloaded;
}

Status DeviceWeights::add(const model::TensorSpec& spec, DevTensor t) {
  bytes_ += int64_t(t.data.bytes() + t.scale.bytes());
  DSI_RETURN_IF_ERROR(bind(spec, t));
  tensors_.push_back(std::move(t));  // moving keeps the device memory (and the bound pointers) in place
  return Status::ok();
}

Status DeviceWeights::bind(const model::TensorSpec& s, const DevTensor& t) {
  using R = TensorRole;
  const float* f = t.data.as<const float>();
  const DeviceWeight& w = t.w;
  if (s.layer < 0) {
    switch (s.role) {
      case R::Embed: embed_ = w; return Status::ok();
      case R::Head: head_ = w; return Status::ok();
      case R::FinalNorm: final_norm_ = f; return Status::ok();
      case R::HcHeadFn: hc_head_.fn = f; return Status::ok();
      case R::HcHeadBase: hc_head_.base = f; return Status::ok();
      case R::HcHeadScale: hc_head_.scale = f; return Status::ok();
      default: break;
    }
  } else if (size_t(s.layer) < layers_.size()) {
    DeviceLayer& L = layers_[size_t(s.layer)];
    switch (s.role) {
      case R::AttnNorm: L.attn_norm = f; return Status::ok();
      case R::FfnNorm: L.ffn_norm = f; return Status::ok();
      case R::HcAttnFn: L.hc_attn.fn = f; return Status::ok();
      case R::HcAttnBase: L.hc_attn.base = f; return Status::ok();
      case R::HcAttnScale: L.hc_attn.scale = f; return Status::ok();
      case R::HcFfnFn: L.hc_ffn.fn = f; return Status::ok();
      case R::HcFfnBase: L.hc_ffn.base = f; return Status::ok();
      case R::HcFfnScale: L.hc_ffn.scale = f; return Status::ok();
      case R::AttnSink: L.sink = f; return Status::ok();
      case R::WqA: L.wq_a = w; return Status::ok();
      case R::QNorm: L.q_norm = f; return Status::ok();
      case R::WqB: L.wq_b = w; return Status::ok();
      case R::Wkv: L.wkv = w; return Status::ok();
      case R::KvNorm: L.kv_norm = f; return Status::ok();
      case R::WoA: L.wo_a = w; return Status::ok();
      case R::WoB: L.wo_b = w; return Status::ok();
      case R::CompWkv: L.comp_wkv = w; return Status::ok();
      case R::CompWgate: L.comp_wgate = w; return Status::ok();
      case R::CompApe: L.comp_ape = f; return Status::ok();
      case R::CompNorm: L.comp_norm = f; return Status::ok();
      case R::IdxCompWkv: L.idx_wkv = w; return Status::ok();
      case R::IdxCompWgate: L.idx_wgate = w; return Status::ok();
      case R::IdxCompApe: L.idx_ape = f; return Status::ok();
      case R::IdxCompNorm: L.idx_norm = f; return Status::ok();
      case R::IdxWqB: L.idx_wq_b = w; return Status::ok();
      case R::IdxWeightsProj: L.idx_wproj = w; return Status::ok();
      case R::Gate: L.gate = w; return Status::ok();
      case R::GateBias: L.gate_bias = f; return Status::ok();
      case R::Tid2Eid: L.tid2eid = t.data.as<const int32_t>(); return Status::ok();
      case R::SharedW1: L.shared.w1 = w; L.has_shared = true; return Status::ok();
      case R::SharedW3: L.shared.w3 = w; return Status::ok();
      case R::SharedW2: L.shared.w2 = w; return Status::ok();
      default: break;
    }
  }
  return Status::errorf("cuda weights: tensor '{}' (role {}, layer {}) has no slot", s.name,
                        model::tensor_role_name(s.role), s.layer);
}

// Device array of the per-slot data pointers followed by the scale pointers (moe_cuda's layout), in `buf`.
Status DeviceWeights::expert_array(const std::vector<DeviceWeight>& views, int64_t layer, TensorRole role,
                                   cuda::DeviceBuffer<uint8_t>& buf, ops::cuda::DeviceExpertWeights& out) {
  const size_t E = views.size();
  std::vector<const void*> ptrs(2 * E);
  for (size_t e = 0; e < E; ++e) {
    const DeviceWeight& dw = views[e];
    if (!dw.data)
      return Status::errorf("cuda weights: layer {} expert {} has no {}", layer, slots_[size_t(layer)][e],
                            model::tensor_role_name(role));
    ptrs[e] = dw.data;
    ptrs[E + e] = dw.scale;
    if (e == 0) out = {dw.fmt, dw.rows, dw.cols, dw.scale_e8m0, dw.block_n, dw.block_k, nullptr, nullptr};
    else if (dw.fmt != out.fmt)
      return Status::errorf("layers.{}.ffn.experts.{}.{}: experts of one layer must share a format", layer,
                            slots_[size_t(layer)][e],
                            role == TensorRole::ExpertW1 ? "w1" : role == TensorRole::ExpertW3 ? "w3" : "w2");
  }
  DSI_RETURN_IF_ERROR(buf.upload_bytes(ptrs.data(), ptrs.size() * sizeof(void*), "expert pointers"));
  out.data = buf.as<const void* const>();
  out.scale = out.fmt == WeightFormat::F32 || out.fmt == WeightFormat::BF16 ? nullptr : out.data + E;
  return Status::ok();
}

// The layer's three pointer arrays (rewritten in place by an EPLB reload: same size, same buffer).
Status DeviceWeights::expert_arrays(int64_t layer) {
  DeviceLayer& L = layers_[size_t(layer)];
  const ExpertViews& X = expert_views_[size_t(layer)];
  const size_t b = size_t(layer) * 3;
  DSI_RETURN_IF_ERROR(expert_array(X.w1, layer, TensorRole::ExpertW1, pointer_arrays_[b], L.experts.w1));
  DSI_RETURN_IF_ERROR(expert_array(X.w3, layer, TensorRole::ExpertW3, pointer_arrays_[b + 1], L.experts.w3));
  return expert_array(X.w2, layer, TensorRole::ExpertW2, pointer_arrays_[b + 2], L.experts.w2);
}

Status DeviceWeights::finish(const io::ModelConfig& cfg) {
  if (cfg.tie_word_embeddings) head_ = embed_;
  auto missing = [](int64_t layer, TensorRole role) {
    return Status::errorf("cuda weights: layer {} has no {} tensor", layer, model::tensor_role_name(role));
  };
  if (!embed_.data) return missing(-1, TensorRole::Embed);
  if (!head_.data) return missing(-1, TensorRole::Head);
  if (!final_norm_ || !hc_head_.fn || !hc_head_.base || !hc_head_.scale) return missing(-1, TensorRole::HcHeadFn);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    DeviceLayer& L = layers_[size_t(l)];
    const io::AttnType at = cfg.layer_types[size_t(l)];
    if (!L.attn_norm || !L.ffn_norm || !L.sink || !L.q_norm || !L.kv_norm) return missing(l, TensorRole::AttnNorm);
    if (!L.hc_attn.fn || !L.hc_attn.base || !L.hc_attn.scale) return missing(l, TensorRole::HcAttnFn);
    if (!L.hc_ffn.fn || !L.hc_ffn.base || !L.hc_ffn.scale) return missing(l, TensorRole::HcFfnFn);
    if (!L.wq_a.data || !L.wq_b.data || !L.wkv.data || !L.wo_a.data || !L.wo_b.data) return missing(l, TensorRole::WqA);
    if (at != io::AttnType::Sliding && (!L.comp_wkv.data || !L.comp_wgate.data || !L.comp_ape || !L.comp_norm))
      return missing(l, TensorRole::CompWkv);
    if (at == io::AttnType::CSA &&
        (!L.idx_wq_b.data || !L.idx_wproj.data || !L.idx_wkv.data || !L.idx_wgate.data || !L.idx_ape || !L.idx_norm))
      return missing(l, TensorRole::IdxCompWkv);
    if (!L.gate.data) return missing(l, TensorRole::Gate);
    const bool hash = cfg.mlp_layer_types[size_t(l)] == io::MlpType::HashMoE;
    if (hash ? !L.tid2eid : !L.gate_bias) return missing(l, hash ? TensorRole::Tid2Eid : TensorRole::GateBias);
    if (cfg.n_shared_experts > 0 && (!L.shared.w1.data || !L.shared.w3.data || !L.shared.w2.data))
      return missing(l, TensorRole::SharedW1);
    L.experts.experts = int64_t(slots_[size_t(l)].size());  // local slot ids (ops/moe/expert_remap.h)
    L.experts.dim = cfg.hidden_size;
    L.experts.inter = cfg.moe_intermediate_size;
    DSI_RETURN_IF_ERROR(expert_arrays(l));  // the views stay: an EPLB reload rewrites them
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
