// The grouped FP8 GEMM of the routed experts on CUTLASS 3.x's SM90 pointer-array grouped GEMM with blockwise scaling
// (see moe_grouped_cutlass_launch.h): TMA loads of A and B tiles with per-group tensor maps, a warp-specialized
// persistent kernel (one producer warpgroup, two cooperative consumer warpgroups on 128 x 128 x 128 tiles), FP8
// wgmma with fp32 accumulation promoted per 128-k block with the row scale x the weight block scale, bf16 output by
// TMA store. TWO instantiations, 1 x 1 and 1 x 2 clusters (CI compiles this file on 2 cores: each costs ~80 s there);
// the only translation unit that includes CUTLASS.
// The groups (expert, set) and their shapes come from the permutation's offsets on the device: one small kernel
// writes the problem shapes, pointers, strides and scale layouts, and CUTLASS's group tile scheduler reads them there
// (no host copy of the routing, so the path stays inside a captured forward).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "ops/moe/moe_grouped_cutlass_launch.h"

namespace dsinfer::ops::cuda {
namespace {

using namespace cute;


using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per group
using ElementA = cutlass::float_e4m3_t;   // activations [M, K], K contiguous
using ElementB = cutlass::float_e4m3_t;   // weights [N, K], K contiguous ("column-major" K x N)
using ElementD = cutlass::bfloat16_t;     // [M, N], N contiguous
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignAB = 16;  // elements per 16-byte access
constexpr int kAlignD = 8;

using TileShape = Shape<_128, _128, _128>;
// Activation scales per (row, 128 k), M-contiguous per group; weight scales per (128 n, 128 k), K-contiguous: the
// FP8_BLOCK layout [N / 128, K / 128] as the checkpoints store it.
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kMoeCutlassBlock, kMoeCutlassBlock,
                                                              cute::GMMA::Major::MN, cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// The two instantiations differ only in the cluster: 1 x 1, or 1 x 2 (two CTAs on adjacent N tiles of the same rows,
// the A tile loaded once and multicast to both). Same tiles, same k order: bitwise the same results.
template <int ClusterN>
struct Config {
  using ClusterShape = Shape<_1, Int<ClusterN>, _1>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA*, LayoutSFA*>, kAlignAB,
      ElementB, cute::tuple<LayoutB*, LayoutSFB*>, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};
using Config1 = Config<1>;
using Config2 = Config<2>;
using StrideA = typename Config1::GemmKernel::InternalStrideA;
using StrideB = typename Config1::GemmKernel::InternalStrideB;
using StrideD = typename Config1::GemmKernel::InternalStrideD;
static_assert(std::is_same_v<StrideA, typename Config2::GemmKernel::InternalStrideA> &&
              std::is_same_v<StrideB, typename Config2::GemmKernel::InternalStrideB> &&
              std::is_same_v<StrideD, typename Config2::GemmKernel::InternalStrideD>);
using Shape3 = typename ProblemShape::UnderlyingProblemShape;

// The per-group argument arrays in the workspace, then CUTLASS's own workspace (256-byte aligned pieces).
struct ArgArrays {
  Shape3* shapes;
  const ElementA** a;
  const ElementB** b;
  ElementD** d;
  const float** sfa;
  const float** sfb;
  StrideA* sa;
  StrideB* sb;
  StrideD* sd;
  LayoutSFA* lsfa;
  LayoutSFB* lsfb;
  void* cutlass_ws;
  size_t bytes;  // total, the CUTLASS workspace included
};

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

ArgArrays carve(void* base, int64_t groups, size_t cutlass_bytes) {
  ArgArrays r{};
  auto* p = static_cast<char*>(base);
  size_t at = 0;
  auto take = [&](auto*& ptr, size_t elem) {
    ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(p ? p + at : nullptr);
    at += align256(elem * size_t(groups));
  };
  take(r.shapes, sizeof(Shape3));
  take(r.a, sizeof(void*));
  take(r.b, sizeof(void*));
  take(r.d, sizeof(void*));
  take(r.sfa, sizeof(void*));
  take(r.sfb, sizeof(void*));
  take(r.sa, sizeof(StrideA));
  take(r.sb, sizeof(StrideB));
  take(r.sd, sizeof(StrideD));
  take(r.lsfa, sizeof(LayoutSFA));
  take(r.lsfb, sizeof(LayoutSFB));
  r.cutlass_ws = p ? p + at : nullptr;
  r.bytes = at + align256(cutlass_bytes);
  return r;
}

// One thread per group g = 2 e + s (gate and up of an expert next to each other: they read the same A rows).
__global__ void moe_cutlass_args_kernel(MoeCutlassGemmArgs a, ArgArrays r) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= a.experts * a.sets) return;
  const int64_t e = g / a.sets;
  const int s = int(g - e * a.sets);
  const int64_t first = a.offsets[e];
  const int m = a.offsets[e + 1] - a.offsets[e];
  const int n = int(a.N), k = int(a.K);
  r.shapes[g] = Shape3(m, n, k);
  r.a[g] = reinterpret_cast<const ElementA*>(a.a + first * a.K);
  r.b[g] = static_cast<const ElementB*>(a.w[s][e]);
  r.d[g] = static_cast<ElementD*>(a.d[s]) + first * a.N;
  r.sfa[g] = a.a_scale + first * (a.K / kMoeCutlassBlock);
  r.sfb[g] = a.w_scale[s] ? a.w_scale[s] + e * (a.N / kMoeCutlassBlock) * (a.K / kMoeCutlassBlock)
                          : static_cast<const float*>(a.w_scale_ptr[s][e]);
  StrideA sa{};
  cute::get<0>(sa) = a.K;
  StrideB sb{};
  cute::get<0>(sb) = a.K;
  StrideD sd{};
  cute::get<0>(sd) = a.N;
  r.sa[g] = sa;
  r.sb[g] = sb;
  r.sd[g] = sd;
  r.lsfa[g] = ScaleConfig::tile_atom_to_shape_SFA(make_shape(m, n, k, 1));
  r.lsfb[g] = ScaleConfig::tile_atom_to_shape_SFB(make_shape(m, n, k, 1));
}

