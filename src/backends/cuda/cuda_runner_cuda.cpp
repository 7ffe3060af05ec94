// The CUDA backend: the DeepSeek-V4 forward on one GPU, op for op the CPU reference (model/deepseek_v4.cpp),
// with weights kept in their storage formats (F32 / BF16 / FP8 block / FP4) and fp32 activations. Weights come
// from the checkpoint (validated by model::resolve_weights) or, with --load-format dummy, are generated on the
// GPU in the official formats. The per-sequence state lives in device memory laid out by the engine's
// cache::StateLayout (fp32 rows). Optional per-op CUDA-event timing feeds `dsinfer bench`.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "cuda/cuda_common.h"
#include "io/quant.h"
#include "model/deepseek_v4.h"
#include "ops/compressor/compressor_cuda.h"
#include "ops/embed/embed_cuda.h"
#include "ops/gemm/gemm_cuda.h"
#include "ops/indexer/indexer_cuda.h"
#include "ops/mhc/mhc_cuda.h"
#include "ops/moe/moe_cuda.h"
#include "ops/quant_sim/quant_sim_cuda.h"
#include "ops/rmsnorm/rmsnorm_cuda.h"
#include "ops/rope/rope.h"
#include "ops/rope/rope_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "backends/cuda/cuda_runner.h"
#include "backends/cuda/cuda_runner_impl.h"
#include "backends/cuda/dummy_weights_cuda.h"

namespace dsinfer::backends {

using namespace ops::cuda;
using io::AttnType;

// ---------------------------------------------------------------- weights

Status CudaRunner::upload_resolved(const model::ResolvedTensor& r) {
  DevTensor t;
  const io::TensorView& v = *r.data;
  fp32_weights_ &= r.spec.kind == model::TensorKind::IndexTable || v.dtype == DType::F32;
  // mHC mixing matrices and ape are read by kernels as fp32 arrays, not through a GEMM.
  const std::string& nm = r.spec.name;
  const bool as_floats = r.spec.kind == model::TensorKind::Vector || nm.ends_with("_fn") || nm.ends_with(".ape");
  if (as_floats) {
    std::vector<float> host(static_cast<size_t>(r.spec.rows * r.spec.cols));
    io::convert_to_f32(v.dtype, v.data, r.spec.rows * r.spec.cols, host.data());
    DSI_RETURN_IF_ERROR(t.data.upload_bytes(host.data(), host.size() * 4, r.spec.name.c_str()));
  } else if (r.spec.kind == model::TensorKind::IndexTable) {
    std::vector<int32_t> host(size_t(v.numel()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = int32_t(v.int_at(int64_t(i)));
    DSI_RETURN_IF_ERROR(t.data.upload_bytes(host.data(), host.size() * 4, r.spec.name.c_str()));
  } else {
    t.w.rows = r.spec.rows;
    t.w.cols = r.spec.cols;
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
    const size_t bytes = weight_data_bytes(t.w.fmt, t.w.rows, t.w.cols);
    DSI_RETURN_IF_ERROR(t.data.upload_bytes(src, bytes, r.spec.name.c_str()));
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
      t.w.block_n = cfg_.fp8_block_n;
      t.w.block_k = cfg_.fp8_block_k;
      const size_t sbytes = weight_scale_bytes(t.w.fmt, t.w.rows, t.w.cols, t.w.scale_e8m0, t.w.block_n, t.w.block_k);
      DSI_RETURN_IF_ERROR(t.scale.upload_bytes(ssrc, sbytes, (r.spec.name + " scale").c_str()));
      t.w.scale = t.scale.data();
    }
    DSI_RETURN_IF_ERROR(validate_weight(t.w, r.spec.name.c_str()));
  }
  weight_bytes_ += int64_t(t.data.bytes() + t.scale.bytes());
  tensors_[r.spec.name] = std::move(t);
  return Status::ok();
}

Status CudaRunner::make_dummy(const model::TensorSpec& spec, uint64_t seed) {
  DevTensor t;
  const DType dt = model::official_storage(spec);
  auto ends = [&](const char* suf) {
    const size_t n = std::strlen(suf);
    return spec.name.size() >= n && spec.name.compare(spec.name.size() - n, n, suf) == 0;
  };
  if (spec.kind == model::TensorKind::IndexTable) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<int32_t> host(size_t(spec.rows * spec.cols));
    std::vector<int32_t> perm(static_cast<size_t>(cfg_.n_routed_experts));
    for (int64_t r = 0; r < spec.rows; ++r) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t k = 0; k < spec.cols; ++k) {
        std::swap(perm[size_t(k)], perm[size_t(k) + rng() % (perm.size() - size_t(k))]);
        host[size_t(r * spec.cols + k)] = perm[size_t(k)];
      }
    }
    DSI_RETURN_IF_ERROR(t.data.upload_bytes(host.data(), host.size() * 4, spec.name.c_str()));
  } else if (spec.kind == model::TensorKind::Vector) {
    DSI_RETURN_IF_ERROR(t.data.alloc(size_t(spec.cols) * 4, spec.name.c_str()));
    DummySpec ds;  // norms ~1, mHC scales 1, everything else small around 0
    if (ends("norm.weight")) ds = {DummyFill::Uniform, false, 1.0f, 0.05f};
    else if (ends("_scale")) ds = {DummyFill::Uniform, false, 1.0f, 0.1f};
    else ds = {DummyFill::Uniform, false, 0.0f, 0.1f};
    DSI_RETURN_IF_ERROR(fill_dummy_cuda(t.data.data(), size_t(spec.cols), ds, seed, stream_));
  } else {
    t.w.rows = spec.rows;
    t.w.cols = spec.cols;
    t.w.fmt = dt == DType::F8_E4M3 ? WeightFormat::FP8_BLOCK
              : dt == DType::I8    ? WeightFormat::FP4_G32
              : dt == DType::F32   ? WeightFormat::F32
                                   : WeightFormat::BF16;
    const size_t bytes = weight_data_bytes(t.w.fmt, t.w.rows, t.w.cols);
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
    DSI_RETURN_IF_ERROR(fill_dummy_cuda(t.data.data(), count, ds, seed, stream_));
    t.w.data = t.data.data();
    if (t.w.fmt == WeightFormat::FP8_BLOCK || t.w.fmt == WeightFormat::FP4_G32) {
      const size_t sbytes = weight_scale_bytes(t.w.fmt, t.w.rows, t.w.cols, true, 128, 128);
      DSI_RETURN_IF_ERROR(t.scale.alloc(sbytes, (spec.name + " scale").c_str()));
      // Codes are O(1) (fp8 |v| <= 1.875, fp4 |v| <= 6): the E8M0 scale brings them to ~1/sqrt(fan_in).
      const int e = int(std::lround(std::log2(double(std_w) / (t.w.fmt == WeightFormat::FP8_BLOCK ? 0.8 : 2.5))));
      DSI_RETURN_IF_ERROR(fill_dummy_cuda(t.scale.data(), sbytes, {DummyFill::Constant8, false, 0, 0, uint8_t(127 + e)}, seed, stream_));
      t.w.scale = t.scale.data();
    }
  }
  weight_bytes_ += int64_t(t.data.bytes() + t.scale.bytes());
  tensors_[spec.name] = std::move(t);
  return Status::ok();
}

