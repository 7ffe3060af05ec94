// Upload of DeepSeek-V4.1 weights for the CUDA runner (see device_weights_v41.h): every tensor of the CPU loader's
// fp32 WeightsV41 as an F32 device array, bound to its DeviceLayerV41 slot, with the routed experts' per-expert
// pointer arrays (moe_cuda's layout).
#include "backends/cuda/weights/device_weights_v41.h"

#include <algorithm>

namespace dsinfer::backends {

using ops::cuda::DeviceWeight;
using ops::cuda::WeightFormat;

Result<const float*> DeviceWeightsV41::vec(const std::vector<float>& v, const char* what) {
  if (v.empty()) return Status::errorf("cuda weights (V4.1): {} is empty", what);
  cuda::DeviceBuffer<uint8_t> b;
  DSI_RETURN_IF_ERROR(b.upload_bytes(v.data(), v.size() * 4, what));
  bytes_ += int64_t(b.bytes());
  const float* p = b.as<const float>();
  buffers_.push_back(std::move(b));  // moving keeps the device memory in place
  return p;
}

Result<DeviceWeight> DeviceWeightsV41::mat(const model::Mat& m, const char* what) {
  if (m.rows <= 0 || m.cols <= 0 || m.data.size() != size_t(m.rows * m.cols))
    return Status::errorf("cuda weights (V4.1): {} has no data ({} x {})", what, m.rows, m.cols);
  DSI_ASSIGN_OR_RETURN(const float* p, vec(m.data, what));
  DeviceWeight w;
  w.fmt = WeightFormat::F32;
  w.rows = m.rows;
  w.cols = m.cols;
  w.data = p;
  DSI_RETURN_IF_ERROR(ops::cuda::validate_weight(w, what));
  return w;
}

Status DeviceWeightsV41::pointer_array(const std::vector<const void*>& ptrs, const void* const*& out) {
  cuda::DeviceBuffer<uint8_t> b;
  DSI_RETURN_IF_ERROR(b.upload_bytes(ptrs.data(), ptrs.size() * sizeof(void*), "expert pointers"));
  out = b.as<const void* const>();
  buffers_.push_back(std::move(b));
  return Status::ok();
}

Status DeviceWeightsV41::experts(const io::ModelConfig& cfg, const model::LayerWeightsV41& L,
                                 const std::vector<int32_t>& held, DeviceLayerV41& D) {
  const size_t E = held.size();
  if (L.experts.size() != size_t(cfg.n_routed_experts))
    return Status::errorf("cuda weights (V4.1): {} experts, config says {}", L.experts.size(), cfg.n_routed_experts);
  std::vector<const void*> w1(E), w3(E), w2(E);
  for (size_t i = 0; i < E; ++i) {
    const size_t e = size_t(held[i]);
    if (e >= L.experts.size()) return Status::errorf("cuda weights (V4.1): expert {} outside the layer's experts", e);
    DSI_ASSIGN_OR_RETURN(const DeviceWeight a, mat(L.experts[e].w1, "expert w1"));
    DSI_ASSIGN_OR_RETURN(const DeviceWeight b, mat(L.experts[e].w3, "expert w3"));
    DSI_ASSIGN_OR_RETURN(const DeviceWeight c, mat(L.experts[e].w2, "expert w2"));
    w1[i] = a.data;
    w3[i] = b.data;
    w2[i] = c.data;
  }
  auto view = [&](int64_t rows, int64_t cols) {
    ops::cuda::DeviceExpertWeights x;
    x.fmt = WeightFormat::F32;
    x.rows = rows;
    x.cols = cols;
    return x;
  };
  const int64_t Dm = cfg.hidden_size, I = cfg.moe_intermediate_size;
  D.experts.experts = int64_t(E);
  D.experts.dim = Dm;
  D.experts.inter = I;
  D.experts.w1 = view(I, Dm);
  D.experts.w3 = view(I, Dm);
  D.experts.w2 = view(Dm, I);
  DSI_RETURN_IF_ERROR(pointer_array(w1, D.experts.w1.data));
  DSI_RETURN_IF_ERROR(pointer_array(w3, D.experts.w3.data));
  DSI_RETURN_IF_ERROR(pointer_array(w2, D.experts.w2.data));
  DSI_ASSIGN_OR_RETURN(D.shared.w1, mat(L.shared.w1, "shared w1"));
  DSI_ASSIGN_OR_RETURN(D.shared.w3, mat(L.shared.w3, "shared w3"));
  DSI_ASSIGN_OR_RETURN(D.shared.w2, mat(L.shared.w2, "shared w2"));
  return Status::ok();
}

Status DeviceWeightsV41::upload(const io::ModelConfig& cfg, const model::WeightsV41& w, const ExpertSlots& slots) {
  if (slots.size() < size_t(cfg.num_hidden_layers)) return Status::error("cuda weights (V4.1): expert slots per layer missing");
  buffers_.clear();
  bytes_ = 0;
  fp32_storage_ = true;
  layers_.assign(size_t(cfg.num_hidden_layers), DeviceLayerV41{});
  if (w.layers.size() < layers_.size()) return Status::error("cuda weights (V4.1): fewer layers than the config");
  DSI_ASSIGN_OR_RETURN(embed_, mat(w.embed, "embed"));
  DSI_ASSIGN_OR_RETURN(head_, mat(w.head, "head"));
  DSI_ASSIGN_OR_RETURN(final_norm_, vec(w.norm, "norm"));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const model::LayerWeightsV41& L = w.layers[size_t(l)];
    DeviceLayerV41& D = layers_[size_t(l)];
    DSI_ASSIGN_OR_RETURN(D.attn_norm, vec(L.attn_norm, "attn_norm"));
    DSI_ASSIGN_OR_RETURN(D.ffn_norm, vec(L.ffn_norm, "ffn_norm"));
    DSI_ASSIGN_OR_RETURN(D.sink, vec(L.attn_sink, "attn_sink"));
    DSI_ASSIGN_OR_RETURN(D.q_norm, vec(L.q_norm, "q_norm"));
    DSI_ASSIGN_OR_RETURN(D.kv_norm, vec(L.kv_norm, "kv_norm"));
    for (auto [hc, src] : {std::pair{&D.hc_attn, &L.hc_attn}, std::pair{&D.hc_ffn, &L.hc_ffn}}) {
      DSI_ASSIGN_OR_RETURN(hc->fn, vec(src->fn.data, "hc fn"));
      DSI_ASSIGN_OR_RETURN(hc->base, vec(src->base, "hc base"));
      DSI_ASSIGN_OR_RETURN(hc->scale, vec(src->scale, "hc scale"));
    }
    DSI_ASSIGN_OR_RETURN(D.wq_a, mat(L.wq_a, "wq_a"));
    DSI_ASSIGN_OR_RETURN(D.wq_b, mat(L.wq_b, "wq_b"));
    DSI_ASSIGN_OR_RETURN(D.wkv, mat(L.wkv, "wkv"));
    DSI_ASSIGN_OR_RETURN(D.wo_a, mat(L.wo_a, "wo_a"));
    DSI_ASSIGN_OR_RETURN(D.wo_b, mat(L.wo_b, "wo_b"));
    if (cfg.kv_source_of(l) == l) {
      DSI_ASSIGN_OR_RETURN(D.comp_wkv, mat(L.comp_wkv, "compressor wkv"));
      if (cfg.ratio(l) > 1) {
        DSI_ASSIGN_OR_RETURN(D.comp_wgate, mat(L.comp_wgate, "compressor wgate"));
      }
      DSI_ASSIGN_OR_RETURN(D.comp_norm, vec(L.comp_norm, "compressor norm"));
      DSI_ASSIGN_OR_RETURN(D.idx_wk, mat(L.idx_wk, "indexer wk"));
      DSI_ASSIGN_OR_RETURN(D.idx_k_norm, vec(L.idx_k_norm, "indexer k_norm"));
    }
    const auto& ids = cfg.v41.index_source_layer_ids;
    if (cfg.ratio(l) > 0 && std::find(ids.begin(), ids.end(), l) != ids.end()) {
      DSI_ASSIGN_OR_RETURN(D.idx_wq_b, mat(L.idx_wq_b, "indexer wq_b"));
      DSI_ASSIGN_OR_RETURN(D.idx_wproj, mat(L.idx_weights_proj, "indexer weights_proj"));
    }
    DSI_ASSIGN_OR_RETURN(D.gate, mat(L.gate, "gate"));
    DSI_ASSIGN_OR_RETURN(D.gate_bias, vec(L.gate_bias, "gate bias"));
    DSI_RETURN_IF_ERROR(experts(cfg, L, slots[size_t(l)], D));
    if (L.engram) {
      D.engram = true;
      DSI_ASSIGN_OR_RETURN(const DeviceWeight t, mat(L.engram->table, "engram table"));
      D.engram_table.data = t.data;
      D.engram_table.rows = t.rows;
      D.engram_table.hd = t.cols;
      DSI_ASSIGN_OR_RETURN(D.engram_wkv, mat(L.engram->wkv, "engram wkv"));
      DSI_ASSIGN_OR_RETURN(D.engram_qk, vec(L.engram->qk, "engram qk"));
    }
  }
  return Status::ok();
}

}  // namespace dsinfer::backends
