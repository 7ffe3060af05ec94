// The drafters of speculative decoding on the GPU (DSpark and MTP-1; CPU references speculative/dspark.h, speculative/mtp1.h,
// speculative/draft_layer.h): the same forward op for op, on the target's CUDA ops (GEMM, RMSNorm, fused norm + RoPE, mHC,
// router, MoE, embed) plus draft_kernels_cuda.h (window attention over explicit key ranges, stream mean, ring
// scatter). They read the target's hidden states where the CudaRunner captured them (device memory, no download),
// share the runner's device embedding and head, and run on the runner's stream, so the next step is ordered after
// them. Drafter weights are uploaded as F32 from the host loader (speculative/draft_weights.h).
//   draft_weights_cuda.cpp  upload of the drafter weights        draft_layer_cuda.cpp  one decoder layer, heads
//   dspark_cuda.cpp         DsparkCuda                           mtp1_cuda.cpp         Mtp1Cuda
// Precision: `exact` runs every GEMM / MoE on the fp32 CUDA-core kernels (chunks of kGemmSkinnyMaxM rows; parity
// with the CPU reference up to fp32-vs-double accumulation); otherwise larger GEMMs take the bf16 tensor-core
// path (drafts may differ in near ties; verification keeps the output exact either way).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backends/cuda/step/decode_graphs.h"
#include "backends/cuda/weights/device_weights.h"
#include "cuda/device_buffer.h"
#include "cuda/pinned_buffer.h"
#include "ops/draft_kernels/draft_kernels_launch.h"
#include "ops/embed/embed_launch.h"
#include "ops/moe/moe_cuda.h"
#include "speculative/draft_weights.h"
#include "speculative/drafter.h"

