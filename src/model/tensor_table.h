// The one table of a DeepSeek-V4 model's tensors: every weight a config needs, in canonical (official checkpoint)
// names, with a typed role, its layer (and routed expert), kind and logical shape. The CPU loader
// (model/weights.cpp), the CUDA upload and the dummy weights (backends/cuda) all walk this table and dispatch on
// the role; nothing else spells a tensor name, so a consumer cannot miss or misspell one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "io/config.h"

namespace dsinfer::model {

// Matrices: any weight storage format, logical [rows, cols]; vectors: float [cols] (rows = 1); index tables:
// integers [rows, cols] (tid2eid [vocab, k]).
enum class TensorKind { Matrix, Vector, IndexTable };

enum class TensorRole : uint8_t {
  // model level
  Embed, Head, FinalNorm, HcHeadFn, HcHeadBase, HcHeadScale,
  // per layer: norms and mHC mixing
  AttnNorm, FfnNorm, HcAttnFn, HcAttnBase, HcAttnScale, HcFfnFn, HcFfnBase, HcFfnScale,
  // attention
  AttnSink, WqA, QNorm, WqB, Wkv, KvNorm, WoA, WoB,
  CompWkv, CompWgate, CompApe, CompNorm,              // attn.compressor (CSA, HCA)
  IdxCompWkv, IdxCompWgate, IdxCompApe, IdxCompNorm,  // attn.indexer.compressor (CSA)
  IdxWqB, IdxWeightsProj,                             // attn.indexer (CSA)
  // MoE
  Gate, GateBias, Tid2Eid,       // router (bias on score-routed layers, tid2eid on hash layers)
  ExpertW1, ExpertW3, ExpertW2,  // ffn.experts.<expert>
  SharedW1, SharedW3, SharedW2,  // ffn.shared_experts
};
const char* tensor_role_name(TensorRole role);

struct TensorSpec {
  std::string name;  // canonical checkpoint name, e.g. "layers.3.attn.wq_a.weight"
  TensorRole role = TensorRole::Embed;
  TensorKind kind = TensorKind::Matrix;
  int64_t rows = 1, cols = 0;
  int32_t layer = -1;   // -1: model level
  int32_t expert = -1;  // routed experts only
};

// Every tensor a config needs, in load order (model level, then layer by layer). The head is absent with
// tie_word_embeddings (it is the embedding).
std::vector<TensorSpec> weight_specs(const io::ModelConfig& cfg);

// The storage dtype official DeepSeek-V4 releases use for a tensor (for --load-format dummy): F8_E4M3 (128x128
// block scales) for the attention projections and shared experts, I8 (packed FP4, 1x32 scales) for routed
// experts, F32 for mHC parameters, sinks, ape and router bias, I64 for tid2eid, BF16 otherwise.
DType official_storage(const TensorSpec& spec);

// Matrices that kernels read as plain fp32 arrays rather than as GEMM weights (mHC mixing matrices, compressor
// ape): the CUDA backend stores them converted to fp32.
bool read_as_floats(TensorRole role);

}  // namespace dsinfer::model
