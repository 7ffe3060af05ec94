// Dummy DeepSeek-V4.1 weights on the GPU (see device_weights_v41.h), in the release's storage formats: FP8 e4m3
// dense projections with E8M0 scales per quantization_config block (32x32), FP4 e2m1 routed experts with one E8M0
// scale per 32, BF16 where the official code multiplies in bf16 (wo_a, indexer wk / weights_proj, ratio-1
// compressor, embed, head, gate), fp32 where it upcasts (ratio > 1 compressor, mHC), FP8 Engram tables. The Engram
// tables are truncated to kDummyEngramRows rows with ids wrapping (a full table is ~100 GB per layer; a lookup
// reads the same 24 rows per token either way).
#include <algorithm>
#include <cmath>

#include "backends/cuda/weights/device_weights_v41.h"
#include "backends/cuda/weights/dummy_weights_cuda.h"
#include "cuda/cuda_common.h"
#include "ops/dummy_fill/dummy_fill_cuda.h"

namespace dsinfer::backends {

using ops::cuda::DeviceWeight;
using ops::cuda::DummyFill;
using ops::cuda::DummySpec;
using ops::cuda::fill_dummy_cuda;
using ops::cuda::WeightFormat;

namespace {
constexpr int64_t kDummyEngramRows = int64_t(1) << 22;

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Bytes of the dummy weights (the same formats as generated), to fail early when they cannot fit.
double dummy_bytes(const io::ModelConfig& c) {
  const double D = double(c.hidden_size), H = double(c.num_attention_heads), hd = double(c.head_dim), n = double(c.hc_mult);
  const double qr = double(c.q_lora_rank), Gr = double(c.o_groups * c.o_lora_rank), I = double(c.moe_intermediate_size);
  const double E = double(c.n_routed_experts), di = double(c.index_head_dim), Hi = double(c.index_n_heads);
  const double fp8 = 1.0 + 1.0 / 1024, fp4 = 0.5 + 1.0 / 32;
  double b = 2 * 2.0 * double(c.vocab_size) * D;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    b += fp8 * (qr * D + H * hd * qr + hd * D + D * Gr + 3 * I * D) + 2.0 * (Gr * H * hd / double(c.o_groups) + E * D);
    b += fp4 * 3 * E * I * D + 2 * 4.0 * (2 + n) * n * n * D;
    if (c.kv_source_of(l) == l) b += (c.ratio(l) > 1 ? 8.0 : 2.0) * hd * D + 2.0 * di * hd;
    if (c.ratio(l) > 0 && contains(c.v41.index_source_layer_ids, l)) b += fp8 * Hi * di * qr + 2.0 * Hi * D;
    if (c.engram_index(l) >= 0) {
      const double cols = double((c.v41.engram_max_ngram_size - 1) * c.v41.engram_n_heads), ehd = double(c.v41.engram_head_dim);
      b += fp8 * (n + 1) * D * cols * ehd + (1 + 1.0 / 32) * double(kDummyEngramRows) * ehd;
    }
  }
  return b;
}
}  // namespace

