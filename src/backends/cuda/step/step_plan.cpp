// Packing of the CUDA runner's step plan (see step_plan.h).
#include "backends/cuda/step/step_plan.h"

#include <algorithm>
#include <cstring>

namespace dsinfer::backends {

Result<StepPlanLayout> layout_step_plan(const scheduler::BatchPlan& plan, const cache::StateLayout& state,
                                        int64_t vocab, bool fixed_shape, int64_t max_model_len, int64_t prev_rows) {
  StepPlanLayout L;
  L.T = plan.num_tokens();
  L.S = plan.num_seqs();
  L.R = plan.num_logits();
  L.F = int64_t(plan.token_fills.size());
  for (const auto& s : plan.seqs) {
    L.table_stride = std::max<int64_t>(L.table_stride, int64_t(s.block_table.size()));
    L.max_pos = std::max<int64_t>(L.max_pos, s.start_pos + s.num_new_tokens - 1);
  }
  if (fixed_shape) {
    if (L.table_stride * state.block_size > max_model_len + state.block_size || L.max_pos >= max_model_len)
      return Status::errorf("cuda runner: a sequence exceeds max_model_len {}", max_model_len);
    L.table_stride = state.blocks_per_sequence(max_model_len);
    L.max_pos = max_model_len - 1;
  }
  size_t f = 0;  // fills are in token order: each kPendingToken must be the next fill's token
  for (int64_t i = 0; i < L.T; ++i) {
    const int32_t t = plan.token_ids[size_t(i)];
    if (t == scheduler::kPendingToken && f < plan.token_fills.size() && plan.token_fills[f].token_index == i) {
      const int32_t row = plan.token_fills[f++].sample_row;
      if (row < 0 || row >= prev_rows)
        return Status::errorf("cuda runner: token {} is filled from sample row {}, the previous sampling has {} rows", i,
                              row, prev_rows);
      continue;
    }
    if (t < 0 || t >= vocab) return Status::errorf("cuda runner: token id {} outside the vocabulary [0, {})", t, vocab);
  }
  if (f != plan.token_fills.size()) return Status::error("cuda runner: a token fill names a token that is not pending");
  size_t off = 0;
  auto reserve = [&](size_t bytes) {
    const size_t o = off;
    off = (off + bytes + 15) / 16 * 16;
    return o;
  };
  const size_t T = size_t(L.T), S = size_t(L.S);
  L.tokens = reserve(T * 4);
  L.pos = reserve(T * 8);
  L.seq_of_token = reserve(T * 4);
  L.cu_seqlens = reserve((S + 1) * 4);
  L.start_pos = reserve(S * 8);
  L.slot = reserve(S * 4);
  L.block_tables = reserve(S * size_t(L.table_stride) * 4);
  L.logits_rows = reserve(size_t(std::max<int64_t>(L.R, 1)) * 4);
  L.fills = reserve(size_t(L.F) * 8);
  L.bytes = off;
  return L;
}

bool fixed_shape_step(const scheduler::BatchPlan& plan, const cache::StateLayout& state, int64_t max_model_len) {
  const int64_t T = plan.num_tokens(), S = plan.num_seqs(), R = plan.num_logits();
  if (max_model_len <= 0 || S <= 0 || T % S != 0 || T / S > 17) return false;
  if (T == S ? R != S : R != T) return false;  // decode: a row per sequence; verify: a row per token
  for (const auto& s : plan.seqs) {
    if (s.num_new_tokens != T / S) return false;
    if (T != S && (!s.needs_logits || s.num_spec_tokens != T / S - 1)) return false;
    // The verify step's drafts must fit the fixed layout (a decode step beyond it is an error layout reports).
    if (T != S && (s.start_pos + s.num_new_tokens > max_model_len ||
                   int64_t(s.block_table.size()) * state.block_size > max_model_len + state.block_size))
      return false;
  }
  return true;
}

int64_t graph_bucket_seqs(int64_t seqs) {
  if (seqs <= 2) return seqs;
  if (seqs <= 4) return 4;
  if (seqs <= 256) return (seqs + 7) / 8 * 8;
  return (seqs + 31) / 32 * 32;
}

void pad_fixed_step(const scheduler::BatchPlan& plan, int64_t seqs, const StepPadding& pad, int64_t block_size,
                    std::vector<cache::BlockId>& table, scheduler::BatchPlan& out) {
  out = plan;
  const int64_t S = plan.num_seqs();
  if (S <= 0 || seqs <= S) return;
  const int32_t n = int32_t(plan.num_tokens() / S);  // tokens per sequence (fixed shape: the same for all)
  const bool verify = n > 1;
  table.assign(size_t((n + block_size - 1) / block_size), pad.block);
  for (int64_t s = S; s < seqs; ++s) {
    scheduler::SeqPlan sp;
    sp.start_pos = 0;
    sp.num_new_tokens = n;
    sp.token_offset = out.num_tokens();
    sp.needs_logits = true;
    sp.logits_row = out.num_logits();
    sp.num_spec_tokens = n - 1;
    sp.slot = pad.slot;
    sp.block_table = table;
    for (int32_t i = 0; i < n; ++i) {
      out.token_ids.push_back(pad.token);
      out.positions.push_back(i);
      if (verify || i == n - 1) out.logits_token_index.push_back(sp.token_offset + i);
    }
    out.cu_seqlens.push_back(out.num_tokens());
    out.seqs.push_back(sp);
  }
}

void pack_step_plan(const scheduler::BatchPlan& plan, const StepPlanLayout& L, uint8_t* dst) {
  std::memset(dst, 0, L.bytes);
  auto put = [&](size_t o, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst + o, src, bytes);
  };
  put(L.tokens, plan.token_ids.data(), size_t(L.T) * 4);
  put(L.pos, plan.positions.data(), size_t(L.T) * 8);
  put(L.cu_seqlens, plan.cu_seqlens.data(), size_t(L.S + 1) * 4);
  put(L.logits_rows, plan.logits_token_index.data(), size_t(L.R) * 4);
  for (int64_t i = 0; i < L.F; ++i) {
    const scheduler::TokenFill& f = plan.token_fills[size_t(i)];
    const int32_t pair[2] = {f.token_index, f.sample_row}, zero = 0;
    put(L.fills + size_t(i) * 8, pair, 8);
    put(L.tokens + size_t(f.token_index) * 4, &zero, 4);  // the gather writes it; 0 is a valid id meanwhile
  }
  for (int64_t s = 0; s < L.S; ++s) {
    const scheduler::SeqPlan& sp = plan.seqs[size_t(s)];
    const int32_t si = int32_t(s);
    for (int32_t i = 0; i < sp.num_new_tokens; ++i) put(L.seq_of_token + size_t(sp.token_offset + i) * 4, &si, 4);
    put(L.start_pos + size_t(s) * 8, &sp.start_pos, 8);
    put(L.slot + size_t(s) * 4, &sp.slot, 4);
    put(L.block_tables + size_t(s * L.table_stride) * 4, sp.block_table.data(), sp.block_table.size() * 4);
  }
}