namespace dsinfer::backends {

struct DraftDeviceContext {
  void* stream = nullptr;
  const ops::cuda::DeviceWeight* embed = nullptr;  // the target's [V, D] table (F32 or BF16)
  const ops::cuda::DeviceWeight* head = nullptr;   // the target's head [V, D]
  // The runner's capture of the last step on the device ([tokens, layers, hc * D]); ingest reads it when the host
  // span it is given is empty (otherwise it uploads the host span: tests, the host-capture path).
  std::function<std::span<const float>()> device_hidden;
  // The logits of the runner's last step on the device ([rows, vocab]), left there by begin_sampled_step: the
  // one-wait round's acceptance reads them (empty: no such step).
  std::function<std::span<const float>()> device_logits;
  bool exact = false;
  bool graphs = true;  // DSpark propose replays a CUDA graph per (padded batch, drafts) bucket (DSINFER_CUDA_GRAPHS=0: off)
};

// Waits for the stream's queued work (before freeing a buffer it may still read).
Status sync_stream(void* stream);
// Grows b to at least n elements (64 at least), waiting for queued kernels that may read the old buffer first;
// a reallocation bumps *gen (captured graphs hold the old pointer). The one scratch-growth rule of both drafters.
template <typename T>
Status grow_buffer(cuda::DeviceBuffer<T>& b, size_t n, void* stream, const char* what, uint64_t* gen = nullptr) {
  if (b.size() >= n) return Status::ok();
  DSI_RETURN_IF_ERROR(sync_stream(stream));
  if (gen) ++*gen;
  return b.alloc(n < 64 ? 64 : n, what);
}

// Weights of one drafter decoder layer on the device (F32), with the buffers that own them.
struct DraftDeviceLayer {
  DeviceLayer L;
  std::vector<cuda::DeviceBuffer<uint8_t>> owned;
};
Result<std::unique_ptr<DraftDeviceLayer>> upload_draft_layer(const model::LayerWeights& w, const io::ModelConfig& c);
// Uploads host floats into a new owned buffer; returns its device pointer.
Result<const float*> upload_floats(std::vector<cuda::DeviceBuffer<uint8_t>>& owned, const float* p, size_t n);
Result<ops::cuda::DeviceWeight> upload_mat(std::vector<cuda::DeviceBuffer<uint8_t>>& owned, const model::Mat& m);
Result<HcDevice> upload_hc(std::vector<cuda::DeviceBuffer<uint8_t>>& owned, const model::HcWeights& h);

// Whether the drafters run independent paths on side streams (the DraftForward's K=V path, DSpark's fused ingest):
// DSINFER_DSPARK_CONCURRENT=0 turns them off (every op in order on the drafter's stream). The one place it is read.
bool draft_side_streams();

// A side stream with its fork event and its join events (cudaStream_t / cudaEvent_t as void*), for a drafter's
// independent path; empty (stream == nullptr) until create(joins). The destructor waits for the stream's work, then
// destroys the stream and the events.
struct DraftSideStream {
  void* stream = nullptr;
  void* fork_event = nullptr;
  std::vector<void*> joins;  // recorded on the stream where parts of its work are done (the last: all of it)
  DraftSideStream() = default;
  DraftSideStream(const DraftSideStream&) = delete;
  DraftSideStream& operator=(const DraftSideStream&) = delete;
  ~DraftSideStream();
  Status create(size_t num_joins = 1);
  Status fork(void* main_stream);           // the side stream waits for the main stream's work so far
  Status done(size_t i = 0);                // joins[i] recorded: the side stream's work so far
  Status join(void* main_stream, size_t i = 0) const;  // the main stream waits for joins[i]
};
// `stream` waits for `event` (cudaStream_t / cudaEvent_t as void*).
Status stream_wait(void* stream, void* event);

// Scratch and the layer forward shared by both drafters (draft_layer_cuda.cpp).
class DraftForward {
 public:
  DraftForward(const io::ModelConfig& lc, const DraftDeviceContext& ctx);
  DraftForward(const DraftForward&) = delete;
  DraftForward& operator=(const DraftForward&) = delete;
  ~DraftForward();
  Status init();  // RoPE table; the K=V path's side stream (DSINFER_DSPARK_CONCURRENT=0: none, every op in order)
  // Grows the scratch for T tokens whose attention reads at most max_keys keys.
  Status reserve(int64_t T, int64_t max_keys);
  // X [T, hc, D] in place; pos [T] and keys [T] device arrays; ring: the layer's ring of slot 0 (slot_stride
  // floats between slots, window rows of head_dim).
  Status layer(const DeviceLayer& L, float* X, int64_t T, const int64_t* pos, const ops::cuda::DraftKeys* keys,
               int64_t max_keys, const float* ring, int64_t slot_stride);
  // kv [T, head_dim] = RoPE(kv_norm(wkv(attn_norm(x)))) for x [T, D] (DSpark context rows, which skip the mHC);
  // attn_norm(x) goes to `normed` [T, D] when given (a call on another stream than layer()'s), else to the scratch.
  Status context_kv(const DeviceLayer& L, const float* x, int64_t T, const int64_t* pos, float* kv,
                    float* normed = nullptr);
  // h [R, D] = norm(hc_head(X[rows[r]])); rows (device int32) nullptr = rows 0..R-1.
  Status head_hidden(const HcDevice& hc, const float* norm, const float* X, const int32_t* rows, int64_t R, float* h);
  Status gemm(const float* x, int64_t M, int64_t ldx, const ops::cuda::DeviceWeight& w, float* y, int64_t ldy, bool acc);
  Status rmsnorm_rows(const float* x, int64_t rows, int64_t dim, const float* w, float* y);
  // Stage marks of the profile (DsparkCuda::profile_block): called after each stage of layer() with its name.
  std::function<void(const char*)> mark;
  // The stream the ops launch on (nullptr: the drafter's, ctx.stream); a caller switches it around calls whose
  // scratch no other stream's calls use.
  void set_stream(void* s) { stream_ = s; }
  // Events (cudaEvent_t) the next attention cores wait for before they read their layer's ring, the first one each
  // core, then forget: DsparkCuda's context rows written on its side stream, a layer at a time. The caller waits
  // for those left when fewer attention cores ran.
  std::vector<void*> joins_before_core;
  const float* last_kv() const { return kv_.data(); }  // this call's K=V rows of the last layer() [T, head_dim]
  uint64_t generation() const { return gen_; }          // bumped whenever reserve() reallocates the scratch

 private:
  Status attention(const DeviceLayer& L, int64_t T, const int64_t* pos, const ops::cuda::DraftKeys* keys,
                   int64_t max_keys, const float* ring, int64_t slot_stride);
  Status moe(const DeviceLayer& L, int64_t T);
  void* st() const { return stream_ ? stream_ : ctx_.stream; }