template <class Gemm>
typename Gemm::Arguments gemm_arguments(int64_t groups, const ArgArrays& r, int device, int sm_count) {
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device;
  hw.sm_count = sm_count;
  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGrouped,
                                {int(groups), r.shapes, nullptr},
                                {r.a, r.sa, r.b, r.sb, r.sfa, r.lsfa, r.sfb, r.lsfb},
                                {{}, nullptr, nullptr, r.d, r.sd},
                                hw};
  auto& fusion = args.epilogue.thread;
  fusion.alpha = 1.0f;
  fusion.beta = 0.0f;
  return args;
}

// The current device and its SM count (0 without a device).
int device_sm_count(int& dev) {
  int sms = 0;
  dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return sms;
}

// The grouped GEMM of one configuration over the argument arrays already written into r.
template <class Gemm>
const char* run_gemm(int64_t groups, const ArgArrays& r, int dev, int sms, cudaStream_t st) {
  const typename Gemm::Arguments args = gemm_arguments<Gemm>(groups, r, dev, sms);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return "CUTLASS can_implement refused the problem";
  if (gemm.initialize(args, r.cutlass_ws, st) != cutlass::Status::kSuccess) return "CUTLASS initialize failed";
  if (gemm.run(st) != cutlass::Status::kSuccess) return "the CUTLASS grouped GEMM did not launch";
  return nullptr;
}

// CUTLASS's own workspace for `groups` groups: the larger of the two configurations'.
size_t cutlass_workspace(int64_t groups, const ArgArrays& r, int dev, int sms) {
  return std::max(Config1::Gemm::get_workspace_size(gemm_arguments<Config1::Gemm>(groups, r, dev, sms)),
                  Config2::Gemm::get_workspace_size(gemm_arguments<Config2::Gemm>(groups, r, dev, sms)));
}

}  // namespace

namespace detail {

size_t moe_cutlass_workspace_bytes(int64_t groups) {
  int dev = 0;
  const int sms = device_sm_count(dev);
  const ArgArrays probe = carve(nullptr, groups, 0);
  return carve(nullptr, groups, cutlass_workspace(groups, probe, dev, sms > 0 ? sms : 1)).bytes;
}

const char* launch_moe_cutlass_gemm(const MoeCutlassGemmArgs& a, void* ws, size_t ws_bytes, void* stream) {
  const int64_t groups = a.experts * a.sets;
  if (groups <= 0) return nullptr;
  int dev = 0;
  const int sms = device_sm_count(dev);
  if (sms <= 0) return "no CUDA device";
  if (a.cluster_n != 1 && a.cluster_n != 2) return "cluster_n must be 1 or 2";
  if (a.cluster_n == 2 && a.N % (2 * kMoeCutlassBlock) != 0) return "1 x 2 clusters need N % 256 == 0";
  ArgArrays r = carve(ws, groups, 0);
  r = carve(ws, groups, cutlass_workspace(groups, r, dev, sms));
  if (r.bytes > ws_bytes) return "the workspace is smaller than moe_cutlass_workspace_bytes";
  if (reinterpret_cast<uintptr_t>(ws) % 256 != 0) return "the workspace is not 256-byte aligned (TMA descriptors)";
  auto* st = static_cast<cudaStream_t>(stream);
  moe_cutlass_args_kernel<<<unsigned((groups + 127) / 128), 128, 0, st>>>(a, r);
  if (cudaPeekAtLastError() != cudaSuccess) return "moe_cutlass_args_kernel did not launch";
  if (a.cluster_n == 2) return run_gemm<Config2::Gemm>(groups, r, dev, sms, st);
  return run_gemm<Config1::Gemm>(groups, r, dev, sms, st);
}

}  // namespace detail
}  // namespace dsinfer::ops::cuda