const CudaRunner::DevTensor* CudaRunner::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status CudaRunner::build_layers() {
  auto vec = [&](const std::string& n) -> const float* {
    const DevTensor* t = find(n);
    return t ? t->data.as<const float>() : nullptr;
  };
  auto mat = [&](const std::string& n) -> DeviceWeight {
    const DevTensor* t = find(n);
    return t ? t->w : DeviceWeight{};
  };
  const int64_t E = cfg_.n_routed_experts;
  embed_ = find("embed.weight");
  head_ = cfg_.tie_word_embeddings ? embed_->w : mat("head.weight");
  final_norm_ = vec("norm.weight");
  hc_head_ = {vec("hc_head_fn"), vec("hc_head_base"), vec("hc_head_scale")};
  layers_.clear();
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    DevLayer L;
    L.attn_norm = vec(p + "attn_norm.weight");
    L.ffn_norm = vec(p + "ffn_norm.weight");
    L.hc_attn = {vec(p + "hc_attn_fn"), vec(p + "hc_attn_base"), vec(p + "hc_attn_scale")};
    L.hc_ffn = {vec(p + "hc_ffn_fn"), vec(p + "hc_ffn_base"), vec(p + "hc_ffn_scale")};
    L.sink = vec(p + "attn.attn_sink");
    L.wq_a = mat(p + "attn.wq_a.weight");
    L.q_norm = vec(p + "attn.q_norm.weight");
    L.wq_b = mat(p + "attn.wq_b.weight");
    L.wkv = mat(p + "attn.wkv.weight");
    L.kv_norm = vec(p + "attn.kv_norm.weight");
    L.wo_a = mat(p + "attn.wo_a.weight");
    L.wo_b = mat(p + "attn.wo_b.weight");
    const AttnType at = cfg_.layer_types[size_t(l)];
    if (at != AttnType::Sliding) {
      L.comp_wkv = mat(p + "attn.compressor.wkv.weight");
      L.comp_wgate = mat(p + "attn.compressor.wgate.weight");
      L.comp_ape = vec(p + "attn.compressor.ape");
      L.comp_norm = vec(p + "attn.compressor.norm.weight");
    }
    if (at == AttnType::CSA) {
      L.idx_wq_b = mat(p + "attn.indexer.wq_b.weight");
      L.idx_wproj = mat(p + "attn.indexer.weights_proj.weight");
      L.idx_wkv = mat(p + "attn.indexer.compressor.wkv.weight");
      L.idx_wgate = mat(p + "attn.indexer.compressor.wgate.weight");
      L.idx_ape = vec(p + "attn.indexer.compressor.ape");
      L.idx_norm = vec(p + "attn.indexer.compressor.norm.weight");
    }
    L.gate = mat(p + "ffn.gate.weight");
    if (cfg_.mlp_layer_types[size_t(l)] == io::MlpType::HashMoE) {
      const DevTensor* t = find(p + "ffn.gate.tid2eid");
      L.tid2eid = t ? t->data.as<const int32_t>() : nullptr;
    } else {
      L.gate_bias = vec(p + "ffn.gate.bias");
    }
    // Routed experts: device arrays of per-expert data / scale pointers for each projection.
    std::vector<const void*> ptrs;
    auto expert_arrays = [&](const char* w, DeviceExpertWeights& out) -> Status {
      std::vector<const void*> data(static_cast<size_t>(E)), scale(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        const DeviceWeight dw = mat(fmt::format("{}ffn.experts.{}.{}.weight", p, e, w));
        data[size_t(e)] = dw.data;
        scale[size_t(e)] = dw.scale;
        if (e == 0) out = {dw.fmt, dw.rows, dw.cols, dw.scale_e8m0, dw.block_n, dw.block_k, nullptr, nullptr};
        else if (dw.fmt != out.fmt) return Status::errorf("{}ffn.experts.{}.{}: experts of one layer must share a format", p, e, w);
      }
      data.insert(data.end(), scale.begin(), scale.end());
      cuda::DeviceBuffer<uint8_t> b;
      DSI_RETURN_IF_ERROR(b.upload_bytes(data.data(), data.size() * sizeof(void*), "expert pointers"));
      out.data = b.as<const void* const>();
      out.scale = out.fmt == WeightFormat::F32 || out.fmt == WeightFormat::BF16 ? nullptr : out.data + E;
      pointer_blobs_.push_back(std::move(b));
      return Status::ok();
    };
    L.experts.experts = E;
    L.experts.dim = cfg_.hidden_size;
    L.experts.inter = cfg_.moe_intermediate_size;
    DSI_RETURN_IF_ERROR(expert_arrays("w1", L.experts.w1));
    DSI_RETURN_IF_ERROR(expert_arrays("w3", L.experts.w3));
    DSI_RETURN_IF_ERROR(expert_arrays("w2", L.experts.w2));
    if (cfg_.n_shared_experts > 0) {
      L.has_shared = true;
      L.shared = {mat(p + "ffn.shared_experts.w1.weight"), mat(p + "ffn.shared_experts.w3.weight"),
                  mat(p + "ffn.shared_experts.w2.weight")};
    }
    layers_.push_back(std::move(L));
  }
  return Status::ok();
}