  const io::ModelConfig& c_;
  DraftDeviceContext ctx_;
  void* stream_ = nullptr;
  int64_t T_ = 0;
  uint64_t gen_ = 0;
  cuda::DeviceBuffer<float> inv_freq_, y_, f_, post_, comb_, cq_, q_, kv_, o_, mid_, router_, rw_;
  cuda::DeviceBuffer<int32_t> ridx_, rows_;
  ops::cuda::MoeWorkspace moe_ws_;
  // The MoE of chunks that moe_cuda's exact path runs on its skinny kernels (<= 8 tokens) as two launches
  // (draft_moe_cuda, the same bits) unless DSINFER_DSPARK_FUSED_MOE=0, else moe_cuda. h scratch [8, k + 1, moe_h_ld_].
  bool fused_moe_ = true;
  int64_t moe_h_ld_ = 0;
  cuda::DeviceBuffer<float> moe_h_;
  // The side streams (empty: draft_side_streams() off) of the K=V path (attention) and of the mHC sites' deferred
  // post / comb (layer). Declared last, so destroyed first: their work has finished before the buffers it reads are
  // freed.
  DraftSideStream kv_side_, comb_side_;
};

// Host arrays of one call packed into one buffer (16-byte aligned offsets) that goes up in one copy.
struct HostPack {
  std::vector<uint8_t> bytes;
  template <typename T>
  size_t add(const std::vector<T>& v) {
    const size_t off = (bytes.size() + 15) / 16 * 16;
    bytes.resize(off + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes.data() + off, v.data(), v.size() * sizeof(T));
    return off;
  }
};

// Host arrays of one call, uploaded in order on the drafter's stream (pageable copies are staged by the driver,
// so the host vectors may change once the call returns).
Status upload_async(void* stream, cuda::DeviceBuffer<uint8_t>& dst, const void* src, size_t bytes, const char* what);
// The captured hidden states an ingest reads, on the device: `host` uploaded into `up` when it is non-empty, else
// the runner's device capture (ctx.device_hidden).
Result<std::span<const float>> device_hidden_source(const DraftDeviceContext& ctx, std::span<const float> host,
                                                    cuda::DeviceBuffer<uint8_t>& up);

class DsparkCuda final : public speculative::Drafter {
 public:
  DsparkCuda(const io::ModelConfig& target, speculative::DraftConfig dc, speculative::DsparkWeights w, int32_t num_slots,
             DraftDeviceContext ctx);
  ~DsparkCuda() override;
  Status init();
  speculative::SpecMethod method() const override { return speculative::SpecMethod::kDspark; }
  const std::vector<int64_t>& tapped_layers() const override { return dc_.target_layer_ids; }
  int32_t max_drafts() const override { return int32_t(dc_.block_size); }
  bool has_confidence() const override { return true; }
  int64_t context_window() const override { return window_; }
  int64_t resume_positions() const override { return std::min(speculative::kDsparkResumePositions, window_); }
  Status ingest(std::span<const speculative::IngestItem> items, std::span<const float> hidden) override;
  Status propose(std::span<const speculative::ProposeItem> items, const speculative::DrawFn& draw,
                 std::vector<speculative::Proposal>& out) override;
  Status flush() override;
  bool supports_round() const override {
    return bool(ctx_.device_logits) && dc_.block_size <= ops::cuda::kSpecRoundMaxBlock && window_ >= dc_.block_size + 1;
  }
  Status launch_round(std::span<const speculative::RoundItem> items) override;
  speculative::RoundOutputs round_outputs() const override;
  Status finish_round(std::span<const speculative::RoundItem> items, std::vector<speculative::RoundResult>& out) override;
  int64_t graphs_captured() const override { return graphs_.captures(); }

  // Offsets of the packed per-call arrays of a block of Bp (padded) sequences in in_ / out_ (bytes).
  struct BlockLayout {
    int64_t Bp = 0, g = 0;
    size_t tok = 0, pos = 0, keys = 0, prev = 0, in_bytes = 0;  // in_: tokens, positions, keys, predecessors
    int64_t ing_n = 0;                                          // the fused ingest's rows (0: none), padded
    size_t ing_rows = 0, ing_slot = 0, ing_pos = 0;             // in_: its capture rows, slots, positions
    size_t ids = 0, conf = 0, out_bytes = 0;                    // out_: drafted ids, confidence logits [Bp, g]
    size_t accepted = 0, tokens = 0;  // out_ of a one-wait round: the acceptance (SpecRoundArgs), after conf
  };

