// Parameters and kernel launchers behind draft_kernels_cuda.h (no CUDA types, no Status; validated by
// draft_kernels_cuda.cpp).
#pragma once
#include <cstdint>

#include "ops/moe/moe_launch.h"  // RouterCudaParams, ScoreFunc

namespace dsinfer::ops::cuda {

// Keys of one query token of the drafter's window attention: ring positions [ring_lo, ring_hi) of `slot` (row
// pos % window of the layer's ring), then rows [new_lo, new_hi) of this call's kv.
struct DraftKeys {
  int32_t slot = 0, new_lo = 0, new_hi = 0, pad = 0;
  int64_t ring_lo = 0, ring_hi = 0;
};

struct DraftAttnArgs {
  const float* q = nullptr;      // [T, heads, dim]
  const float* kv = nullptr;     // [rows, dim]: this call's K=V rows
  const float* ring = nullptr;   // the layer's ring of slot 0: row (slot, p) at ring + slot*slot_stride + (p % window)*dim
  int64_t slot_stride = 0, window = 0;
  const DraftKeys* keys = nullptr;  // [T]
  const float* sinks = nullptr;     // [heads]
  float scale = 1.0f;
  int64_t T = 0, heads = 0, dim = 0, max_keys = 0;
  float* out = nullptr;  // [T, heads, dim]
  // The RoPE around the core, fused (the drafter's attention; head_norm_rope's bits, ops/rope/rope_cuda.h): with
  // q_norm_rope, q is wq_b's raw output and each (token, head) vector gets head_norm_rope's unweighted RMS norm
  // (eps q_eps) and RoPE before its scores; with out_rope, the output gets the inverse RoPE. Both read pos [T] and
  // inv_freq [rope_dim / 2]; dim % 4 == 0, rope_dim even and <= dim, q and out 16-byte aligned (head_norm_rope's
  // own conditions).
  const int64_t* pos = nullptr;
  const float* inv_freq = nullptr;
  int64_t rope_dim = 0;
  float attention_factor = 1.0f, q_eps = 0.0f;
  bool q_norm_rope = false, out_rope = false;
};

// Greedy draft pick of one draft position for B sequences (DSpark: after the Markov bias of the predecessor):
// conf[b] = conf_b + conf_w . [h_b ; e_b] (when conf), ids[b] = prev[b] = argmax_v logits[b] (NaN as -inf, ties
// to the lower id, like sampling's argmax). Row b of logits / h / e / ids / conf is at b * its stride.
struct DraftPickArgs {
  const float* logits = nullptr;
  int64_t logits_ld = 0, vocab = 0;
  const float* h = nullptr;  // [B, h_ld] (confidence only)
  int64_t h_ld = 0, dim = 0;
  const float* e = nullptr;  // [B, rank] Markov rows W1[prev] (may be null when rank is 0)
  int64_t rank = 0;
  const float* conf_w = nullptr;  // [dim + rank]; null = no confidence
  float conf_b = 0.0f;
  int64_t B = 0, out_ld = 1;
  int32_t* ids = nullptr;   // ids[b * out_ld]
  float* conf = nullptr;    // conf[b * out_ld]
  int32_t* prev = nullptr;  // [B], may be null
  // When set: next_e[b * rank + :rank] = next_table[pick * rank + :rank] after the pick (the next draft position's
  // Markov row W1[x_k], so no gather kernel runs before it); next_e may be e (read above, before the pick).
  const float* next_table = nullptr;
  float* next_e = nullptr;
};

// Every draft position's Markov bias, confidence logit and greedy pick of a DSpark block in one launch (the chained
// form of g x (bias GEMM + draft_pick) plus the first position's Markov gather). Position k of sequence b: logits row
// b * logits_ld + k * vocab gets += markov_head . W1[x] (x = prev[b] at k = 0, else the pick of k - 1), with the bias
// summed in the order of the fp32 skinny GEMM kernel (4-element fma chains per 16-byte weight vector, then its
// butterfly), so the row equals the GEMM path's bit for bit wherever that path takes the skinny kernel (exact mode; the
// default mode at <= 8 padded sequences); then the confidence logit and argmax as draft_pick_kernel computes them.
// Blocks split the vocabulary in 32-wide slices; one grid barrier per position (a software barrier: the grid is at
// most draft_picks_max_blocks blocks of 256 threads, all resident), after which every block folds the slices' argmaxes
// of every sequence itself and only the sequence's owner block (b % grid) writes its outputs.
struct DraftPicksArgs {
  float* logits = nullptr;  // [B, g, vocab] rows at b * logits_ld + k * vocab; the bias is added in place
  int64_t logits_ld = 0, vocab = 0;
  const float* h = nullptr;  // [B, g, dim]: position k of b at b * g * dim + k * dim
  int64_t dim = 0;
  const float* markov_head = nullptr;   // [vocab, rank] F32 (W2)
  const float* markov_embed = nullptr;  // [vocab, rank] F32 (W1)
  float* e = nullptr;                   // [B, rank]: left holding W1[x] of the last position's predecessor
  int64_t rank = 0;                     // 0 < rank <= kDraftPicksMaxRank, rank % 4 == 0
  const float* conf_w = nullptr;        // [dim + rank]
  float conf_b = 0.0f;
  int64_t B = 0, g = 0;
  int32_t* ids = nullptr;   // [B, g]
  float* conf = nullptr;    // [B, g]
  int32_t* prev = nullptr;  // [B]: in the predecessor of position 0, out the last pick
  float* part_v = nullptr;  // [g, B, slices] scratch: each 32-wide slice's best value and id
  int32_t* part_i = nullptr;
  unsigned* barrier = nullptr;  // [2] zero-initialised once (arrivals, generation); left ready for the next launch
  int32_t blocks = 0;           // grid (draft_picks_blocks)
};
inline constexpr int64_t kDraftPicksMaxRank = 64, kDraftPicksMaxB = 1024, kDraftPicksMaxVocab = 65536;
inline constexpr int32_t kDraftPicksSeqPerItem = 8;  // sequences a warp's work item covers (one 32-wide slice)
// Whether the fused picks take this shape (else the per-position kernels): the Markov rank in registers, the
// sequences' picks in shared memory, the slices' argmaxes folded by every block.
inline bool draft_picks_supported(int64_t vocab, int64_t rank, int64_t B) {
  return rank > 0 && rank <= kDraftPicksMaxRank && rank % 4 == 0 && B > 0 && B <= kDraftPicksMaxB && vocab > 0 &&
         vocab <= kDraftPicksMaxVocab;
}
// The drafter's choice (DsparkCuda::picks_fused): the fused picks up to this many padded sequences by default, where
// they beat the per-position kernels (H200, session 26, V4-Flash's drafter, the propose graph with the ingest: 1
// sequence 0.288 -> 0.218 ms with the fused MoE, 2 0.388 -> 0.381; 4 0.426 either way; 8 0.441 -> 0.454, 64 0.605
// -> 0.650 ms: bench/NOTES.md).
inline constexpr int64_t kDraftPicksFusedMaxB = 2;
inline int64_t draft_picks_slices(int64_t vocab) { return (vocab + 31) / 32; }
// Grid of the fused picks: one warp per work item (a slice x up to 8 sequences), 8 warps a block, at most max_blocks
// (the SM count: every block resident for the grid barrier).
inline int32_t draft_picks_blocks(int64_t vocab, int64_t B, int32_t max_blocks) {
  const int64_t items = draft_picks_slices(vocab) * ((B + kDraftPicksSeqPerItem - 1) / kDraftPicksSeqPerItem);
  const int64_t want = (items + 7) / 8;
  return int32_t(want < 1 ? 1 : (want > max_blocks ? max_blocks : want));
}

// The drafter's MoE layer for a few tokens in two launches (instead of count, scatter, w1, w3, SwiGLU, w2, the shared
// expert's w1, w3, SwiGLU, w2 and the combine): (1) per (token, expert slot: the k routed, then the shared) and
// intermediate channel, the gate and up dot products and the clamped SwiGLU into h; (2) per (token, channel) the down
// dot products of every slot and the combine (routing weights in k order, then + shared). Every dot product is one
// warp's, summed as the fp32 skinny GEMM kernel sums a row (16-byte weight vectors on lanes in K order, chunks of 256,
// then its butterfly), the SwiGLU and the combine as swiglu_kernel / combine_kernel: the same bits as moe_cuda's exact
// path wherever that path's GEMMs take the skinny kernel (draft_moe_supported). F32 weights only.
struct DraftMoeArgs {
  const float* x = nullptr;  // [T, dim]
  int64_t T = 0, dim = 0, topk = 0, experts = 0, inter = 0, shared_inter = 0;  // shared_inter 0: no shared expert
  int32_t* idx = nullptr;  // [T, topk] (an id outside [0, experts) skips the assignment, as moe_cuda does)
  float* weight = nullptr;  // [T, topk]
  // With gate set, the up kernel routes the tokens itself into idx and weight (written by its first block; the down
  // kernel reads them): the router GEMM's logits (gate [experts, dim] F32, each summed as the skinny kernel sums an
  // output) and route_cuda's scores, selection and weights (ops/moe/route.cuh), so the same bits as gemm_cuda +
  // route_cuda where draft_moe_routes holds. Else idx and weight are inputs.
  const float* gate = nullptr;
  const float* gate_bias = nullptr;  // [experts] (may be null)
  RouterCudaParams router;
  const void* const* w1 = nullptr;  // [experts] -> [inter, dim]
  const void* const* w3 = nullptr;
  const void* const* w2 = nullptr;  // [experts] -> [dim, inter]
  const float *sw1 = nullptr, *sw3 = nullptr, *sw2 = nullptr;  // shared [shared_inter, dim] x 2, [dim, shared_inter]
  float limit = 0.0f, shared_limit = 0.0f;
  float* h = nullptr;  // [T, topk + 1, h_ld] scratch
  int64_t h_ld = 0;    // >= max(inter, shared_inter)
  float* out = nullptr;  // [T, dim]
};
// The shapes whose moe_cuda exact path runs every GEMM on the skinny kernel (T <= 8 rows and T * topk <= 8 per
// expert), with 16-byte weight vectors: there the fused MoE gives its bits.
inline bool draft_moe_supported(int64_t T, int64_t topk, int64_t experts, int64_t dim, int64_t inter,
                                int64_t shared_inter) {
  return T > 0 && T <= 8 && topk > 0 && experts > 0 && T * topk <= 8 * experts && dim > 0 && dim % 4 == 0 &&
         inter > 0 && inter % 4 == 0 && shared_inter >= 0 && shared_inter % 4 == 0;
}
// Where the fused MoE also routes (DraftMoeArgs::gate; on top of draft_moe_supported): a warp a token (T <= 8, the
// up kernel's warps), one expert a lane (route_cuda's selection at one expert a lane), element-wise scores (no
// softmax), no hash table. The caller's router GEMM must be the skinny kernel's (F32 weights at <= 8 rows).
inline constexpr int64_t kDraftMoeRouteMaxExperts = 32, kDraftMoeRouteMaxTopk = 8;
inline bool draft_moe_routes(int64_t T, int64_t experts, int64_t topk, const RouterCudaParams& r) {
  return T > 0 && T <= 8 && experts > 0 && experts <= kDraftMoeRouteMaxExperts && topk > 0 &&
         topk <= kDraftMoeRouteMaxTopk && topk <= experts && r.experts == experts && r.topk == topk &&
         r.score != ScoreFunc::Softmax && r.hash_vocab == 0;
}

// One round of speculative decoding on the device (the one-wait round, DsparkCuda::verify_and_propose): per
// sequence b < B the greedy acceptance of its verify rows, then the next round's DSpark inputs from it, so the drafter's
// graph follows the verify step with no host wait between. Row b of `rows` describes sequence b; the verify logits hold
// rows logits_row .. logits_row + L of vocab floats (ld = vocab); drafts[b * g + k], k < L, are the verified drafts.
struct SpecRoundRow {
  int64_t start_pos = 0;      // the verify step's first position (the anchor it verified from)
  int64_t context_start = 0;  // the first position the next proposal may read (ProposeItem::context_start)
  int32_t slot = 0;
  int32_t L = 0;              // drafts verified (rows L + 1)
  int32_t logits_row = 0;
  int32_t cap_row = 0;        // the capture row of start_pos (SeqPlan::token_offset)
};

struct SpecRoundArgs {
  const SpecRoundRow* rows = nullptr;  // [B]
  const int32_t* drafts = nullptr;     // [B, g]
  const float* logits = nullptr;       // the verify step's logits
  int64_t vocab = 0;
  int32_t B = 0, Bp = 0, g = 0;        // sequences, padded sequences (grid), block size (<= kSpecRoundMaxBlock)
  int64_t window = 0;                  // the drafter's ring rows
  int32_t noise_token = 0;
  // Acceptance (downloaded): accepted[b] = the longest prefix of drafts equal to the target's argmax; tokens[b * (g +
  // 1) + t], t <= accepted[b], the target's argmax of row t (the accepted drafts, then the bonus token); -1 after.
  int32_t* accepted = nullptr;  // [Bp]
  int32_t* tokens = nullptr;    // [Bp, g + 1]
  // The next propose's inputs, laid out as DsparkCuda::upload_block writes them (padding sequences b >= B the same).
  int32_t* tok = nullptr;       // [Bp, g]
  int64_t* pos = nullptr;       // [Bp, g]
  DraftKeys* keys = nullptr;    // [Bp, g]
  int32_t* prev = nullptr;      // [Bp]
  // The fused ingest's rows of the committed positions: sequence b's positions start_pos .. start_pos + accepted at
  // rows b * (g + 1) + t; the rest padding (row 0, slot -1, position 0).
  int32_t* ing_rows = nullptr;  // [Bp, g + 1]
  int32_t* ing_slot = nullptr;
  int64_t* ing_pos = nullptr;
};
inline constexpr int32_t kSpecRoundMaxBlock = 255;

// The window attention's shared memory: the scores (max_keys doubles + 2), rounded up to 16 bytes so that the floats
// after them take 16-byte stores; the staged key rows where they fit; one [dim] vector (the fused RoPE's query, then
// its output before the inverse RoPE).
constexpr int64_t draft_attention_score_doubles(int64_t max_keys) { return (max_keys + 3) / 2 * 2; }
inline int64_t draft_attention_smem(int64_t max_keys, int64_t dim, bool staged) {
  return draft_attention_score_doubles(max_keys) * 8 + ((staged ? max_keys : 0) + 1) * dim * 4;
}
// Its launch shape: the key rows staged in shared memory when they fit the default 48 KB beside the scores; else
// every read goes to global memory (the same bits either way).
inline bool draft_attention_stages(int64_t max_keys, int64_t dim) {
  return draft_attention_smem(max_keys, dim, true) <= 48 * 1024;
}

namespace detail {

void launch_draft_attention(const DraftAttnArgs& a, void* stream);           // draft_kernels.cu ("draft_attention_kernel")
// feats[t, l*dim + d] = mean_j hidden[rows[t], l, j, d] (float sum in stream order, then / n).
void launch_stream_mean(const float* hidden, const int32_t* rows, int64_t T, int64_t layers, int64_t n, int64_t dim,
                        float* feats, void* stream);                         // ("stream_mean_kernel")
// ring[slot[r]*slot_stride + (pos[r] % window)*dim + :dim] = kv[r] for t < T.
// rows (may be null = 0..T-1): the call's t-th row is r = rows[t] of kv, slot and pos.
void launch_ring_scatter(const float* kv, const int32_t* slot, const int64_t* pos, const int32_t* rows, int64_t T,
                         int64_t dim, float* ring, int64_t slot_stride, int64_t window, void* stream);  // ("ring_scatter_kernel")
// y[t] = a[t] + b[t / rep] for t < T rows of dim floats (MTP-1: per-stream h_proj plus the token's e_proj).
void launch_draft_pick(const DraftPickArgs& a, void* stream);  // ("draft_pick_kernel")
// dst[dst_rows[t]] = src[src_rows[t]] for t < T rows of width floats (a null index array = t).
void launch_copy_rows(const float* src, const int32_t* src_rows, float* dst, const int32_t* dst_rows, int64_t T,
                      int64_t width, void* stream);  // ("copy_rows_kernel")
void launch_add_rows(const float* b, int64_t T, int64_t rep, int64_t dim, float* y, void* stream);  // ("add_rows_kernel")
void launch_spec_round(const SpecRoundArgs& a, void* stream);  // ("spec_round_kernel")
void launch_draft_picks(const DraftPicksArgs& a, void* stream);  // ("draft_picks_kernel")
void launch_draft_moe(const DraftMoeArgs& a, void* stream);  // ("draft_moe_up_kernel", "draft_moe_down_kernel")

}  // namespace detail

}  // namespace dsinfer::ops::cuda
