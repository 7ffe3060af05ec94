// CUDA Engram kernels (see engram_cuda.h).
#include "cuda/ops_device.cuh"
#include "ops/engram/engram_launch.h"

namespace dsinfer::ops::cuda::detail {

namespace {
namespace dev = dsinfer::cuda::dev;
constexpr int kThreads = 128;

__device__ __forceinline__ int32_t* history(const EngramHashCudaParams& p, int32_t slot) {
  return reinterpret_cast<int32_t*>(p.slots + int64_t(slot) * p.slot_stride + p.ngram_offset);
}

// One thread per (token, Engram layer, hash column): column c = (k - 1) * heads + h hashes the n-gram of order k + 1
// ending at the token (the token ids at pos, pos - 1, .., pos - k: this step's, or the slot's history before
// start_pos), so a thread rolls k + 1 products and takes one 64-bit modulo (the same integer arithmetic, in the
// same order, as the reference's per-token loop, so the ids are identical).
__global__ void hash_kernel(StepDevice st, EngramHashCudaParams p, int64_t* hashes) {
  const int cols = int(p.cols()), per_token = int(p.layers) * cols;
  const int i = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  if (i >= int(st.T) * per_token) return;
  const int t = i / per_token, r = i - t * per_token, e = r / cols, col = r - e * cols;
  const int order = col / int(p.heads) + 1;  // k of the column
  const int32_t s = st.seq_of_token[t];
  const int64_t pos = st.pos[t], start = st.start_pos[s], t0 = st.cu_seqlens[s];
  const int32_t* hist = history(p, st.slot[s]);
  const int64_t* mult = p.multipliers + e * p.max_ngram;
  bool blocked = false;
  int64_t roll = 0;
  for (int k = 0; k <= order; ++k) {
    const int64_t q = pos - k;
    const int64_t tok = q < 0 ? -1 : q >= start ? int64_t(p.token_map[st.tokens[t0 + (q - start)]]) : int64_t(hist[q % p.ngram_rows]);
    blocked = blocked || tok < 0;
    const int64_t prod = (blocked ? p.pad_id : tok) * mult[k];
    roll = k == 0 ? prod : (roll ^ prod);
  }
  hashes[i] = roll % p.primes[e * cols + col] + p.offsets[e * cols + col];
}

__global__ void history_write_kernel(StepDevice st, EngramHashCudaParams p) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= st.T) return;
  const int32_t s = st.seq_of_token[t];
  const int64_t pos = st.pos[t], end = st.start_pos[s] + (st.cu_seqlens[s + 1] - st.cu_seqlens[s]);
  if (pos < end - p.ngram_rows) return;  // overwritten by a later position of the same chunk
  history(p, st.slot[s])[pos % p.ngram_rows] = p.token_map[st.tokens[t]];
}

__global__ void gather_kernel(const int64_t* hashes, int64_t layers, int64_t layer, int64_t cols, EngramTableDevice tb,
                              float* out) {
  const int64_t t = blockIdx.x, c = blockIdx.y, hd = tb.hd;
  int64_t id = hashes[(t * layers + layer) * cols + c];
  if (tb.wrap && id >= 0) id %= tb.rows;
  const bool ok = id >= 0 && id < tb.rows;
  float* o = out + (t * cols + c) * hd;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    float v = NAN;
    if (ok && tb.scale) {
      const uint8_t code = static_cast<const uint8_t*>(tb.data)[id * hd + i];
      const float s = ldexpf(1.0f, int(tb.scale[id * (hd / 32) + i / 32]) - 127);
      v = __fmul_rn(dsinfer::small_float::from_bits(dsinfer::small_float::e4m3_f32_bits(code)), s);
    } else if (ok) {
      v = static_cast<const float*>(tb.data)[id * hd + i];
    }
    o[i] = v;
  }
}

__global__ void __launch_bounds__(kThreads) gate_kernel(float* X, int64_t n, int64_t dim, const float* kv,
                                                        const float* weight, float eps) {
  const int64_t t = blockIdx.x / n, k = blockIdx.x % n;
  float* x = X + (t * n + k) * dim;
  const float* key = kv + t * (n + 1) * dim + k * dim;
  const float* value = kv + t * (n + 1) * dim + n * dim;
  const float* w = weight + k * dim;
  double sx = 0.0, sk = 0.0, dot = 0.0;
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) {
    sx += double(x[d]) * double(x[d]);
    sk += double(key[d]) * double(key[d]);
    dot += double(x[d]) * double(w[d]) * double(key[d]);
  }
  sx = dev::block_sum(sx);
  sk = dev::block_sum(sk);
  dot = dev::block_sum(dot);
  const double rstd = 1.0 / sqrt(sx / double(dim) + double(eps)) / sqrt(sk / double(dim) + double(eps));
  const double g = dot * rstd * (1.0 / sqrt(double(dim)));
  const double sq = sqrt(fmax(fabs(g), 1e-6));
  const double gate = 1.0 / (1.0 + exp(-copysign(sq, g)));
  __syncthreads();  // every thread has read x before it changes
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) x[d] = float(double(x[d]) + gate * double(value[d]));
}
}  // namespace

void launch_engram_hash(const StepDevice& st, const EngramHashCudaParams& p, int64_t* hashes, void* stream) {
  const int64_t n = st.T * p.layers * p.cols();
  hash_kernel<<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(st, p, hashes);
}

void launch_engram_history_write(const StepDevice& st, const EngramHashCudaParams& p, void* stream) {
  history_write_kernel<<<unsigned((st.T + 127) / 128), 128, 0, static_cast<cudaStream_t>(stream)>>>(st, p);
}

void launch_engram_gather(const int64_t* hashes, int64_t T, int64_t layers, int64_t layer, int64_t cols,
                          const EngramTableDevice& table, float* out, void* stream) {
  const dim3 grid{unsigned(T), unsigned(cols)};
  gather_kernel<<<grid, 64, 0, static_cast<cudaStream_t>(stream)>>>(hashes, layers, layer, cols, table, out);
}

void launch_engram_gate(float* X, int64_t T, int64_t n, int64_t dim, const float* kv, const float* weight, float eps,
                        void* stream) {
  gate_kernel<<<unsigned(T * n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(X, n, dim, kv, weight, eps);
}

}  // namespace dsinfer::ops::cuda::detail
