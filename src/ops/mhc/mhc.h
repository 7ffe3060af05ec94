// mHC (manifold-constrained hyper-connections, architecture notes §7). The residual of each token is n = hc_mult
// streams of D channels. Before a sublayer, hc_pre mixes the streams into one input (pre weights) and yields
// post/comb for hc_post, which writes the sublayer output back: X'_k = post_k * f + sum_j comb[j][k] * X_j.
// hc_head collapses the streams once more before the final norm (V4; V4.1 collapses with the last site's pre).
#pragma once
#include <cstdint>

namespace dsinfer::ops {

struct HcParams {
  const float* fn;     // [(2+n)*n, n*D] mixing weights (hc_head: [n, n*D])
  const float* base;   // [(2+n)*n]      (hc_head: [n])
  const float* scale;  // [3]            (hc_head: [1])
  int64_t n = 4, dim = 0;
  int64_t sinkhorn_iters = 20;
  float hc_eps = 1e-6f, rms_eps = 1e-6f;
};

// x: [n, D] one token's streams. Outputs: y [D] collapsed input, post [n], comb [n, n] (row-major, comb[j*n+k]).
void hc_pre_ref(const HcParams& p, const float* x, float* y, float* post, float* comb);
// The three coefficient sets of one site without the collapse: pre [n], post [n], comb [n, n] (hc_pre_ref =
// hc_mixes_ref + hc_collapse_ref with its own pre). DeepSeek-V4.1 collapses with the previous site's pre.
void hc_mixes_ref(const HcParams& p, const float* x, float* pre, float* post, float* comb);
// y [D] = sum_j pre[j] * x[j] (fp64 accumulation).
void hc_collapse_ref(int64_t n, int64_t dim, const float* x, const float* pre, float* y);
// x: [n, D] streams (in/out), f: [D] sublayer output.
void hc_post_ref(int64_t n, int64_t dim, const float* f, const float* post, const float* comb, float* x);
// x: [n, D] -> y [D] (the final collapse, HyperHead).
void hc_head_ref(const HcParams& p, const float* x, float* y);

}  // namespace dsinfer::ops