Result<std::unique_ptr<engine::ModelRunner>> create_cuda_runner(const engine::RunnerOptions& opts) {
  const model::Numerics& num = opts.numerics;
  DSI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(opts.model_dir));
  if (opts.num_layers > 0) {
    if (opts.load_format != engine::LoadFormat::kDummy) return Status::error("a layer subset needs dummy weights (a checkpoint has all its layers)");
    if (opts.num_layers > cfg.num_hidden_layers)
      return Status::errorf("{} layers requested, but the model has only {}", opts.num_layers, cfg.num_hidden_layers);
    cfg.num_hidden_layers = opts.num_layers;
    cfg.layer_types.resize(size_t(opts.num_layers));
    cfg.mlp_layer_types.resize(size_t(opts.num_layers));
    cfg.compress_ratios.resize(size_t(opts.num_layers));
  }
  std::unique_ptr<CudaRunner> r(new CudaRunner(cfg, num));
  DSI_RETURN_IF_ERROR(r->init(opts));
  return std::unique_ptr<engine::ModelRunner>(std::move(r));
}

Status CudaRunner::init(const engine::RunnerOptions& opts) {
  exact_ = opts.exact_gemm;
  if (const char* g = std::getenv("DSINFER_CUDA_GRAPHS")) graphs_enabled_ = std::string(g) != "0";
  DSI_ASSIGN_OR_RETURN(device_, cuda::query_device(0));
  DSI_CUDA_TRY(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(&stream_), cudaStreamNonBlocking));
  if (opts.load_format == engine::LoadFormat::kDummy) {
    const std::vector<model::TensorSpec> specs = model::weight_specs(cfg_);
    // Fail early and clearly when the model cannot fit: sum the official storage sizes first.
    double need = 0;
    for (const auto& s : specs) {
      const DType dt = model::official_storage(s);
      need += s.kind != model::TensorKind::Matrix ? double(s.rows * s.cols) * 4
              : dt == DType::I8                     ? double(s.rows * s.cols) * (0.5 + 1.0 / 32)
              : dt == DType::F8_E4M3                ? double(s.rows * s.cols) * (1 + 1.0 / 16384)
                                                    : double(s.rows * s.cols) * double(dtype_size(dt));
    }
    if (need > 0.92 * double(device_.free_bytes))
      return Status::errorf("model needs {:.1f} GiB of weights but the GPU '{}' has {:.1f} GiB free; use fewer layers "
                            "(num_hidden_layers in config.json) or more GPUs",
                            need / double(1 << 30), device_.name, double(device_.free_bytes) / double(1 << 30));
    uint64_t seed = 1;
    fp32_weights_ = false;
    for (const auto& s : specs) DSI_RETURN_IF_ERROR(make_dummy(s, seed++));
  } else {
    DSI_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(opts.model_dir));
    auto resolved = model::resolve_weights(cfg_, ckpt);
    if (!resolved) return resolved.status().with_context(opts.model_dir);
    for (const auto& r : *resolved) DSI_RETURN_IF_ERROR(upload_resolved(r));
  }
  DSI_RETURN_IF_ERROR(build_layers());
  inv_main_ = ops::rope_inv_freq(cfg_.rope_main, cfg_.qk_rope_head_dim);
  inv_comp_ = ops::rope_inv_freq(cfg_.rope_compress, cfg_.qk_rope_head_dim);
  DSI_RETURN_IF_ERROR(inv_main_dev_.upload_bytes(inv_main_.data(), inv_main_.size() * 4, "rope inv_freq"));
  DSI_RETURN_IF_ERROR(inv_comp_dev_.upload_bytes(inv_comp_.data(), inv_comp_.size() * 4, "rope inv_freq"));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