 private:
  // An ingest's rows, validated and packed on the host, whose kernels wait for the next propose (or flush()).
  struct PendingIngest {
    std::vector<int32_t> rows, slots;
    std::vector<int64_t> pos;
    const float* src = nullptr;  // the captured hidden states on the device
  };
  Status reserve_ingest(int64_t rows);  // sized for the rows' token bucket (decode_graphs.h scratch_tokens)
  // The layout of a block of Bp padded sequences; fused: with the ingest's Bp (1 + g) rows; round: with the acceptance.
  BlockLayout block_layout(int64_t Bp, bool fused, bool round) const;
  // Grows the block's buffers for bl (in_ and out_ too).
  Status reserve_block(const BlockLayout& bl);
  // The graph of a fused (or not) all-greedy round (kpick = g) or of a forward for host draws (kpick = 0).
  Status launch_block(const BlockLayout& bl, int32_t kpick);
  // The block's outputs (bl.out_bytes) into out_host_, then an event (queue_download); the host's wait for that
  // event (wait_download): the round's one wait, which work queued after the download does not delay.
  Status queue_download(const BlockLayout& bl);
  Status wait_download();
  // On the drafter's stream, or on `side` when a block forward runs it beside its own kernels, with side->joins[l]
  // recorded once layer l's rows are in the ring.
  Status ingest_kernels(const float* src, const int32_t* rows, const int32_t* slots, const int64_t* pos, int64_t N,
                        DraftSideStream* side = nullptr);
  Status upload_block(std::span<const speculative::ProposeItem> items, const std::vector<size_t>& live, const BlockLayout& bl);
  // The block forward (embed -> layers -> head) and, for kpick draft positions, the Markov bias + device pick.
  Status block_forward(const BlockLayout& bl, int32_t kpick);
  Status bias_and_pick(const BlockLayout& bl, int32_t k, bool chained);
  // Every position's bias + pick in one launch (draft_picks_cuda) where picks_fused: up to fused_picks_max_b_ padded
  // sequences and a shape the kernel takes.
  Status fused_picks(const BlockLayout& bl);
  bool picks_fused(int64_t Bp) const;
  // DSINFER_DSPARK_PROFILE=1: the block's graph listed once per padded batch (its kernels by name in launch order,
  // the node count) and timed (graph replays; each stage run eagerly behind a delay, between events), to stderr.
  Status profile_block(const BlockLayout& bl, int32_t kpick);
  void mark(const char* stage) {
    if (fwd_.mark) fwd_.mark(stage);
  }
  Status host_draws(std::span<const speculative::ProposeItem> items, const std::vector<size_t>& live, const BlockLayout& bl,
                    int32_t kmax, const speculative::DrawFn& draw, std::vector<std::vector<int32_t>>& toks);
  uint64_t generation() const { return gen_ + fwd_.generation(); }
  io::ModelConfig tc_, lc_;
  speculative::DraftConfig dc_;
  speculative::DsparkWeights w_;  // host copies: Markov embedding and confidence weights (host-side confidence)
  int32_t num_slots_;
  int64_t window_;
  DraftDeviceContext ctx_;
  DraftForward fwd_;
  std::vector<std::unique_ptr<DraftDeviceLayer>> layers_;
  std::vector<cuda::DeviceBuffer<uint8_t>> owned_;
  ops::cuda::DeviceWeight main_proj_, markov_embed_, markov_head_;
  const float *main_norm_ = nullptr, *norm_ = nullptr, *conf_w_ = nullptr;
  HcDevice hc_head_;
  cuda::DeviceBuffer<float> ring_, feats_, hctx_, kvc_, kvn_, X_, h_, logits_, e_;
  // The fused ingest on a side stream (DSINFER_DSPARK_CONCURRENT=0: on the drafter's stream, in order): forked at the
  // block's start, joined before the first attention core reads the ring (its rows use their own scratch: feats_,
  // hctx_, kvn_, kvc_), so its ~11 kernels run beside the embed and the first layer's mHC and projections.
  bool concurrent_ = true;
  cuda::DeviceBuffer<uint8_t> hidden_up_, ingest_in_, in_, out_, round_in_;
  uint64_t gen_ = 0;    // bumped when a buffer the propose graphs read is reallocated
  DecodeGraphs graphs_;  // propose graphs, keyed by (fused ingest, padded batch, picked drafts)
  std::optional<PendingIngest> pending_;
  const float* graph_src_ = nullptr;  // the hidden-state source the fused graphs read
  bool fuse_ingest_ = true;           // ingest joins the next propose's graph (DSINFER_DSPARK_FUSED_INGEST=0: off)
  bool profile_ = false;              // DSINFER_DSPARK_PROFILE=1
  // The all-greedy block's g positions of Markov bias + pick as one kernel (draft_picks_kernel) instead of g x (bias
  // GEMM + draft_pick) and the first Markov gather for blocks of up to this many padded sequences (the constructor:
  // DSINFER_DSPARK_FUSED_PICKS, default kDraftPicksFusedMaxB), else the per-position kernels.
  int64_t fused_picks_max_b_ = 0;
  int32_t picks_max_blocks_ = 1;  // the SM count: the fused picks' grid barrier needs every block resident
  cuda::DeviceBuffer<float> part_v_;    // the fused picks' slice partials [g, Bp, slices]
  cuda::DeviceBuffer<int32_t> part_i_;
  cuda::DeviceBuffer<int32_t> picks_barrier_;  // [2], zeroed once
  std::vector<int64_t> profiled_;     // the graph keys profile_block listed
  // DSINFER_DSPARK_PART_TIMES=1: host wall time of each eager ingest (synchronised after it) and of each propose
  // (upload to the host wait), printed to stderr when the drafter is destroyed: the round's parts, measured.
  struct PartTimes {
    bool on = false;
    int64_t ingests = 0, proposes = 0, fused = 0;
    double ingest_ms = 0, propose_ms = 0;
  } times_;
  std::vector<uint8_t> in_host_, round_host_;
  cuda::PinnedHostBuffer out_host_;  // queue_download's destination
  void* downloaded_ = nullptr;       // cudaEvent_t recorded after it
  BlockLayout round_bl_;             // the last launch_round's block (round_outputs, finish_round)
  std::vector<float> lg_host_;
  // The fused ingest's side stream (above). Declared last, so destroyed first: its work has finished before the
  // buffers it reads are freed.
  DraftSideStream side_;
};

class Mtp1Cuda final : public speculative::Drafter {
 public:
  Mtp1Cuda(const io::ModelConfig& target, speculative::Mtp1Weights w, int32_t num_slots, DraftDeviceContext ctx);
  Status init();
  speculative::SpecMethod method() const override { return speculative::SpecMethod::kMtp1; }
  const std::vector<int64_t>& tapped_layers() const override { return tapped_; }
  int32_t max_drafts() const override { return 1; }
  bool has_confidence() const override { return false; }
  int64_t context_window() const override { return window_; }
  int64_t resume_positions() const override { return window_; }  // its ingest reads its own earlier rows
  Status ingest(std::span<const speculative::IngestItem> items, std::span<const float> hidden) override;
  Status propose(std::span<const speculative::ProposeItem> items, const speculative::DrawFn& draw,
                 std::vector<speculative::Proposal>& out) override;