Result<DeviceWeight> DeviceWeightsV41::dummy_mat(int64_t rows, int64_t cols, WeightFormat fmt, int64_t block, uint64_t seed,
                                                 void* stream, int64_t block_rows) {
  DeviceWeight w;
  w.fmt = fmt;
  w.rows = rows;
  w.cols = cols;
  w.block_n = block_rows > 0 ? block_rows : block;
  w.block_k = block;
  cuda::DeviceBuffer<uint8_t> data, scale;
  const size_t bytes = ops::cuda::weight_data_bytes(fmt, rows, cols);
  DSI_RETURN_IF_ERROR(data.alloc(bytes, "dummy weight"));
  const float std_w = 1.0f / std::sqrt(float(cols));  // keeps activations O(1) through the layers
  DummySpec ds;
  size_t count = bytes;
  if (fmt == WeightFormat::FP8_BLOCK) ds.fill = DummyFill::Fp8Codes;
  else if (fmt == WeightFormat::FP4_G32) ds.fill = DummyFill::Fp4Codes;
  else {
    ds = {DummyFill::Uniform, fmt == WeightFormat::BF16, 0.0f, std_w * 1.7f};
    count = size_t(rows * cols);
  }
  DSI_RETURN_IF_ERROR(fill_dummy_cuda(data.data(), count, ds, seed, stream));
  w.data = data.data();
  if (fmt == WeightFormat::FP8_BLOCK || fmt == WeightFormat::FP4_G32) {
    const size_t sbytes = ops::cuda::weight_scale_bytes(fmt, rows, cols, true, w.block_n, w.block_k);
    DSI_RETURN_IF_ERROR(scale.alloc(sbytes, "dummy weight scale"));
    const int e = int(std::lround(std::log2(double(std_w) / (fmt == WeightFormat::FP8_BLOCK ? 0.8 : 2.5))));
    DSI_RETURN_IF_ERROR(fill_dummy_cuda(scale.data(), sbytes, {DummyFill::Constant8, false, 0, 0, uint8_t(127 + e)}, seed, stream));
    w.scale = scale.data();
    bytes_ += int64_t(sbytes);
    buffers_.push_back(std::move(scale));
  }
  bytes_ += int64_t(bytes);
  buffers_.push_back(std::move(data));
  DSI_RETURN_IF_ERROR(ops::cuda::validate_weight(w, "dummy weight"));
  return w;
}

Result<const float*> DeviceWeightsV41::dummy_vec(int64_t n, float center, float spread, uint64_t seed, void* stream) {
  cuda::DeviceBuffer<uint8_t> b;
  DSI_RETURN_IF_ERROR(b.alloc(size_t(n) * 4, "dummy vector"));
  DSI_RETURN_IF_ERROR(fill_dummy_cuda(b.data(), size_t(n), {DummyFill::Uniform, false, center, spread}, seed, stream));
  const float* p = b.as<const float>();
  bytes_ += int64_t(b.bytes());
  buffers_.push_back(std::move(b));
  return p;
}

Status DeviceWeightsV41::dummy_experts(const io::ModelConfig& cfg, const std::vector<int32_t>& held, DeviceLayerV41& D,
                                       uint64_t& seed, void* stream) {
  const int64_t E = int64_t(held.size()), Dm = cfg.hidden_size, I = cfg.moe_intermediate_size;
  const uint64_t first = seed;  // expert e's three matrices: seeds first + 3e .. first + 3e + 2
  seed += uint64_t(3 * cfg.n_routed_experts);
  std::vector<const void*> ptr[3], scl[3];
  for (int64_t i = 0; i < E; ++i)
    for (int k = 0; k < 3; ++k) {
      const uint64_t sd = first + uint64_t(3 * held[size_t(i)] + k);
      DSI_ASSIGN_OR_RETURN(const DeviceWeight w, dummy_mat(k == 2 ? Dm : I, k == 2 ? I : Dm, WeightFormat::FP4_G32, 32, sd, stream));
      ptr[k].push_back(w.data);
      scl[k].push_back(w.scale);
    }
  ops::cuda::DeviceExpertWeights* views[3] = {&D.experts.w1, &D.experts.w3, &D.experts.w2};
  for (int k = 0; k < 3; ++k) {
    ops::cuda::DeviceExpertWeights& x = *views[k];
    x.fmt = WeightFormat::FP4_G32;
    x.rows = k == 2 ? Dm : I;
    x.cols = k == 2 ? I : Dm;
    x.scale_e8m0 = true;
    std::vector<const void*> both = ptr[k];
    both.insert(both.end(), scl[k].begin(), scl[k].end());
    DSI_RETURN_IF_ERROR(pointer_array(both, x.data));
    x.scale = x.data + E;
  }
  D.experts.experts = E;
  D.experts.dim = Dm;
  D.experts.inter = I;
  const int64_t blk = cfg.fp8_block_n;
  DSI_ASSIGN_OR_RETURN(D.shared.w1, dummy_mat(I, Dm, WeightFormat::FP8_BLOCK, blk, seed++, stream));
  DSI_ASSIGN_OR_RETURN(D.shared.w3, dummy_mat(I, Dm, WeightFormat::FP8_BLOCK, blk, seed++, stream));
  DSI_ASSIGN_OR_RETURN(D.shared.w2, dummy_mat(Dm, I, WeightFormat::FP8_BLOCK, blk, seed++, stream));
  return Status::ok();
}