CudaRunner::~CudaRunner() {
  drop_graphs();
  if (plan_host_) cudaFreeHost(plan_host_);
  for (auto& [k, ev] : events_) {
    cudaEventDestroy(static_cast<cudaEvent_t>(ev.first));
    cudaEventDestroy(static_cast<cudaEvent_t>(ev.second));
  }
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

std::string CudaRunner::name() const {
  return fmt::format("cuda ({}, {} numerics, {:.2f} GiB weights)", device_.name, num_.name, double(weight_bytes_) / double(1 << 30));
}

Status CudaRunner::randomize_state(uint64_t seed) {
  // Small values like real normalized KV rows; frontier gates included (any finite value is valid there).
  DSI_RETURN_IF_ERROR(fill_dummy_cuda(slots_.data(), slots_.bytes() / 4, {DummyFill::Uniform, false, 0.0f, 1.0f}, seed, stream_));
  DSI_RETURN_IF_ERROR(fill_dummy_cuda(blocks_.data(), blocks_.bytes() / 4, {DummyFill::Uniform, false, 0.0f, 1.0f}, seed + 1, stream_));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

Status CudaRunner::bind_state(const cache::StateLayout& layout, int32_t num_slots, int32_t num_blocks, int64_t max_model_len) {
  max_model_len_ = max_model_len;
  drop_graphs();
  if (layout.kv_elem_bytes != 4) return Status::error("cuda runner: state layout must use fp32 rows");
  layout_ = layout;
  DSI_RETURN_IF_ERROR(slots_.alloc(size_t(num_slots) * size_t(layout.slot_bytes), "state slots"));
  DSI_RETURN_IF_ERROR(blocks_.alloc(size_t(num_blocks) * size_t(layout.block_bytes), "state blocks"));
  return Status::ok();
}

}  // namespace dsinfer::backends
