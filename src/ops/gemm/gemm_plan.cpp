// The GEMM kernel choice (see gemm_plan.h): environment settings, the runner's call plan, and the kernel plans with
// their launch shapes (streaming, GEMV, batch-invariant).
#include "ops/gemm/gemm_plan.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

#include "ops/gemm/gemm_common.h"
#include "ops/gemm/gemm_lt_quant.h"

namespace dsinfer::ops::cuda {

Result<GemmSettings> gemm_settings_from(const char* cublaslt, const char* min_m, const char* act,
                                        const char* segments, const char* stack, const char* fp8_skinny) {
  GemmSettings s;
  const std::string on = cublaslt ? cublaslt : "";
  if (!on.empty()) {
    if (on != "0" && on != "1") return Status::errorf("DSINFER_CUBLASLT must be 0 or 1, found '{}'", on);
    s.cublaslt = on == "1";
  }
  if (min_m && *min_m) {
    char* end = nullptr;
    errno = 0;
    const long long r = std::strtoll(min_m, &end, 10);
    if (*end != '\0' || errno == ERANGE || r < 1)
      return Status::errorf("DSINFER_CUBLASLT_MIN_M must be an integer >= 1, found '{}'", min_m);
    s.lt_min_m = int64_t(r);
  }
  const std::string a = act ? act : "";
  if (a == "fp8") s.lt_activations = GemmLtActivations::kFp8;
  else if (a == "fp8x2") s.lt_activations = GemmLtActivations::kFp8x2;
  else if (a == "bf16") s.lt_activations = GemmLtActivations::kBf16;
  else if (a == "auto") s.lt_activations = GemmLtActivations::kAuto;
  else if (!a.empty()) return Status::errorf("DSINFER_CUBLASLT_ACT must be fp8, fp8x2, bf16 or auto, found '{}'", a);
  const std::string seg = segments ? segments : "";
  if (!seg.empty()) {
    if (seg != "0" && seg != "1" && seg != "skinny")
      return Status::errorf("DSINFER_GEMM_SEGMENTS must be 0, skinny or 1, found '{}'", seg);
    s.segments = seg != "0";
    s.segments_stream = seg == "1";
  }
  const std::string st = stack ? stack : "";
  if (st == "0") s.lt_stack = GemmLtStack::kOff;
  else if (st == "auto") s.lt_stack = GemmLtStack::kAuto;
  else if (st == "all") s.lt_stack = GemmLtStack::kAll;
  else if (!st.empty()) return Status::errorf("DSINFER_CUBLASLT_STACK must be 0, auto or all, found '{}'", st);
  const std::string sk = fp8_skinny ? fp8_skinny : "";
  if (sk == "auto") s.fp8_skinny = GemmFp8Skinny::kAuto;
  else if (sk == "0") s.fp8_skinny = GemmFp8Skinny::kOff;
  else if (sk == "1" || sk == "fp8x2") s.fp8_skinny = GemmFp8Skinny::kTwoTerms;
  else if (sk == "fp8") s.fp8_skinny = GemmFp8Skinny::kOneTerm;
  else if (!sk.empty())
    return Status::errorf("DSINFER_GEMM_FP8_SKINNY must be auto, 0, 1, fp8x2 or fp8, found '{}'", sk);
  return s;
}

Result<GemmSettings> gemm_settings_from_env() {
  return gemm_settings_from(std::getenv("DSINFER_CUBLASLT"), std::getenv("DSINFER_CUBLASLT_MIN_M"),
                            std::getenv("DSINFER_CUBLASLT_ACT"), std::getenv("DSINFER_GEMM_SEGMENTS"),
                            std::getenv("DSINFER_CUBLASLT_STACK"), std::getenv("DSINFER_GEMM_FP8_SKINNY"));
}

bool gemm_lt_fp8x2_stacked(int64_t M, int64_t N, GemmLtStack setting) {
  if (setting == GemmLtStack::kOff || M < 1 || M > kGemmLtStackMaxM) return false;
  return setting == GemmLtStack::kAll || N <= kGemmLtStackMaxN;
}

bool gemm_gemv_preferred(int64_t M, int64_t N, bool grouped) {
  return M >= 1 && M <= kGemmGemvMaxM && (grouped || N > kGemmGemvMinN);
}

bool gemm_stream_preferred(int64_t M, int64_t N) {
  if (M < 1) return false;
  if (M <= kGemmGemvMaxM) return true;
  const bool mid = M > kGemmSkinnyMaxM && M <= kGemmStreamMidMaxM;
  return M <= kGemmStreamMaxM && N <= (mid ? kGemmStreamMidMaxN : kGemmStreamMaxN);
}

bool gemm_stream_fp8_preferred(int64_t M, WeightFormat fmt) {
  return fmt == WeightFormat::FP8_BLOCK && M > kGemmGemvMaxM && M <= kGemmStreamFp8MaxM;
}

bool gemm_lt_supports(const DeviceWeight& w) {
  if (!w.data || w.rows <= 0 || w.cols <= 0) return false;
  if (w.fmt == WeightFormat::FP8_BLOCK)
    return w.scale && w.block_n == gemm_lt::kWBlock && w.block_k == gemm_lt::kWBlock && w.rows % 16 == 0 &&
           w.cols % gemm_lt::kActBlock == 0;
  return (w.fmt == WeightFormat::BF16 || w.fmt == WeightFormat::F32) && w.cols % 8 == 0 && w.rows % 4 == 0;
}

bool gemm_lt_wants(const DeviceWeight& w, int64_t M, const GemmSettings& s) {
  return gemm_lt_supports(w) && M >= (w.fmt == WeightFormat::FP8_BLOCK ? s.lt_min_m : kGemmLtMinMDense);
}

GemmLtActivations gemm_lt_fp8_route(const DeviceWeight& w, int64_t M, GemmLtActivations setting) {
  const bool widens = w.fmt == WeightFormat::FP8_BLOCK && w.scale_e8m0;
  if (setting == GemmLtActivations::kAuto)
    return widens && M >= kGemmLtWideMinM ? GemmLtActivations::kBf16 : GemmLtActivations::kFp8x2;
  if (setting == GemmLtActivations::kBf16 && !widens) return GemmLtActivations::kFp8x2;
  return setting;
}

int64_t gemm_lt_fp8_max_rows(const DeviceWeight& w, int64_t max_rows, GemmLtActivations setting) {
  if (max_rows <= 0) return 0;
  if (gemm_lt_fp8_route(w, max_rows, setting) != GemmLtActivations::kBf16) return max_rows;
  // kBf16 at max_rows: kAuto keeps FP8 below kGemmLtWideMinM; an explicit kBf16 widens every call.
  const int64_t below = std::min(max_rows, kGemmLtWideMinM - 1);
  return setting == GemmLtActivations::kAuto && below > 0 ? below : 0;
}

namespace {

// Rows per kernel call and the precision outside cuBLASLt; `fast` is the fast path's own kBf16 rule.
GemmCallPlan kernel_call(int64_t M, KernelMode mode, bool fast_bf16) {
  GemmCallPlan p;
  p.chunk_rows = mode == KernelMode::kExact ? kGemmSkinnyMaxM : (M > 1 ? M : 1);
  if (mode == KernelMode::kBatchInvariant) p.precision = GemmPrecision::kBatchInvariant;
  else if (mode == KernelMode::kFast && fast_bf16) p.precision = GemmPrecision::kBf16;
  return p;
}

}  // namespace

DeviceWeight gemm_group_view(const DeviceWeight& w, int64_t groups, int64_t g) {
  const int64_t ng = w.rows / groups, kb = (w.cols + w.block_k - 1) / w.block_k;
  DeviceWeight v = w;
  v.rows = ng;
  v.data = static_cast<const uint8_t*>(w.data) + g * ng * w.cols;
  v.scale = static_cast<const uint8_t*>(w.scale) + (g * ng / w.block_n) * kb * (w.scale_e8m0 ? 1 : 4);
  return v;
}

bool gemm_fp8_skinny_supports(const DeviceWeight& w, int64_t groups) {
  if (w.fmt != WeightFormat::FP8_BLOCK || !w.data || !w.scale || w.rows <= 0 || w.cols <= 0 || groups < 1) return false;
  if (w.block_n != 128 || w.block_k != 128 || w.cols % 128 != 0) return false;
  return groups == 1 || w.rows % (128 * groups) == 0;
}

bool gemm_fp8_skinny_auto(int64_t M, int64_t N, int64_t groups) {
  if (M <= kGemmGemvMaxM || M > kGemmFp8SkinnyMaxM || groups < 1) return false;
  if (groups > 1) return M <= kGemmFp8SkinnyAutoGroupedMaxM;
  if (N > kGemmStreamMidMaxN) return true;
  return N <= kGemmStreamMaxN && M > kGemmStreamMidMaxM;
}

namespace {
// The FP8 skinny kernel's activation terms for a call (0: not taken).
int fp8_skinny_terms(const DeviceWeight& w, int64_t groups, int64_t M, KernelMode mode, const GemmSettings& s) {
  if (mode != KernelMode::kFast || s.fp8_skinny == GemmFp8Skinny::kOff || M < 1 || M > kGemmFp8SkinnyMaxM) return 0;
  if (!gemm_fp8_skinny_supports(w, groups)) return 0;
  if (s.fp8_skinny == GemmFp8Skinny::kAuto && !gemm_fp8_skinny_auto(M, w.rows / groups, groups)) return 0;
  return s.fp8_skinny == GemmFp8Skinny::kOneTerm ? 1 : 2;
}
}  // namespace

bool plan_gemm_fp8_skinny(int64_t M, int64_t N, int64_t K, int64_t groups, int terms, int sm_count,
                          detail::Fp8SkinnyParams& p) {
  int wg_rows = 1, tok = 128;
  if (M <= 128) {
    wg_rows = 2;
    tok = terms == 2 ? 8 : 16;
    while (tok < M) tok *= 2;
  }
  return plan_gemm_fp8_skinny_at(M, N, K, groups, terms, sm_count, wg_rows, tok, kGemmFp8SkinnyMaxSplits, p);
}

bool plan_gemm_fp8_skinny_at(int64_t M, int64_t N, int64_t K, int64_t groups, int terms, int sm_count, int wg_rows,
                             int tok, int max_splits, detail::Fp8SkinnyParams& p) {
  if (M < 1 || M > kGemmFp8SkinnyMaxM || N < 1 || K < 128 || K % 128 != 0 || groups < 1) return false;
  if ((terms != 1 && terms != 2) || sm_count < 1 || (wg_rows != 1 && wg_rows != 2)) return false;
  if (tok < (terms == 2 ? 8 : 16) || tok > 128 || (tok & (tok - 1)) != 0) return false;
  if (max_splits < 1 || max_splits > kGemmFp8SkinnyMaxSplits) return false;
  detail::Fp8SkinnyParams r;
  r.terms = terms;
  r.wg_rows = wg_rows;
  r.tok = tok;
  const int64_t tile_rows = 64 * r.wg_rows;
  if (groups > 1 && N % tile_rows != 0) return false;
  const int halves = 2 / r.wg_rows;
  const int64_t cta_tokens = int64_t(halves) * r.tok;
  r.token_tiles = int((M + cta_tokens - 1) / cta_tokens);
  r.units = r.token_tiles * halves;
  r.row_tiles = groups * ((N + tile_rows - 1) / tile_rows);
  r.items = r.row_tiles * r.token_tiles;
  const int64_t kbg = K / 128;
  r.splits = 1;
  // Clusters of 4 or 8 CTAs (one per SM here) need that many free SMs in one GPC (the H200's hold 16-18): kept to
  // half the SMs, so every cluster of the grid is resident at once; pairs may fill the device.
  auto fits = [&](int sp) { return r.items * sp <= (sp <= 2 ? sm_count : sm_count / 2); };
  while (r.splits < max_splits && fits(r.splits * 2) && kbg % (r.splits * 2) == 0 &&
         kbg / (r.splits * 2) >= 2)
    r.splits *= 2;
  r.kb_per_split = int(kbg / r.splits);
  if (r.kb_per_split > 128 * detail::kFp8SkWsRegs) return false;
  if (r.splits > 1) {
    r.grid = r.items * r.splits;
  } else {
    const int64_t per_cta = (r.items + sm_count - 1) / sm_count;
    r.grid = (r.items + per_cta - 1) / per_cta;
  }
  const int stage = detail::fp8sk_stage_bytes(terms, r.tok, r.wg_rows);
  const int fixed = 1024 + 8 * r.kb_per_split;  // alignment slack, the consumers' weight scales
  r.stages = 0;
  for (int st = 8; st >= 2 && r.stages == 0; --st)
    if (fixed + st * stage + 16 * st <= kGemmFp8SkinnySmemMax) r.stages = st;
  if (r.stages == 0) return false;
  if (r.splits > 1 && r.stages * stage < detail::fp8sk_partial_bytes(r.tok)) return false;
  r.smem = fixed + r.stages * stage + 16 * r.stages;
  p = r;
  return true;
}

GemmCallPlan plan_gemm_call(const DeviceWeight& w, int64_t M, KernelMode mode, const GemmSettings& s) {
  GemmCallPlan p = kernel_call(M, mode, gemm_stream_preferred(M, w.rows) || gemm_stream_fp8_preferred(M, w.fmt));
  p.lt_prepare = mode == KernelMode::kFast && s.cublaslt && gemm_lt_supports(w);
  // FP8 weights of N <= kGemmStreamMaxN (wq_a, wkv) stay on the streaming kernel up to kGemmStreamMidMaxM rows: it
  // beat cuBLASLt x2 there (H200, session 14: wq_a M = 64 27 vs 44 us, wkv 26 vs 44; M = 128 47 vs 45 / 27 vs 45;
  // in the 4-layer batch-64 decode step wq_a 0.204 -> 0.122 ms, wkv 0.154 -> 0.096 ms).
  const bool stream_wins = w.fmt == WeightFormat::FP8_BLOCK && w.rows <= kGemmStreamMaxN && M <= kGemmStreamMidMaxM;
  p.lt = p.lt_prepare && gemm_lt_wants(w, M, s) && !(mode == KernelMode::kFast && stream_wins);
  if (stream_wins && !p.lt && mode == KernelMode::kFast) p.precision = GemmPrecision::kBf16;
  p.fp8_skinny_terms = fp8_skinny_terms(w, 1, M, mode, s);
  return p;
}

bool gemm_lt_grouped_supports(const DeviceWeight& w, int64_t groups) {
  if (groups < 2 || !w.data || w.rows <= 0 || w.cols <= 0 || w.rows % groups != 0) return false;
  if ((w.rows / groups) % 4 != 0 || w.cols % 8 != 0) return false;
  if (w.fmt == WeightFormat::BF16) return true;
  return w.fmt == WeightFormat::FP8_BLOCK && w.scale && w.scale_e8m0 && w.block_n > 0 && w.block_k > 0;
}

GemmCallPlan plan_gemm_grouped_call(const DeviceWeight& w, int64_t groups, int64_t M, KernelMode mode,
                                    const GemmSettings& s) {
  GemmCallPlan p = kernel_call(M, mode, gemm_gemv_preferred(M, groups > 0 ? w.rows / groups : 0, true));
  p.fp8_skinny_terms = fp8_skinny_terms(w, groups, M, mode, s);
  if (mode != KernelMode::kFast || !s.cublaslt || M < kGemmGroupedBatchedMinM) return p;
  p.lt = w.fmt == WeightFormat::FP8_BLOCK && gemm_lt_grouped_supports(w, groups);
  p.lt_prepare = p.lt;
  return p;
}

GemmWeightShape gemm_weight_shape(const detail::GemmArgs& a, WeightFormat f) {
  GemmWeightShape ws;
  ws.fmt = f;
  ws.N = a.N;
  ws.K = a.K;
  ws.block_k = a.block_k;
  ws.groups = a.groups;
  ws.w_vec = a.w_vec;
  ws.gathered = a.row_off || a.x_rows || a.wdata_arr;
  return ws;
}

bool gemm_stream_weight_ok(const GemmWeightShape& w) {
  return w.fmt == WeightFormat::FP8_BLOCK && w.w_vec && !w.gathered && w.groups == 1 && w.K > 0 && w.K % 64 == 0 &&
         w.block_k > 0 && w.block_k % 64 == 0;
}

GemmInvariantPlan gemm_invariant_plan(const GemmWeightShape& w, int sm_count) {
  GemmInvariantPlan p;
  if (gemm_stream_weight_ok(w) && w.N <= kGemmInvariantStreamMaxN) {
    const int64_t kblocks = (w.K + w.block_k - 1) / w.block_k;
    const int64_t row_blocks = (w.N + gemm_detail::kStRows - 1) / gemm_detail::kStRows;
    const int64_t sms = sm_count > 0 ? sm_count : 1;
    auto per = [&](int64_t s) { return (kblocks + s - 1) / s; };
    int64_t s = 1;
    while (s < 8 && 2 * s <= kblocks &&
           (row_blocks * s < 2 * sms || gemm_stream_xs_bytes(8, per(s), w.block_k) > kGemmStreamXsMax))
      s *= 2;
    if (gemm_stream_xs_bytes(8, per(s), w.block_k) <= kGemmStreamXsMax) {
      p.kernel = GemmKernel::kStream;
      p.kb_per_split = int(per(s));
      p.splits = int((kblocks + per(s) - 1) / per(s));  // every split non-empty
      return p;
    }
  }
  const bool skinny = w.w_vec && !w.gathered && w.groups == 1 && w.N <= kGemmInvariantSkinnyMaxN;
  p.kernel = skinny ? GemmKernel::kSkinny : GemmKernel::kTiled;
  return p;
}

int gemm_invariant_stream_tokens(int64_t M, int64_t kb_per_split, int64_t block_k) {
  int64_t tokens = 8;
  while (tokens < 64 && tokens < M) tokens *= 2;
  while (tokens > 8 && gemm_stream_xs_bytes(tokens, kb_per_split, block_k) > kGemmStreamXsMax) tokens /= 2;
  return gemm_stream_xs_bytes(tokens, kb_per_split, block_k) > kGemmStreamXsMax ? 0 : int(tokens);
}

bool gemm_invariant_stream_params(const GemmInvariantPlan& p, int64_t M, int64_t block_k, detail::StreamParams& sp) {
  sp.splits = p.splits;
  sp.kb_per_split = p.kb_per_split;
  sp.tokens = gemm_invariant_stream_tokens(M, p.kb_per_split, block_k);
  if (sp.tokens == 0) return false;
  sp.token_chunks = int((M + sp.tokens - 1) / sp.tokens);
  sp.xs_ld = int(int64_t(p.kb_per_split) * block_k + 8);  // as plan_gemm_stream
  sp.depth = gemm_stream_depth(p.kb_per_split, block_k);
  return true;  // row_grid 0: one block per row block, as before (the prefetch depth never changes a sum)
}

int gemm_stream_depth(int64_t kb_per_split, int64_t block_k) {
  return (kb_per_split * block_k / gemm_detail::kStChunk) % 8 == 0 ? 8 : 4;
}

int64_t gemm_stream_row_grid(int64_t row_blocks, int64_t other_blocks, int64_t smem_bytes, int sm_count) {
  const int64_t by_smem = kGemmStreamSmemPerSm / (smem_bytes + 1024);  // 1 KB of shared memory reserved per block
  const int64_t per_sm = std::max<int64_t>(1, std::min(kGemmStreamBlocksPerSm, by_smem));
  // floor: a partial second wave of blocks would double the time of the blocks in it
  const int64_t cap = std::max<int64_t>(1, per_sm * std::max(sm_count, 1) / std::max<int64_t>(other_blocks, 1));
  if (row_blocks <= cap) return row_blocks;
  const int64_t iters = (row_blocks + cap - 1) / cap;
  return (row_blocks + iters - 1) / iters;  // the fewest blocks giving every block the same count, +-1
}

namespace detail {

void set_weight_args(GemmArgs& a, const DeviceWeight& w) {
  a.wdata = static_cast<const uint8_t*>(w.data);
  a.wscale = static_cast<const uint8_t*>(w.scale);
  a.scale_e8m0 = w.scale_e8m0;
  a.block_n = w.block_n;
  a.block_k = w.block_k;
  a.scale_cols = w.fmt == WeightFormat::FP8_BLOCK ? (a.K + w.block_k - 1) / w.block_k
                 : w.fmt == WeightFormat::FP4_G32 ? a.K / 32
                                                  : 0;
  a.w_vec = a.K % vec_elems(w.fmt) == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
            (w.fmt != WeightFormat::FP8_BLOCK || w.block_k % 16 == 0);
}

void set_x_vec(GemmArgs& a) {
  a.x_vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.ldx % 4 == 0 && a.x_gstride % 4 == 0;
}

bool plan_gemm_stream(const GemmArgs& a, WeightFormat f, int sm_count, StreamParams& p) {
  if (f != WeightFormat::FP8_BLOCK || a.M < 1 || a.M > kGemmStreamMaxM || !a.w_vec || a.K % 64 != 0 ||
      a.block_k % 64 != 0 || a.row_off || a.x_rows || a.wdata_arr)
    return false;
  const int64_t kblocks = (a.K + a.block_k - 1) / a.block_k;
  const int64_t row_blocks = (a.N + gemm_detail::kStRows - 1) / gemm_detail::kStRows;
  int64_t tokens = 8;
  while (tokens < 64 && tokens < a.M) tokens *= 2;
  auto per_split = [&](int64_t s) { return (kblocks + s - 1) / s; };
  auto xs_bytes = [&](int64_t s, int64_t t) { return gemm_stream_xs_bytes(t, per_split(s), a.block_k); };
  auto blocks = [&](int64_t s, int64_t t) { return row_blocks * ((a.M + t - 1) / t) * a.groups * s; };
  int64_t s = 1;
  while (s < 8 && 2 * s <= kblocks &&
         (blocks(s, tokens) < 2 * int64_t(sm_count) || xs_bytes(s, tokens) > kGemmStreamXsMax))
    s *= 2;
  while (tokens > 8 && xs_bytes(s, tokens) > kGemmStreamXsMax) tokens /= 2;
  if (xs_bytes(s, tokens) > kGemmStreamXsMax) return false;
  const int64_t per = per_split(s), token_chunks = (a.M + tokens - 1) / tokens;
  if (row_blocks > 65535 || token_chunks * a.groups > 65535) return false;
  p.kb_per_split = int(per);
  p.splits = int((kblocks + per - 1) / per);  // every split non-empty
  p.tokens = int(tokens);
  p.token_chunks = int(token_chunks);
  p.xs_ld = int(per * a.block_k + 8);  // +16 bytes: lane fragment reads hit distinct banks
  // 32 / 64 tokens per block: depth 4 (H200, session 14: 3-25 % faster than 8 at M = 32-256 on every V4-Flash
  // shape but shared w2 / idx wq_b at M = 32-64, where the plan's split already gave 4)
  p.depth = tokens >= 32 ? 4 : gemm_stream_depth(per, a.block_k);
  const int64_t smem = xs_bytes(s, tokens) + tokens * gemm_detail::kStPartLd * 4;
  p.row_grid = int(gemm_stream_row_grid(row_blocks, int64_t(p.splits) * token_chunks * a.groups, smem, sm_count));
  return true;
}

bool plan_gemm_gemv(const GemmArgs& a, WeightFormat f, int sm_count, GemvParams& p) {
  if ((f != WeightFormat::FP8_BLOCK && f != WeightFormat::BF16) || a.M < 1 || a.M > kGemmGemvMaxM || !a.w_vec ||
      a.row_off || a.x_rows || a.wdata_arr || a.N < 1 || a.K < 1 || a.K >= (int64_t(1) << 31) || a.groups < 1 ||
      a.groups > 65535)
    return false;
  if (f == WeightFormat::FP8_BLOCK && (a.N * a.groups + a.block_n - 1) / a.block_n * a.scale_cols >= (int64_t(1) << 31))
    return false;
  int mt = 1;
  while (mt < a.M) mt *= 2;
  const int64_t ve = vec_elems(f), step = 32 * gemv_vpl(mt) * ve, steps = (a.K + step - 1) / step;
  auto xs_ld = [&](int64_t wk) { return wk * step / ve * (ve + 4); };
  auto row_blocks = [&](int r) { return (a.N + int64_t(kGemvRowsPerWarp) * r - 1) / (int64_t(kGemvRowsPerWarp) * r); };
  int wr = kGemvMaxWarps;
  while (wr > 1 && row_blocks(wr) * a.groups < sm_count) wr /= 2;
  int wk = 1;
  while (wk * wr < kGemvMaxWarps && wk < steps && int64_t(mt) * xs_ld(2 * wk) * 4 <= kGemvXsBudget) wk *= 2;
  if (row_blocks(wr) > INT_MAX) return false;
  p.mt = mt;
  p.wk = wk;
  p.wr = wr;
  p.kc = int(wk * step);
  p.xs_ld = int(xs_ld(wk));
  p.smem = int(int64_t(mt) * p.xs_ld * 4 + (wk > 1 ? int64_t(wk) * wr * kGemvRowsPerWarp * mt * 4 : 0));
  auto pow2 = [](int64_t v) { return v > 0 && std::has_single_bit(uint64_t(v)); };
  auto shift = [](int64_t v) { return std::countr_zero(uint64_t(v)); };  // log2 of a power of two
  const bool fp8_even = f != WeightFormat::FP8_BLOCK || (a.scale_e8m0 && pow2(a.block_n) && pow2(a.block_k) &&
                                                         a.block_n % kGemvRowsPerWarp == 0);
  p.even = mt <= kGemvEvenMaxMt && pow2(p.kc) && a.K % p.kc == 0 && a.N % (int64_t(kGemvRowsPerWarp) * wr) == 0 &&
           fp8_even;
  p.kc_shift = shift(p.kc);  // kc = wk * step: powers of two
  if (f == WeightFormat::FP8_BLOCK) {
    p.bn_shift = shift(a.block_n);
    p.bk_shift = shift(a.block_k);
  }
  return true;
}

}  // namespace detail

GemmKernelPlan plan_gemm_kernel(const detail::GemmArgs& a, WeightFormat f, GemmPrecision precision, int sm_count) {
  GemmKernelPlan p;
  if (precision == GemmPrecision::kBatchInvariant) {
    p.invariant = gemm_invariant_plan(gemm_weight_shape(a, f), sm_count);
    p.kernel = p.invariant.kernel;
    return p;
  }
  const bool bf16 = precision == GemmPrecision::kBf16 || precision == GemmPrecision::kGemv;
  const bool gemv = precision == GemmPrecision::kGemv || (bf16 && gemm_gemv_preferred(a.M, a.N, a.groups > 1));
  if (gemv && detail::plan_gemm_gemv(a, f, sm_count, p.gemv)) {
    p.kernel = GemmKernel::kGemv;
    return p;
  }
  if (bf16 && detail::plan_gemm_stream(a, f, sm_count, p.stream)) {
    p.kernel = GemmKernel::kStream;
    return p;
  }
  p.kernel = a.M <= kGemmSkinnyMaxM && a.w_vec ? GemmKernel::kSkinny : GemmKernel::kTiled;
  return p;
}

GemmSegmentsKernelPlan plan_gemm_segments_kernel(const detail::GemmArgs* a, int count, WeightFormat f,
                                                 GemmPrecision precision, int sm_count) {
  GemmSegmentsKernelPlan out;
  if (!a || count < 1 || count > kGemmMaxSegments) return out;
  int64_t row_blocks = 0;
  for (int i = 0; i < count; ++i) {
    const GemmKernelPlan k = plan_gemm_kernel(a[i], f, precision, sm_count);
    if (k.kernel != GemmKernel::kSkinny && k.kernel != GemmKernel::kStream) return out;
    if (k.kernel == GemmKernel::kStream && precision == GemmPrecision::kBatchInvariant) return out;
    if (i == 0) {
      out.kernel = k.kernel;
      out.stream = k.stream;
    } else if (k.kernel != out.kernel) {
      return out;
    } else if (k.kernel == GemmKernel::kStream) {
      const detail::StreamParams &p = out.stream, &q = k.stream;
      if (q.splits != p.splits || q.kb_per_split != p.kb_per_split || q.tokens != p.tokens ||
          q.token_chunks != p.token_chunks || q.xs_ld != p.xs_ld || q.depth != p.depth)
        return out;
    }
    row_blocks += (a[i].N + gemm_detail::kStRows - 1) / gemm_detail::kStRows;
  }
  if (out.kernel == GemmKernel::kStream) {
    if (row_blocks > 65535) return out;
    detail::StreamParams& p = out.stream;
    const int64_t smem = gemm_stream_xs_bytes(p.tokens, p.kb_per_split, a[0].block_k) +
                         int64_t(p.tokens) * gemm_detail::kStPartLd * 4;
    p.row_grid = int(gemm_stream_row_grid(row_blocks, int64_t(p.splits) * p.token_chunks, smem, sm_count));
  }
  out.ok = true;
  return out;
}

GemmSegmentsPlan plan_gemm_segments(const DeviceWeight* const* w, int count, int64_t M, KernelMode mode,
                                    const GemmSettings& s, int sm_count) {
  GemmSegmentsPlan out;
  if (!s.segments || count < 2 || count > kGemmMaxSegments || M < 1 || !w) return out;
  detail::GemmArgs args[kGemmMaxSegments];
  for (int i = 0; i < count; ++i) {
    const DeviceWeight& wi = *w[i];
    const DeviceWeight& w0 = *w[0];
    if (!wi.data || wi.rows <= 0 || wi.fmt != w0.fmt || wi.cols != w0.cols || wi.block_n != w0.block_n ||
        wi.block_k != w0.block_k || wi.scale_e8m0 != w0.scale_e8m0)
      return out;
    const GemmCallPlan c = plan_gemm_call(wi, M, mode, s);
    if (c.lt || c.chunk_rows < M || c.fp8_skinny_terms > 0) return out;  // the FP8 skinny kernel: one call each
    if (i > 0 && c.precision != out.precision) return out;
    out.precision = c.precision;
    args[i] = detail::GemmArgs{.M = M, .N = wi.rows, .K = wi.cols};
    detail::set_weight_args(args[i], wi);
  }
  const GemmSegmentsKernelPlan k = plan_gemm_segments_kernel(args, count, w[0]->fmt, out.precision, sm_count);
  if (!k.ok || (k.kernel == GemmKernel::kStream && !s.segments_stream)) return out;
  out.kernel = k.kernel;
  out.one_launch = true;
  return out;
}

}  // namespace dsinfer::ops::cuda
