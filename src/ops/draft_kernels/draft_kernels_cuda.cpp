// Argument checks and launches of the drafter kernels (see draft_kernels_cuda.h).
#include "ops/draft_kernels/draft_kernels_cuda.h"

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_common.h"

namespace dsinfer::ops::cuda {

Status draft_attention_cuda(const DraftAttnArgs& a, void* stream) {
  if (a.T == 0) return Status::ok();
  if (a.T < 0 || a.T > 0x7fffffff || a.heads <= 0 || a.heads > 65535 || a.dim <= 0 || a.max_keys < 0 || a.window <= 0)
    return Status::errorf("draft_attention: bad shape T={} heads={} dim={} max_keys={} window={}", a.T, a.heads, a.dim,
                          a.max_keys, a.window);
  if (draft_attention_smem(a.max_keys, a.dim, false) > 48 * 1024)
    return Status::errorf("draft_attention: {} keys of {} channels exceed shared memory", a.max_keys, a.dim);
  if (!a.q || !a.kv || !a.ring || !a.keys || !a.sinks || !a.out) return Status::error("draft_attention: null pointer");
  if ((a.q_norm_rope || a.out_rope) &&
      (a.dim % 4 != 0 || a.rope_dim <= 0 || a.rope_dim % 2 != 0 || a.rope_dim > a.dim || !a.pos || !a.inv_freq ||
       reinterpret_cast<uintptr_t>(a.q) % 16 != 0 || reinterpret_cast<uintptr_t>(a.out) % 16 != 0))
    return Status::errorf("draft_attention: the fused RoPE needs dim % 4 == 0 (dim {}), an even rope_dim <= dim ({}), "
                          "positions, inv_freq and 16-byte aligned q and out", a.dim, a.rope_dim);
  detail::launch_draft_attention(a, stream);
  DSI_CUDA_LAUNCHED("draft_attention_kernel");
  return Status::ok();
}

Status stream_mean_cuda(const float* hidden, const int32_t* rows, int64_t T, int64_t layers, int64_t n, int64_t dim,
                        float* feats, void* stream) {
  if (T == 0) return Status::ok();
  if (T < 0 || T > 0x7fffffff || layers <= 0 || n <= 0 || dim <= 0)
    return Status::errorf("stream_mean: bad shape T={} layers={} n={} dim={}", T, layers, n, dim);
  if (!hidden || !rows || !feats) return Status::error("stream_mean: null pointer");
  detail::launch_stream_mean(hidden, rows, T, layers, n, dim, feats, stream);
  DSI_CUDA_LAUNCHED("stream_mean_kernel");
  return Status::ok();
}

Status ring_scatter_cuda(const float* kv, const int32_t* slot, const int64_t* pos, int64_t T, int64_t dim, float* ring,
                         int64_t slot_stride, int64_t window, void* stream, const int32_t* rows) {
  if (T == 0) return Status::ok();
  if (T < 0 || T > 0x7fffffff || dim <= 0 || window <= 0 || slot_stride < window * dim)
    return Status::errorf("ring_scatter: bad shape T={} dim={} window={} slot_stride={}", T, dim, window, slot_stride);
  if (!kv || !slot || !pos || !ring) return Status::error("ring_scatter: null pointer");
  detail::launch_ring_scatter(kv, slot, pos, rows, T, dim, ring, slot_stride, window, stream);
  DSI_CUDA_LAUNCHED("ring_scatter_kernel");
  return Status::ok();
}

Status draft_pick_cuda(const DraftPickArgs& a, void* stream) {
  if (a.B == 0) return Status::ok();
  if (a.B < 0 || a.B > 0x7fffffff || a.vocab <= 0 || a.vocab > 0x7fffffff || a.logits_ld < a.vocab || a.out_ld <= 0)
    return Status::errorf("draft_pick: bad shape B={} vocab={} ld={} out_ld={}", a.B, a.vocab, a.logits_ld, a.out_ld);
  if (!a.logits || !a.ids) return Status::error("draft_pick: null logits or ids");
  if (a.conf_w && (!a.h || a.dim <= 0 || a.h_ld < a.dim || a.rank < 0 || (a.rank > 0 && !a.e) || !a.conf))
    return Status::errorf("draft_pick: bad confidence inputs dim={} rank={}", a.dim, a.rank);
  if (a.next_e && (!a.next_table || a.rank <= 0))
    return Status::errorf("draft_pick: the next Markov row needs its table and rank > 0 (rank={})", a.rank);
  detail::launch_draft_pick(a, stream);
  DSI_CUDA_LAUNCHED("draft_pick_kernel");
  return Status::ok();
}

Status draft_picks_cuda(const DraftPicksArgs& a, void* stream) {
  if (a.B == 0 || a.g == 0) return Status::ok();
  if (a.g < 0 || !draft_picks_supported(a.vocab, a.rank, a.B) || a.logits_ld < a.g * a.vocab || a.blocks <= 0)
    return Status::errorf("draft_picks: bad shape B={} g={} vocab={} rank={} ld={} blocks={}", a.B, a.g, a.vocab,
                          a.rank, a.logits_ld, a.blocks);
  if (!a.logits || !a.markov_head || !a.markov_embed || !a.e || !a.ids || !a.prev || !a.part_v || !a.part_i ||
      !a.barrier || (a.conf_w && (!a.h || a.dim <= 0 || !a.conf)))
    return Status::error("draft_picks: null pointer");
  detail::launch_draft_picks(a, stream);
  DSI_CUDA_LAUNCHED("draft_picks_kernel");
  return Status::ok();
}

Status draft_moe_cuda(const DraftMoeArgs& a, void* stream) {
  if (a.T == 0) return Status::ok();
  if (!draft_moe_supported(a.T, a.topk, a.experts, a.dim, a.inter, a.shared_inter) ||
      a.h_ld < std::max(a.inter, a.shared_inter))
    return Status::errorf("draft_moe: bad shape T={} topk={} experts={} dim={} inter={} shared={} h_ld={}", a.T, a.topk,
                          a.experts, a.dim, a.inter, a.shared_inter, a.h_ld);
  if (!a.x || !a.idx || !a.weight || !a.w1 || !a.w3 || !a.w2 || !a.h || !a.out ||
      (a.shared_inter > 0 && (!a.sw1 || !a.sw3 || !a.sw2)))
    return Status::error("draft_moe: null pointer");
  if (a.gate && !draft_moe_routes(a.T, a.experts, a.topk, a.router))
    return Status::errorf("draft_moe: cannot route T={} experts={} topk={} (score {}, hash vocab {}) in the kernel", a.T,
                          a.experts, a.topk, int(a.router.score), a.router.hash_vocab);
  detail::launch_draft_moe(a, stream);
  DSI_CUDA_LAUNCHED("draft_moe_up_kernel / draft_moe_down_kernel");
  return Status::ok();
}

Status copy_rows_cuda(const float* src, const int32_t* src_rows, float* dst, const int32_t* dst_rows, int64_t T,
                      int64_t width, void* stream) {
  if (T == 0) return Status::ok();
  if (T < 0 || T > 0x7fffffff || width <= 0) return Status::errorf("copy_rows: bad shape T={} width={}", T, width);
  if (!src || !dst) return Status::error("copy_rows: null pointer");
  detail::launch_copy_rows(src, src_rows, dst, dst_rows, T, width, stream);
  DSI_CUDA_LAUNCHED("copy_rows_kernel");
  return Status::ok();
}

Status add_rows_cuda(const float* b, int64_t T, int64_t rep, int64_t dim, float* y, void* stream) {
  if (T == 0) return Status::ok();
  if (T < 0 || T > 0x7fffffff || rep <= 0 || dim <= 0) return Status::errorf("add_rows: bad shape T={} rep={} dim={}", T, rep, dim);
  if (!b || !y) return Status::error("add_rows: null pointer");
  detail::launch_add_rows(b, T, rep, dim, y, stream);
  DSI_CUDA_LAUNCHED("add_rows_kernel");
  return Status::ok();
}

Status spec_round_cuda(const SpecRoundArgs& a, void* stream) {
  if (a.Bp == 0) return Status::ok();
  if (a.B < 0 || a.Bp < a.B || a.g <= 0 || a.g > kSpecRoundMaxBlock || a.vocab <= 0 || a.vocab > 0x7fffffff ||
      a.window < a.g + 1)
    return Status::errorf("spec_round: bad shape B={} Bp={} g={} vocab={} window={}", a.B, a.Bp, a.g, a.vocab, a.window);
  if ((a.B > 0 && (!a.rows || !a.drafts || !a.logits)) || !a.accepted || !a.tokens || !a.tok || !a.pos || !a.keys ||
      !a.prev || !a.ing_rows || !a.ing_slot || !a.ing_pos)
    return Status::error("spec_round: null pointer");
  detail::launch_spec_round(a, stream);
  DSI_CUDA_LAUNCHED("spec_round_kernel");
  return Status::ok();
}

}  // namespace dsinfer::ops::cuda
