// CudaRunner's hidden-state capture for speculative decoding (ModelRunner::set_hidden_capture): after each tapped
// layer the residual streams X [T, hc * D] are copied into hidden_dev_ [T, layers, hc * D] (one strided copy on
// the step's stream, so a decode graph captures it too); after the forward the whole capture goes to pinned host
// memory with the same synchronisation as the logits. The layout is the CPU runner's (model_runner.h).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backends/cuda/runner/cuda_runner_impl.h"
#include "backends/cuda/step/step_plan.h"
#include "backends/cuda/speculative/draft_cuda.h"
#include "cuda/cuda_common.h"

namespace dsinfer::backends {

Status CudaRunner::set_hidden_capture(std::vector<int64_t> layers) {
  for (int64_t l : layers)
    if (l < 0 || l >= cfg_.num_hidden_layers)
      return Status::errorf("cuda runner: hidden-state capture of layer {} outside [0, {})", l, cfg_.num_hidden_layers);
  std::vector<int64_t> index(size_t(cfg_.num_hidden_layers), -1);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (index[size_t(layers[i])] >= 0) return Status::errorf("cuda runner: layer {} captured twice", layers[i]);
    index[size_t(layers[i])] = int64_t(i);
  }
  // The decode graphs of both modes are kept (graph_key): a speculative engine turns the capture off at rest and on
  // again to draft, and clearing them there recaptured every graph of the batch at each switch (session 15). Only
  // another set of tapped layers makes the capturing graphs stale.
  if (!layers.empty() && layers != graph_capture_layers_) {
    graphs_.clear();
    graph_capture_layers_ = layers;
  }
  capture_layers_ = std::move(layers);
  capture_index_ = std::move(index);
  hidden_view_ = {};
  return Status::ok();
}

int64_t CudaRunner::graph_key(int64_t T, int64_t S) const {
  return fixed_shape_key(T, S) * 2 + (capture_layers_.empty() ? 0 : 1);
}

void CudaRunner::free_capture() {
  hidden_view_ = {};
  if (hidden_host_) cudaFreeHost(hidden_host_);
  hidden_host_ = nullptr;
  hidden_host_floats_ = 0;
}

Status CudaRunner::ensure_capture(int64_t T) {
  hidden_view_ = {};
  capture_floats_ = 0;
  if (capture_layers_.empty()) return Status::ok();
  const size_t per_token = capture_layers_.size() * size_t(cfg_.hc_mult * cfg_.hidden_size);
  const size_t n = size_t(T) * per_token;
  capture_floats_ = n;
  if (hidden_dev_.size() < n) {  // grown for the token bucket (decode_graphs.h scratch_tokens)
    DSI_RETURN_IF_ERROR(hidden_dev_.alloc(std::max<size_t>(size_t(scratch_tokens(T)) * per_token, 64), "captured hidden states"));
    ++scratch_gen_;  // captured graphs hold the old pointer
  }
  if (download_hidden_ && hidden_host_floats_ < n) {
    free_capture();
    DSI_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&hidden_host_), std::max<size_t>(n, 64) * 4));
    hidden_host_floats_ = std::max<size_t>(n, 64);
  }
  return Status::ok();
}

Status RunnerCore::capture_hidden(int64_t l, const float* X, int64_t T) {
  if (capture_index_.empty() || capture_index_[size_t(l)] < 0 || T <= 0) return Status::ok();
  const size_t width = size_t(cfg_.hc_mult * cfg_.hidden_size), m = capture_layers_.size();
  if (hidden_dev_.size() < size_t(T) * m * width) return Status::error("cuda runner: hidden capture buffer too small");
  float* dst = hidden_dev_.data() + size_t(capture_index_[size_t(l)]) * width;
  DSI_CUDA_TRY(cudaMemcpy2DAsync(dst, m * width * 4, X, width * 4, width * 4, size_t(T),
                                 cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream_)));
  return Status::ok();
}

Status CudaRunner::download_hidden(int64_t T) {
  if (capture_layers_.empty() || T <= 0 || !download_hidden_) return Status::ok();
  const size_t n = size_t(T) * capture_layers_.size() * size_t(cfg_.hc_mult * cfg_.hidden_size);
  if (hidden_host_floats_ < n) return Status::error("cuda runner: pinned hidden capture buffer too small");
  DSI_CUDA_TRY(cudaMemcpyAsync(hidden_host_, hidden_dev_.data(), n * 4, cudaMemcpyDeviceToHost,
                               static_cast<cudaStream_t>(stream_)));
  hidden_view_ = std::span<const float>(hidden_host_, n);
  return Status::ok();
}

Result<std::unique_ptr<speculative::Drafter>> CudaRunner::create_drafter(const speculative::SpeculativeConfig& cfg,
                                                                         int32_t num_slots) {
  // One speculative path for every family. A family without a device drafter (its embedding and head not offered:
  // DeepSeek-V4.1 today) drafts with the host reference drafter of its own layout (the speculator's default, as
  // DSINFER_DRAFTER=host asks for V4), reading the downloaded capture; verification stays on the GPU.
  if (!fwd_->embed_weight() || !fwd_->head_weight()) return std::unique_ptr<speculative::Drafter>();
  if (const char* d = std::getenv("DSINFER_DRAFTER"); d && std::string(d) == "host") return std::unique_ptr<speculative::Drafter>();
  DraftDeviceContext ctx;
  ctx.stream = stream_;
  ctx.embed = fwd_->embed_weight();
  ctx.head = fwd_->head_weight();
  ctx.device_hidden = [this] { return std::span<const float>(hidden_dev_.data(), capture_floats_); };
  ctx.device_logits = [this] {
    const int64_t rows = std::max<int64_t>(dsamp_.logits_rows, 0);
    return std::span<const float>(rows > 0 ? fwd_->logits() : nullptr, size_t(rows * cfg_.vocab_size));
  };
  ctx.exact = exact_;
  ctx.graphs = graphs_enabled_;
  DSI_ASSIGN_OR_RETURN(std::unique_ptr<speculative::Drafter> d, create_cuda_drafter(cfg, cfg_, num_slots, std::move(ctx)));
  download_hidden_ = false;
  free_capture();
  return d;
}

}  // namespace dsinfer::backends
