// Upload of the drafter weights to the GPU (see draft_cuda.h) and create_cuda_drafter. The host loader already
// dequantized every tensor to fp32 (speculative/draft_weights.h), so the device copies are F32: the drafters are small
// next to the target (models/dsv4-small: a few MB) and the GEMMs read them exactly.
#include <cstring>

#include "backends/cuda/speculative/draft_cuda.h"
#include "cuda/cuda_common.h"

namespace dsinfer::backends {

using ops::cuda::DeviceWeight;
using ops::cuda::WeightFormat;

Result<const float*> upload_floats(std::vector<cuda::DeviceBuffer<uint8_t>>& owned, const float* p, size_t n) {
  if (n == 0) return static_cast<const float*>(nullptr);
  cuda::DeviceBuffer<uint8_t> b;
  DSI_RETURN_IF_ERROR(b.upload_bytes(p, n * 4, "drafter weights"));
  const float* d = b.as<float>();
  owned.push_back(std::move(b));
  return d;
}

Result<DeviceWeight> upload_mat(std::vector<cuda::DeviceBuffer<uint8_t>>& owned, const model::Mat& m) {
  if (m.rows <= 0 || m.cols <= 0 || m.data.size() != size_t(m.rows * m.cols))
    return Status::errorf("drafter weight upload: a [{}, {}] matrix holds {} floats", m.rows, m.cols, m.data.size());
  DSI_ASSIGN_OR_RETURN(const float* d, upload_floats(owned, m.p(), m.data.size()));
  DeviceWeight w;
  w.fmt = WeightFormat::F32;
  w.rows = m.rows;
  w.cols = m.cols;
  w.data = d;
  return w;
}

Result<HcDevice> upload_hc(std::vector<cuda::DeviceBuffer<uint8_t>>& owned, const model::HcWeights& h) {
  HcDevice d;
  DSI_ASSIGN_OR_RETURN(d.fn, upload_floats(owned, h.fn.p(), h.fn.data.size()));
  DSI_ASSIGN_OR_RETURN(d.base, upload_floats(owned, h.base.data(), h.base.size()));
  DSI_ASSIGN_OR_RETURN(d.scale, upload_floats(owned, h.scale.data(), h.scale.size()));
  return d;
}

namespace {

// One projection of all routed experts: each expert's F32 matrix, then the device array of their pointers.
Result<ops::cuda::DeviceExpertWeights> upload_experts(std::vector<cuda::DeviceBuffer<uint8_t>>& owned,
                                                      const std::vector<model::ExpertWeights>& ex,
                                                      model::Mat model::ExpertWeights::*which) {
  ops::cuda::DeviceExpertWeights d;
  std::vector<const void*> ptrs;
  for (const model::ExpertWeights& e : ex) {
    DSI_ASSIGN_OR_RETURN(DeviceWeight w, upload_mat(owned, e.*which));
    if (!ptrs.empty() && (w.rows != d.rows || w.cols != d.cols)) return Status::error("drafter experts differ in shape");
    d.rows = w.rows;
    d.cols = w.cols;
    ptrs.push_back(w.data);
  }
  d.fmt = WeightFormat::F32;
  cuda::DeviceBuffer<uint8_t> arr;
  DSI_RETURN_IF_ERROR(arr.upload_bytes(ptrs.data(), ptrs.size() * sizeof(void*), "drafter expert pointers"));
  d.data = arr.as<const void*>();
  d.scale = nullptr;
  owned.push_back(std::move(arr));
  return d;
}

}  // namespace

Result<std::unique_ptr<DraftDeviceLayer>> upload_draft_layer(const model::LayerWeights& w, const io::ModelConfig& c) {
  auto d = std::make_unique<DraftDeviceLayer>();
  auto& o = d->owned;
  DeviceLayer& L = d->L;
  DSI_ASSIGN_OR_RETURN(L.attn_norm, upload_floats(o, w.attn_norm.data(), w.attn_norm.size()));
  DSI_ASSIGN_OR_RETURN(L.ffn_norm, upload_floats(o, w.ffn_norm.data(), w.ffn_norm.size()));
  DSI_ASSIGN_OR_RETURN(L.sink, upload_floats(o, w.attn_sink.data(), w.attn_sink.size()));
  DSI_ASSIGN_OR_RETURN(L.q_norm, upload_floats(o, w.q_norm.data(), w.q_norm.size()));
  DSI_ASSIGN_OR_RETURN(L.kv_norm, upload_floats(o, w.kv_norm.data(), w.kv_norm.size()));
  DSI_ASSIGN_OR_RETURN(L.hc_attn, upload_hc(o, w.hc_attn));
  DSI_ASSIGN_OR_RETURN(L.hc_ffn, upload_hc(o, w.hc_ffn));
  DSI_ASSIGN_OR_RETURN(L.wq_a, upload_mat(o, w.wq_a));
  DSI_ASSIGN_OR_RETURN(L.wq_b, upload_mat(o, w.wq_b));
  DSI_ASSIGN_OR_RETURN(L.wkv, upload_mat(o, w.wkv));
  DSI_ASSIGN_OR_RETURN(L.wo_a, upload_mat(o, w.wo_a));
  DSI_ASSIGN_OR_RETURN(L.wo_b, upload_mat(o, w.wo_b));
  DSI_ASSIGN_OR_RETURN(L.gate, upload_mat(o, w.gate));
  DSI_ASSIGN_OR_RETURN(L.gate_bias, upload_floats(o, w.gate_bias.data(), w.gate_bias.size()));
  if (!w.tid2eid.empty()) return Status::error("drafter layers are score-routed (no hash table)");
  if (int64_t(w.experts.size()) != c.n_routed_experts)
    return Status::errorf("drafter layer has {} experts, the config {}", w.experts.size(), c.n_routed_experts);
  L.experts.experts = c.n_routed_experts;
  L.experts.dim = c.hidden_size;
  L.experts.inter = c.moe_intermediate_size;
  DSI_ASSIGN_OR_RETURN(L.experts.w1, upload_experts(o, w.experts, &model::ExpertWeights::w1));
  DSI_ASSIGN_OR_RETURN(L.experts.w3, upload_experts(o, w.experts, &model::ExpertWeights::w3));
  DSI_ASSIGN_OR_RETURN(L.experts.w2, upload_experts(o, w.experts, &model::ExpertWeights::w2));
  L.has_shared = w.shared.has_value();
  if (L.has_shared) {
    DSI_ASSIGN_OR_RETURN(L.shared.w1, upload_mat(o, w.shared->w1));
    DSI_ASSIGN_OR_RETURN(L.shared.w3, upload_mat(o, w.shared->w3));
    DSI_ASSIGN_OR_RETURN(L.shared.w2, upload_mat(o, w.shared->w2));
  }
  return d;
}

Status sync_stream(void* stream) {
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

Status upload_async(void* stream, cuda::DeviceBuffer<uint8_t>& dst, const void* src, size_t bytes, const char* what) {
  if (bytes == 0) return Status::ok();
  if (dst.size() < bytes) {
    // The old buffer may still be read by queued kernels: wait before freeing it.
    DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    DSI_RETURN_IF_ERROR(dst.alloc(std::max<size_t>(bytes, 256), what));
  }
  DSI_CUDA_TRY(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

Result<std::span<const float>> device_hidden_source(const DraftDeviceContext& ctx, std::span<const float> host,
                                                    cuda::DeviceBuffer<uint8_t>& up) {
  if (!host.empty()) {
    DSI_RETURN_IF_ERROR(upload_async(ctx.stream, up, host.data(), host.size_bytes(), "drafter hidden states"));
    return std::span<const float>(up.as<const float>(), host.size());
  }
  if (!ctx.device_hidden) return std::span<const float>();
  return ctx.device_hidden();
}

Result<std::unique_ptr<speculative::Drafter>> create_cuda_drafter(const speculative::SpeculativeConfig& cfg,
                                                                  const io::ModelConfig& target, int32_t num_slots,
                                                                  DraftDeviceContext ctx) {
  if (!cfg.enabled()) return Status::error("create_cuda_drafter: speculative decoding is off");
  if (!ctx.stream || !ctx.embed || !ctx.head) return Status::error("create_cuda_drafter: no device context");
  if (cfg.method == speculative::SpecMethod::kDspark) {
    DSI_ASSIGN_OR_RETURN(speculative::DsparkWeights w,
                         speculative::load_dspark_weights(target, cfg.draft, cfg.model_dir));
    auto d = std::make_unique<DsparkCuda>(target, cfg.draft, std::move(w), num_slots, std::move(ctx));
    DSI_RETURN_IF_ERROR(d->init());
    return std::unique_ptr<speculative::Drafter>(std::move(d));
  }
  DSI_ASSIGN_OR_RETURN(speculative::Mtp1Weights w, speculative::load_mtp1_weights(target, cfg.draft, cfg.model_dir));
  auto d = std::make_unique<Mtp1Cuda>(target, std::move(w), num_slots, std::move(ctx));
  DSI_RETURN_IF_ERROR(d->init());
  return std::unique_ptr<speculative::Drafter>(std::move(d));
}

}  // namespace dsinfer::backends