Status DeviceWeightsV41::dummy_layer(const io::ModelConfig& c, int64_t l, const std::vector<int32_t>& held, uint64_t& sd,
                                     void* st) {
  DeviceLayerV41& D = layers_[size_t(l)];
  const int64_t Dm = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, n = c.hc_mult, qr = c.q_lora_rank;
  const int64_t G = c.o_groups, r = c.o_lora_rank, di = c.index_head_dim, Hi = c.index_n_heads, blk = c.fp8_block_n;
  const WeightFormat F8 = WeightFormat::FP8_BLOCK, B16 = WeightFormat::BF16, F32 = WeightFormat::F32;
  DSI_ASSIGN_OR_RETURN(D.attn_norm, dummy_vec(Dm, 1.0f, 0.05f, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.ffn_norm, dummy_vec(Dm, 1.0f, 0.05f, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.sink, dummy_vec(H, 0.0f, 0.1f, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.q_norm, dummy_vec(qr, 1.0f, 0.05f, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.kv_norm, dummy_vec(hd, 1.0f, 0.05f, sd++, st));
  for (HcDevice* hc : {&D.hc_attn, &D.hc_ffn}) {
    DSI_ASSIGN_OR_RETURN(const DeviceWeight fn, dummy_mat((2 + n) * n, n * Dm, F32, 0, sd++, st));
    hc->fn = static_cast<const float*>(fn.data);
    DSI_ASSIGN_OR_RETURN(hc->base, dummy_vec((2 + n) * n, 0.0f, 0.1f, sd++, st));
    DSI_ASSIGN_OR_RETURN(hc->scale, dummy_vec(3, 1.0f, 0.1f, sd++, st));
  }
  DSI_ASSIGN_OR_RETURN(D.wq_a, dummy_mat(qr, Dm, F8, blk, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.wq_b, dummy_mat(H * hd, qr, F8, blk, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.wkv, dummy_mat(hd, Dm, F8, blk, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.wo_a, dummy_mat(G * r, H * hd / G, B16, 0, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.wo_b, dummy_mat(Dm, G * r, F8, blk, sd++, st));
  if (c.kv_source_of(l) == l) {
    DSI_ASSIGN_OR_RETURN(D.comp_wkv, dummy_mat(hd, Dm, c.ratio(l) > 1 ? F32 : B16, 0, sd++, st));
    if (c.ratio(l) > 1) {
      DSI_ASSIGN_OR_RETURN(D.comp_wgate, dummy_mat(hd, Dm, F32, 0, sd++, st));
    }
    DSI_ASSIGN_OR_RETURN(D.comp_norm, dummy_vec(hd, 1.0f, 0.05f, sd++, st));
    DSI_ASSIGN_OR_RETURN(D.idx_wk, dummy_mat(di, hd, B16, 0, sd++, st));
    DSI_ASSIGN_OR_RETURN(D.idx_k_norm, dummy_vec(di, 1.0f, 0.05f, sd++, st));
  }
  if (c.ratio(l) > 0 && contains(c.v41.index_source_layer_ids, l)) {
    DSI_ASSIGN_OR_RETURN(D.idx_wq_b, dummy_mat(Hi * di, qr, F8, blk, sd++, st));
    DSI_ASSIGN_OR_RETURN(D.idx_wproj, dummy_mat(Hi, Dm, B16, 0, sd++, st));
  }
  DSI_ASSIGN_OR_RETURN(D.gate, dummy_mat(c.n_routed_experts, Dm, B16, 0, sd++, st));
  DSI_ASSIGN_OR_RETURN(D.gate_bias, dummy_vec(c.n_routed_experts, 0.0f, 0.1f, sd++, st));
  DSI_RETURN_IF_ERROR(dummy_experts(c, held, D, sd, st));
  if (c.engram_index(l) >= 0) {
    const int64_t e = c.engram_index(l), ehd = c.v41.engram_head_dim, cols = (c.v41.engram_max_ngram_size - 1) * c.v41.engram_n_heads;
    const int64_t rows = std::min<int64_t>(kDummyEngramRows, size_t(e) < c.v41.engram_num_embeddings.size()
                                                                  ? c.v41.engram_num_embeddings[size_t(e)] : kDummyEngramRows);
    D.engram = true;
    DSI_ASSIGN_OR_RETURN(const DeviceWeight t, dummy_mat(rows, ehd, F8, 32, sd++, st, 1));  // one scale per 32 channels of a row
    D.engram_table = {t.data, static_cast<const uint8_t*>(t.scale), rows, ehd, true};
    if (tables_on_host_) DSI_RETURN_IF_ERROR(table_to_host(D.engram_table, st));
    DSI_ASSIGN_OR_RETURN(D.engram_wkv, dummy_mat((n + 1) * Dm, cols * ehd, F8, blk, sd++, st));
    DSI_ASSIGN_OR_RETURN(D.engram_qk, dummy_vec(n * Dm, 1.0f, 0.05f, sd++, st));
  }
  return Status::ok();
}

// The table's FP8 rows and scales copied into pinned host memory, its device buffers freed (the last two dummy_mat
// allocated: scale, then data).
Status DeviceWeightsV41::table_to_host(ops::cuda::EngramTableDevice& t, void* stream) {
  const size_t data_bytes = size_t(t.rows * t.hd), scale_bytes = size_t(t.rows * (t.hd / 32));
  cuda::PinnedHostBuffer host;
  DSI_RETURN_IF_ERROR(host.alloc(data_bytes + scale_bytes, "dummy Engram table (pinned host memory)"));
  DSI_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));  // the fill ran there
  DSI_RETURN_IF_ERROR(cuda::detail::copy_to_host(host.data(), t.data, data_bytes));
  DSI_RETURN_IF_ERROR(cuda::detail::copy_to_host(host.data() + data_bytes, t.scale, scale_bytes));
  if (buffers_.size() < 2 || buffers_.back().data() != t.data || buffers_[buffers_.size() - 2].data() != t.scale)
    return Status::error("cuda weights (V4.1): the dummy Engram table is not the last weight generated");
  buffers_.pop_back();
  buffers_.pop_back();
  bytes_ -= int64_t(data_bytes + scale_bytes);
  host_bytes_ += int64_t(data_bytes + scale_bytes);
  t.data = host.data();
  t.scale = host.data() + data_bytes;
  host_buffers_.push_back(std::move(host));
  return Status::ok();
}

Status DeviceWeightsV41::generate_dummy(const io::ModelConfig& cfg, int64_t free_bytes, const std::string& gpu_name, void* stream,
                                        const ExpertSlots& slots, bool tables_on_host) {
  if (slots.size() < size_t(cfg.num_hidden_layers)) return Status::error("cuda weights (V4.1): expert slots per layer missing");
  const double need = dummy_bytes(cfg);
  if (need > 0.92 * double(free_bytes))
    return Status::errorf("model needs {:.1f} GiB of weights but the GPU '{}' has {:.1f} GiB free; use fewer layers "
                          "(--layers) or more GPUs", need / double(1 << 30), gpu_name, double(free_bytes) / double(1 << 30));
  buffers_.clear();
  host_buffers_.clear();
  tables_on_host_ = tables_on_host;
  bytes_ = host_bytes_ = 0;
  fp32_storage_ = false;
  layers_.assign(size_t(cfg.num_hidden_layers), DeviceLayerV41{});
  uint64_t seed = 1;
  DSI_ASSIGN_OR_RETURN(embed_, dummy_mat(cfg.vocab_size, cfg.hidden_size, WeightFormat::BF16, 0, seed++, stream));
  DSI_ASSIGN_OR_RETURN(head_, dummy_mat(cfg.vocab_size, cfg.hidden_size, WeightFormat::BF16, 0, seed++, stream));
  DSI_ASSIGN_OR_RETURN(final_norm_, dummy_vec(cfg.hidden_size, 1.0f, 0.05f, seed++, stream));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) DSI_RETURN_IF_ERROR(dummy_layer(cfg, l, slots[size_t(l)], seed, stream));
  return Status::ok();
}

}  // namespace dsinfer::backends
