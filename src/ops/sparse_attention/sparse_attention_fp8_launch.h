// Parameters and launchers of the sparse attention decode over the FP8 KV storage format (sparse_attention_fp8.h);
// no CUDA types, no Status (validated by sparse_attention_fp8_cuda.cpp). C++17: shared with the .cu file.
#pragma once
#include <cstdint>

#include "ops/kv_format/kv_format.h"  // KvPages
#include "ops/state_view.h"
#include "ops/step_cuda.h"

namespace dsinfer::ops::cuda {

// One list of keys per token in a main KV cache of the MODEL1 row format (ops/kv_format/kv_format.h).
struct Fp8KeySource {
  const uint8_t* cache = nullptr;  // the cache (16-byte aligned)
  int64_t rows = 0;                // its rows (indices >= rows: no key)
  const int32_t* idx = nullptr;    // [T, stride] cache rows of each token's keys; -1 = no key
  int64_t stride = 0;              // list capacity a token
  const int32_t* len = nullptr;    // [T] keys used of the token's list (<= stride); nullptr: all stride
  KvPages pages;                   // where its rows live (FlashMLA's MODEL1 blocks by default)
};

// Which kernel runs the op: kAuto lets the plan choose (plan_sparse_attention_fp8_kernel, sparse_attention_plan.h);
// the others force one (tests and the bench compare them). kLockstep: sparse_attention_fp8.cu, one block of 8 warps
// running every phase in turn (mma.sync). kWarpSpecialised: sparse_attention_fp8_ws.cu, a producer warpgroup
// gathering and dequantising key tiles for two consumer warpgroups on wgmma (session 17); kWarpSpecialisedPair: the
// same kernel as a cluster of two blocks per (token, head group, split) (session 19, kWsPair below). All compute the
// same tiles in the same order with the same roundings: their outputs are bitwise equal, splits and workspace
// included. kRoles64 (session 24, opt-in: plan_sparse_attention_fp8_decode): sparse_attention_fp8_r64.cu, FlashMLA's
// SM90 warpgroup roles on 64-key tiles (one warpgroup Q K^T and the softmax, the other only P V); its own split count
// (plan_sparse_attention_fp8_r64) and its own bits (other sums' order), within the reference's bound.
enum class Fp8AttentionKernel : int {
  kAuto = 0,
  kLockstep = 1,
  kWarpSpecialised = 2,
  kWarpSpecialisedPair = 3,
  kRoles64 = 4
};

struct SparseAttentionFp8Params {
  int64_t T = 0, heads = 0;      // head_dim is kKvDim (512)
  float scale = 1.0f;            // head_dim^-1/2
  const float* sinks = nullptr;  // [heads]
  // Token t's keys: keys[0]'s list, then keys[1]'s, then keys[2]'s (e.g. the window ring, then the compressed
  // entries; the runner: ring rows, this step's rows, compressed entries); a list with idx nullptr is empty, and
  // none may follow an empty one. K = V: one latent row a key, shared by all heads.
  static constexpr int kLists = 3;
  Fp8KeySource keys[kLists];
  bool q_bf16 = false;           // q [T, heads, 512]: fp32, or bf16 when set
  // The split prefill op only (session 29; the other ops refuse it): q is the raw bf16 query (wq_b's output) and the
  // kernel applies head_norm_rope's unweighted head RMSNorm (eps q_norm_eps) and the RoPE of the trailing rope_dim
  // dims at pos[t] to it in shared memory before Q K^T, with the bits head_norm_rope gives (in_bf16, out_bf16).
  bool q_norm = false;
  float q_norm_eps = 1e-6f;
  // The split prefill op only (session 40): the consecutive tokens a block takes in a row, so that a step's key rows
  // stay in shared memory from one token to the next (0: sparse_prefill_split_run's choice; tests force one).
  int64_t split_run = 0;
  // Inverse RoPE of the output's trailing rope_dim channels at pos[t] (0 = none).
  int64_t rope_dim = 0;
  const int32_t* pos = nullptr;     // [T]
  const float* inv_freq = nullptr;  // [rope_dim / 2]
  float attention_factor = 1.0f;
  int64_t num_splits = 1;  // key-range splits a (token, 64-head group); > 1 needs the workspace and the combine
  Fp8AttentionKernel kernel = Fp8AttentionKernel::kAuto;
};

// The runner's FP8 state (LayerStateView::fp8) as three key lists a token (fp8_state_keys): window positions before
// the step in the slot's ring (ring, [T, window]), window positions of this step as rows of a cache of the step's
// own rows (step, [T, window], row = token index), and the compressed entries (comp, [T, comp_stride]: topk_idx's
// picks of visible entries in list order, packed to the front (the -1 padding dropped), or all visible entries;
// m = 0: none; -1 past the length), with their lengths; pos32 [T] the positions as int32.
struct Fp8StateKeys {
  int64_t window = 0, m = 0, comp_stride = 0;
  const int32_t* topk_idx = nullptr;  // [T, topk] (CSA) or nullptr (HCA: every visible entry)
  int64_t topk = 0;
  int32_t *ring = nullptr, *ring_len = nullptr, *step = nullptr, *step_len = nullptr, *comp = nullptr,
          *comp_len = nullptr, *pos32 = nullptr;
};

namespace detail {
void launch_fp8_state_keys(const StepDevice& st, const LayerStateView& v, const Fp8StateKeys& k, void* stream);
void launch_fp8_ring_rows(const StepDevice& st, const LayerStateView& v, int32_t* rows, void* stream);
inline constexpr int kFp8Heads = 64;  // heads a block
inline constexpr int kFp8Keys = 32;   // keys a tile
inline constexpr int kFp8R64Keys = 64;  // keys a tile of the kRoles64 kernel
// The lock-step kernel (sparse_attention_fp8.cu) and the warp-specialised one (sparse_attention_fp8_ws.cu); the
// same grid, partials and combine.
void launch_sparse_attention_fp8(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                 void* stream);
void launch_sparse_attention_fp8_ws(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                    bool pair, void* stream);
// The kRoles64 kernel (sparse_attention_fp8_r64.cu): the same grid and partials (splits cut at 64-key tiles); the
// caller runs the combine for num_splits > 1. Its variants (the bench's A/B; the same bits): kR64Prefetch (the
// launcher's) prefetches each split's rows two tiles ahead into L2, kR64NoPrefetch does not; kR64Persistent is
// kR64Prefetch on a grid of min(items, SMs) blocks, each looping over items (token, head group, split) with its slots
// and phases running on, so the producer starts the next item's tiles during the last one's epilogue (lever 2 of
// issue 31's decode bars, untested against a fixed cost a block); ..._variant runs one (no combine; false for an
// unknown variant).
inline constexpr int kR64Prefetch = 0, kR64NoPrefetch = 1, kR64Persistent = 2;
void launch_sparse_attention_fp8_r64(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                     void* stream);
bool launch_sparse_attention_fp8_r64_variant(const SparseAttentionFp8Params& p, const void* q, float* o,
                                             float* workspace, int variant, void* stream);
// The warp-specialised kernel's variants (session 19; session 18's other two, the consumers dequantising and the
// conversion instructions, measured slower everywhere and were removed): kWsOneBlock, one block per (token, head
// group, split); kWsPair, a cluster of two blocks per (token, head group, split), each dequantising half of every key
// tile into both blocks' shared memory and keeping half of the output dims (FlashMLA's two-CTA crossover). Both give
// the lock-step kernel's bits (the GPU test holds every variant to it). launch_sparse_attention_fp8_ws runs the one
// the plan chose (pair: kWsPair); ..._ws_variant runs any of the kWsVariants (kernel and combine; false for an unknown
// variant) for the test and the bench.
inline constexpr int kWsOneBlock = 0, kWsPair = 1, kWsVariants = 2;
bool launch_sparse_attention_fp8_ws_variant(const SparseAttentionFp8Params& p, const void* q, float* o,
                                            float* workspace, int variant, void* stream);
// Test only: every (e4m3 code, UE8M0 scale byte) pair, [scale][code], as bf16 bits, through the fast conversion as the
// one block's producer calls it (fast), as the pair's producer calls it (fast_bits), and through the kernels'
// reference one (ref; 65,536 each, device memory).
void launch_fp8_dequant_table(uint16_t* fast, uint16_t* fast_bits, uint16_t* ref, void* stream);
void launch_sparse_attention_fp8_combine(const SparseAttentionFp8Params& p, const float* workspace, float* o,
                                         void* stream);
// Diagnostics for bench/attention_fp8_bench.cpp only: the kernel (fp32 q) with phases left out, to see where a tile's
// time goes; the output is wrong by design. probe: an OR of the bits below (the combinations the launcher
// instantiates: each bit alone, loads + dequant, QK + PV + softmax); false for any other. kProbeSerial alone is no
// phase left out but the session-12 tile loop (three barriers a tile, no dequantisation overlapped): its output is
// right, bitwise the kernel's; the bench times it beside the kernel.
inline constexpr int kProbeNoQk = 1, kProbeNoPv = 2, kProbeNoSoftmax = 4, kProbeNoDequant = 8, kProbeNoLoads = 16;
inline constexpr int kProbeSerial = 32;
// kProbeWgmma alone: the kernel's loop with Q K^T and P V as wgmma from shared memory (sparse_attention_wgmma.cuh;
// session 16): its output is right, bitwise the kernel's (the same bf16 products summed in the same order); the bench
// times it beside the kernel.
inline constexpr int kProbeWgmma = 64;
bool launch_sparse_attention_fp8_probe(const SparseAttentionFp8Params& p, const void* q, float* o, float* workspace,
                                       int probe, void* stream);
}  // namespace detail

}  // namespace dsinfer::ops::cuda