 private:
  io::ModelConfig tc_;
  speculative::Mtp1Weights w_;
  std::vector<int64_t> tapped_;
  int32_t num_slots_;
  int64_t window_;
  DraftDeviceContext ctx_;
  DraftForward fwd_;
  std::unique_ptr<DraftDeviceLayer> layer_;
  std::vector<cuda::DeviceBuffer<uint8_t>> owned_;
  ops::cuda::DeviceWeight e_proj_, h_proj_;
  const float *enorm_ = nullptr, *hnorm_ = nullptr, *norm_ = nullptr;
  HcDevice hc_head_;
  cuda::DeviceBuffer<float> ring_, last_h_, X_, e_, ep_, hs_, h_, logits_;
  cuda::DeviceBuffer<uint8_t> hidden_up_, in_, pin_;
  cuda::DeviceBuffer<int32_t> ids_;
  std::vector<int64_t> last_pos_;
  std::vector<float> lg_host_;
};

// The drafter of `cfg.method` on the GPU (weights from cfg.model_dir).
Result<std::unique_ptr<speculative::Drafter>> create_cuda_drafter(const speculative::SpeculativeConfig& cfg,
                                                                  const io::ModelConfig& target, int32_t num_slots,
                                                                  DraftDeviceContext ctx);

}  // namespace dsinfer::backends
