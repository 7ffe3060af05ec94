// The RS grouped MoE kernels' A-operand decode (ops/moe/moe_grouped_rs_decode.cuh, the kernel's own code) on the
// GPU, exhaustively: every e2m1 code in every nibble position of a consumer thread's 16 FP4 bytes, for both weight
// rows, times every E8M0 scale byte. Over the documented exact range (scale bytes 66..192, moe_fast_common.h) each
// bf16 half must be bitwise e2m1 x 2^(s - 127) x 2^-kFastScaleShift (signed zeros included); byte 255 gives NaN,
// bytes 193..254 +-inf for nonzero codes (NaN for zeros: 0 x inf). Below 66 the products may underflow (documented,
// not produced by real checkpoints): counted, not asserted. Plain CUDA runtime (no fmt in .cu files).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/small_float.h"
#include "ops/moe/moe_fast_common.h"
#include "ops/moe/moe_grouped_rs_decode.cuh"

namespace {

namespace md = ::dsinfer::ops::moe_detail;
namespace sf = ::dsinfer::small_float;

constexpr int kThreads = 16;  // code offsets: thread i puts code (i + ...) % 16 in each nibble, so 16 cover them all
constexpr int kRegs = 8 * 4;  // 8 k-steps x 4 A registers

// Nibble n (0..7) of word q (0..3) of row r (0: w0, 1: w1) for thread i: every code at every position over 16 threads.
__host__ __device__ uint32_t code_of(int i, int r, int q, int n) {
  return uint32_t(r == 0 ? i + n + 8 * q : 3 * i + n + 8 * q + 5) & 15u;
}
// The scale byte of row r in block s (row 1 another byte, so that a mix-up of F0 and F1 shows).
__host__ __device__ uint32_t scale_of(int s, int r) { return uint32_t(r == 0 ? s : s + 1) & 255u; }

__global__ void rs_decode_kernel(uint32_t* out) {
  const int s = int(blockIdx.x), i = int(threadIdx.x);
  uint32_t w[2][4];
  for (int r = 0; r < 2; ++r)
    for (int q = 0; q < 4; ++q) {
      uint32_t v = 0;
      for (int n = 0; n < 8; ++n) v |= code_of(i, r, q, n) << (4 * n);
      w[r][q] = v;
    }
  const uint4 w0 = make_uint4(w[0][0], w[0][1], w[0][2], w[0][3]), w1 = make_uint4(w[1][0], w[1][1], w[1][2], w[1][3]);
  const uint32_t f0 = md::fp4_scale_bf16(scale_of(s, 0)), f1 = md::fp4_scale_bf16(scale_of(s, 1));
  uint32_t* o = out + (size_t(s) * kThreads + size_t(i)) * kRegs;
  for (int st = 0; st < 8; ++st) {
    uint32_t a[4];
    md::rs_decode_step(w0, w1, f0 | (f0 << 16), f1 | (f1 << 16), st, a);
    for (int j = 0; j < 4; ++j) o[4 * st + j] = a[j];
  }
}

// The word decode of MoeGroupedRsVariant::kWordStageItem (rs_decode_step_word; factors by fp4_scale_bf16x2 there,
// by fp4_scale_bf16 in session 24's intermediate steps) beside session 23's (rs_decode_step, factors by fp4_scale_bf16), on the same
// words and scale bytes: out[0 ..) session 23's registers, out[n ..) the word decode's with fp4_scale_bf16 factors,
// out[2 n ..) with fp4_scale_bf16x2 factors.
__global__ void rs_decode_word_kernel(uint32_t* out, size_t n) {
  const int s = int(blockIdx.x), i = int(threadIdx.x);
  uint32_t w[2][4];
  for (int r = 0; r < 2; ++r)
    for (int q = 0; q < 4; ++q) {
      uint32_t v = 0;
      for (int k = 0; k < 8; ++k) v |= code_of(i, r, q, k) << (4 * k);
      w[r][q] = v;
    }
  const uint4 w0 = make_uint4(w[0][0], w[0][1], w[0][2], w[0][3]), w1 = make_uint4(w[1][0], w[1][1], w[1][2], w[1][3]);
  const uint32_t f0 = md::fp4_scale_bf16(scale_of(s, 0)), f1 = md::fp4_scale_bf16(scale_of(s, 1));
  const uint32_t F0 = md::fp4_scale_bf16x2(scale_of(s, 0)), F1 = md::fp4_scale_bf16x2(scale_of(s, 1));
  const size_t o = (size_t(s) * kThreads + size_t(i)) * kRegs;
  for (int st = 0; st < 8; ++st) {
    uint32_t a[4], b[4], c[4];
    md::rs_decode_step(w0, w1, f0 | (f0 << 16), f1 | (f1 << 16), st, a);
    md::rs_decode_step_word(w0, w1, f0 | (f0 << 16), f1 | (f1 << 16), st, b);
    md::rs_decode_step_word(w0, w1, F0, F1, st, c);
    for (int j = 0; j < 4; ++j) {
      out[o + size_t(4 * st + j)] = a[j];
      out[n + o + size_t(4 * st + j)] = b[j];
      out[2 * n + o + size_t(4 * st + j)] = c[j];
    }
  }
}

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

float bf16_float(uint32_t h) {
  const uint32_t b = (h & 0xFFFFu) << 16;
  float f = 0.0f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace

TEST(MoeRsDecodeGpu, EveryCodeEveryScaleByte) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const size_t count = size_t(256) * kThreads * kRegs;
  uint32_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, count * 4), cudaSuccess);
  rs_decode_kernel<<<256, kThreads>>>(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<uint32_t> h(count);
  ASSERT_EQ(cudaMemcpy(h.data(), d, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  int64_t checked = 0, failures = 0, under_exact = 0, under_total = 0;
  for (int s = 0; s < 256; ++s)
    for (int i = 0; i < kThreads; ++i)
      for (int st = 0; st < 8; ++st)
        for (int j = 0; j < 4; ++j) {
          const int r = j & 1, pair = 2 * (st & 1) + (j >> 1), q = st >> 1;
          const uint32_t sc = scale_of(s, r), got = h[(size_t(s) * kThreads + size_t(i)) * kRegs + size_t(4 * st + j)];
          for (int half = 0; half < 2; ++half) {
            const uint32_t code = code_of(i, r, q, pair + 4 * half), bits = half ? got >> 16 : got & 0xFFFFu;
            const float v = bf16_float(bits);
            float e2m1 = 0.0f, scale = 0.0f;
            const uint32_t eb = sf::e2m1_f32_bits(code), xb = sf::e8m0_f32_bits(sc);
            std::memcpy(&e2m1, &eb, 4);
            std::memcpy(&scale, &xb, 4);
            bool ok = true;
            if (sc == 255u) {
              ok = std::isnan(v);
            } else if (sc > 192u) {
              ok = (code & 7u) == 0 ? std::isnan(v) : std::isinf(v) && std::signbit(v) == std::signbit(e2m1);
            } else {
              const double want = double(e2m1) * double(scale) * std::ldexp(1.0, -md::kFastScaleShift);
              const float wf = float(want);
              uint32_t wb = 0;
              std::memcpy(&wb, &wf, 4);
              const bool exact = double(wf) == want && (wb & 0xFFFFu) == 0 && (wb >> 16) == bits;
              if (sc >= 66u) {
                ok = exact;
              } else {
                ++under_total;
                under_exact += exact ? 1 : 0;
              }
            }
            ++checked;
            if (!ok && ++failures <= 10)
              ADD_FAILURE() << "scale byte " << sc << " code " << code << " (thread " << i << " step " << st << " reg "
                            << j << " half " << half << "): bf16 bits 0x" << std::hex << bits << std::dec << " = " << v;
          }
        }
  EXPECT_EQ(failures, 0) << "of " << checked << " decoded halves";
  EXPECT_EQ(checked, int64_t(count) * 2);
  std::printf("RS decode: %lld halves checked; scale bytes 0..65 (underflow range, not asserted): %lld of %lld exact\n",
              (long long)checked, (long long)under_exact, (long long)under_total);
}

// MoeGroupedRsVariant::kWordStageItem's decode (with either scale factor form) against session 23's on the GPU: every e2m1 code in every
// nibble position of both weight rows, every step, times every E8M0 scale byte (NaN and inf factors included): the A
// registers must be bitwise equal (so the kernels' wgmmas get the same operands). The exactness of session 23's
// registers is EveryCodeEveryScaleByte's.
TEST(MoeRsDecodeGpu, WordDecodeSameBits) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const size_t count = size_t(256) * kThreads * kRegs;
  uint32_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 3 * count * 4), cudaSuccess);
  rs_decode_word_kernel<<<256, kThreads>>>(d, count);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<uint32_t> h(3 * count);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  int64_t failures = 0;
  for (size_t v = 1; v < 3; ++v)
    for (size_t i = 0; i < count; ++i)
      if (h[v * count + i] != h[i] && ++failures <= 10)
        ADD_FAILURE() << (v == 1 ? "word decode" : "word decode, fp4_scale_bf16x2") << ": register " << i
                      << " (scale byte " << i / (kThreads * kRegs) << ") 0x" << std::hex << h[v * count + i]
                      << " != 0x" << h[i] << std::dec;
  EXPECT_EQ(failures, 0) << "of " << 2 * count << " registers";
}
