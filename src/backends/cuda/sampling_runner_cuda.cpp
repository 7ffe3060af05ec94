// CudaRunner's device sampling (ModelRunner::begin_sampled_step / sample_rows): the forward runs as in step() but
// the logits stay in device scratch; the packed row descriptions go up in one copy, ops::cuda::sample_rows samples
// every row on the runner's stream, and only the per-row results (ids, logprobs) come back. Saves the
// [rows, vocab] fp32 logits download (132 MB at 256 rows of the V4 vocabulary) and the host sampling.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_runner_impl.h"
#include "cuda/cuda_common.h"
#include "ops/sampling/sampling_cuda.h"

namespace dsinfer::backends {

namespace {
size_t align16(size_t n) { return (n + 15) & ~size_t(15); }
}  // namespace

DeviceSamplerBuffers::~DeviceSamplerBuffers() {
  if (host_in) cudaFreeHost(host_in);
  if (host_out) cudaFreeHost(host_out);
}

Status CudaRunner::begin_sampled_step(const scheduler::BatchPlan& plan) {
  dsamp_.logits_rows = -1;
  dsamp_.defer_logits = true;
  std::vector<float> unused;
  const Status s = step(plan, unused);
  dsamp_.defer_logits = false;
  if (s) dsamp_.logits_rows = plan.num_tokens() > 0 ? plan.num_logits() : 0;
  return s;
}

Status CudaRunner::sample_rows(const sampling::PackedRows& rows, std::vector<ops::SampleRowOut>& out) {
  DSI_RETURN_IF_ERROR(bind_device());
  const int64_t n = int64_t(rows.rows.size()), V = cfg_.vocab_size;
  out.clear();
  if (n == 0) return Status::ok();
  if (dsamp_.logits_rows < 0) return Status::error("cuda runner: sample_rows without a begin_sampled_step");
  if (rows.vocab() != V) return Status::errorf("cuda runner: rows packed for vocab {}, the model has {}", rows.vocab(), V);
  const size_t desc_bytes = align16(size_t(n) * sizeof(ops::SampleRowDesc));
  const size_t entry_bytes = align16(rows.entries.size() * sizeof(ops::SampleEntry));
  const size_t mask_bytes = rows.mask_words.size() * sizeof(int32_t);
  const size_t in_bytes = std::max<size_t>(desc_bytes + entry_bytes + mask_bytes, 4096);
  if (dsamp_.host_in_bytes < in_bytes) {
    if (dsamp_.host_in) cudaFreeHost(dsamp_.host_in);
    dsamp_.host_in = nullptr;
    dsamp_.host_in_bytes = 0;
    DSI_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&dsamp_.host_in), in_bytes));
    dsamp_.host_in_bytes = in_bytes;
  }
  if (dsamp_.host_out_rows < size_t(n)) {
    if (dsamp_.host_out) cudaFreeHost(dsamp_.host_out);
    dsamp_.host_out = nullptr;
    dsamp_.host_out_rows = 0;
    DSI_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&dsamp_.host_out), size_t(n) * sizeof(ops::SampleRowOut)));
    dsamp_.host_out_rows = size_t(n);
  }
  if (dsamp_.dev_in.size() < in_bytes) DSI_RETURN_IF_ERROR(dsamp_.dev_in.alloc(in_bytes, "device sampling input"));
  if (dsamp_.dev_out.size() < size_t(n)) DSI_RETURN_IF_ERROR(dsamp_.dev_out.alloc(size_t(n), "device sampling output"));
  const size_t work = size_t(ops::cuda::sample_rows_work_floats(n, V));
  if (dsamp_.work.size() < work) DSI_RETURN_IF_ERROR(dsamp_.work.alloc(work, "device sampling work rows"));

  std::memcpy(dsamp_.host_in, rows.rows.data(), size_t(n) * sizeof(ops::SampleRowDesc));
  if (!rows.entries.empty())
    std::memcpy(dsamp_.host_in + desc_bytes, rows.entries.data(), rows.entries.size() * sizeof(ops::SampleEntry));
  if (mask_bytes) std::memcpy(dsamp_.host_in + desc_bytes + entry_bytes, rows.mask_words.data(), mask_bytes);
  cudaStream_t cs = static_cast<cudaStream_t>(stream_);
  DSI_CUDA_TRY(cudaMemcpyAsync(dsamp_.dev_in.data(), dsamp_.host_in, desc_bytes + entry_bytes + mask_bytes,
                               cudaMemcpyHostToDevice, cs));
  ops::cuda::SampleRowsArgs a;
  a.logits = s_.logits.data();
  a.logits_stride = V;
  a.V = V;
  a.logits_rows = dsamp_.logits_rows;
  a.rows = reinterpret_cast<const ops::SampleRowDesc*>(dsamp_.dev_in.data());
  a.num_rows = n;
  a.entries = reinterpret_cast<const ops::SampleEntry*>(dsamp_.dev_in.data() + desc_bytes);
  a.num_entries = int64_t(rows.entries.size());
  a.mask_words = mask_bytes ? reinterpret_cast<const int32_t*>(dsamp_.dev_in.data() + desc_bytes + entry_bytes) : nullptr;
  a.num_mask_rows = rows.num_mask_rows();
  a.words_per_row = rows.words_per_row();
  a.work = dsamp_.work.data();
  a.out = dsamp_.dev_out.data();
  DSI_RETURN_IF_ERROR(ops::cuda::sample_rows(a, stream_));
  DSI_CUDA_TRY(cudaMemcpyAsync(dsamp_.host_out, dsamp_.dev_out.data(), size_t(n) * sizeof(ops::SampleRowOut),
                               cudaMemcpyDeviceToHost, cs));
  DSI_CUDA_TRY(cudaStreamSynchronize(cs));
  out.assign(dsamp_.host_out, dsamp_.host_out + n);
  return Status::ok();
}

}  // namespace dsinfer::backends