ops::StepDevice step_device(const StepPlanLayout& L, const uint8_t* base) {
  ops::StepDevice st;
  st.T = L.T;
  st.num_seqs = L.S;
  st.tokens = reinterpret_cast<const int32_t*>(base + L.tokens);
  st.pos = reinterpret_cast<const int64_t*>(base + L.pos);
  st.seq_of_token = reinterpret_cast<const int32_t*>(base + L.seq_of_token);
  st.cu_seqlens = reinterpret_cast<const int32_t*>(base + L.cu_seqlens);
  st.start_pos = reinterpret_cast<const int64_t*>(base + L.start_pos);
  st.slot = reinterpret_cast<const int32_t*>(base + L.slot);
  st.block_tables = reinterpret_cast<const int32_t*>(base + L.block_tables);
  st.table_stride = L.table_stride;
  return st;
}

void fill_step_tokens_ref(int32_t* tokens, int64_t T, const int32_t* fills, int64_t F, const int32_t* sampled,
                          int64_t num_sampled, int64_t vocab) {
  for (int64_t i = 0; i < F; ++i) {
    const int32_t idx = fills[2 * i], row = fills[2 * i + 1];
    if (idx < 0 || idx >= T) continue;
    const int32_t id = row >= 0 && row < num_sampled ? sampled[row] : -1;
    tokens[idx] = id >= 0 && id < vocab ? id : 0;
  }
}

void fill_chained_step_ref(int32_t* tokens, int64_t* pos, int64_t* start_pos, int64_t S, int64_t n,
                           const int32_t* accepted, const int32_t* verified, const int32_t* drafts, int64_t block) {
  for (int64_t s = 0; s < S; ++s) {
    const int64_t a = std::clamp<int64_t>(accepted[s], 0, block);
    const int64_t start = start_pos[s] + 1 + a;
    for (int64_t j = 0; j < n; ++j) {
      tokens[s * n + j] = j == 0 ? verified[s * (block + 1) + a] : drafts[s * block + j - 1];
      pos[s * n + j] = start + j;
    }
    start_pos[s] = start;
  }
}

}  // namespace dsinfer::backends
