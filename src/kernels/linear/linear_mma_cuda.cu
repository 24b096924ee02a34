// Decode/verify linear (a decode group of up to 64 rows): the dispatcher and the register-prefetch
// mma kernel. Production is the persistent bulk-copy kernel (linear_persistent_cuda.cu) up to 4
// rows and the batched kernel (linear_batch_cuda.cu) for 5..64, for every shape; the kernels here
// and in linear_stream_cuda.cu stay as measured alternatives that
// kernel_bench times and cross-checks (linear_skinny_set_variant, docs/cuda.md), variant 1 being
// its baseline; they take LinearEpilogue::kNone only (the bench times nothing else) and at most 16
// rows (under them linear_cuda forms groups of 16).
//
// This file's kernel: mma.sync m16n8k16 bf16 -> fp32 with the weights as the 16-row A operand and
// up to 16 tokens as one or two 8-column B tiles. A block of 4 warps owns 16 weight rows; warp w
// takes k-steps w, w+4, ... with 2 (or 4) steps of weights in flight in registers, and the 4 warp
// partials are added as (w0 + w1) + (w2 + w3). Each token is its own B column, computed by the
// same instruction sequence whatever n_tokens is. Within a 32-wide k-step lane (g, t) loads 8
// consecutive k of rows g, g+8 and of token g with one 16-byte load each; the mma's k index is a
// permutation of the true k, identical for A and B.
#include <iterator>

#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerBlock = 16;
constexpr int kStepK = 32;
constexpr int kStreamMaxSplits = 8;  // k-split cap handed to the bulk-copy kernel

__device__ __forceinline__ uint4 ldg16(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

template <int kNTiles, int kDepth, typename TOut>
__global__ void __launch_bounds__(kWarps * 32)
    linear_mma_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride,
                      const __nv_bfloat16* __restrict__ w, int64_t in, int64_t out_f,
                      TOut* __restrict__ out, int64_t out_stride, int n_tokens) {
  __shared__ float part[kWarps][kNTiles][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const int64_t ra = min(row0 + g, out_f - 1), rb = min(row0 + g + 8, out_f - 1);  // clamped
  const __nv_bfloat16* wa = w + ra * in;
  const __nv_bfloat16* wb = w + rb * in;
  float c[kNTiles][4];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) c[j][i] = 0.f;
  }
  const int64_t n_steps = (in + kStepK - 1) / kStepK;
  // This warp's k-steps: warp, warp + kWarps, ... below n_steps.
  const int64_t begin = warp, end = n_steps, stride = kWarps;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto fetch = [&](uint4& da, uint4& db, int64_t step) {
    const int64_t k = step * kStepK + 8 * t;
    const bool ok = step < end && k < in;
    da = ok ? ldg16(wa + k) : zero;
    db = ok ? ldg16(wb + k) : zero;
  };
  // Ring of kDepth k-steps per warp: slot d holds step base + d * stride.
  uint4 a_ring[kDepth], b_ring[kDepth];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) fetch(a_ring[d], b_ring[d], begin + d * stride);
  for (int64_t base = begin; base < end; base += kDepth * stride) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int64_t step = base + d * stride;
      if (step >= end) break;
      const uint4 pa = a_ring[d], pb = b_ring[d];
      fetch(a_ring[d], b_ring[d], step + kDepth * stride);
      const int64_t k = step * kStepK + 8 * t;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const int tok = j * 8 + g;
        const uint4 xv = (tok < n_tokens && k < in) ? ldg16(x + tok * x_stride + k) : zero;
        mma_bf16(c[j], pa.x, pb.x, pa.y, pb.y, xv.x, xv.y);
        mma_bf16(c[j], pa.z, pb.z, pa.w, pb.w, xv.z, xv.w);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) part[warp][j][i][lane] = c[j][i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float v =
          (part[0][j][i][lane] + part[1][j][i][lane]) + (part[2][j][i][lane] + part[3][j][i][lane]);
      const int64_t row = row0 + g + (i >= 2 ? 8 : 0);  // c0,c1: row g; c2,c3: row g + 8
      const int tok = j * 8 + 2 * t + (i & 1);          // c0,c2: column 2t; c1,c3: 2t + 1
      if (row < out_f && tok < n_tokens) out[tok * out_stride + row] = cuda::from_float<TOut>(v);
    }
  }
}

// Exploration knob for bench/kernel_bench (linear_skinny_set_variant): variant 0 is production.
enum class Kind {
  kPersistent,    // linear_persistent_cuda.cu at configuration `param` (0 = production;
                  // kNarrowGroups: production in decode groups of 16 rows, the wide one unused)
  kMma,           // this file's kernel with `param` k-steps of register prefetch (2 or 4)
  kStream,        // linear_stream_cuda.cu with a k-split cap of `param`
  kPreviousRule,  // the rule before the persistent kernel: this kernel for many tiles, the
                  // bulk-copy kernel with a k-split of 8 for few
  kWgmma,         // linear_wgmma_cuda.cu at every n (the persistent kernel where it does not apply)
  kInKernelSums,  // production, the wgmma kernel's input_rms sums in the kernel up to `param` rows
  kSplitRule,     // production with the wgmma kernel's split rule `param` (linear_cuda.cuh)
  kRemoved,       // a variant measured and removed; its number stays taken
  kShapeRule,     // production with the wgmma kernel's item shape rule `param` (linear_cuda.cuh)
};
struct Variant {
  Kind kind;
  int param;
};
constexpr int kNarrowGroups = 5;
// 10: the groups of 16 that decode batches ran in before the wide configuration (A/B, fallback);
// 11: the wide configuration's 512-k alternative; 12: groups of 32 in the wide configuration (the
// rule before the batched kernel); 13: the wgmma kernel for every decode group, also of 1..4 rows;
// 14: production with the wgmma kernel's input_rms sums of squares computed in the kernel for calls
// of up to 16 rows (no sum_squares_kernel launch; docs/cuda.md known gap 6); 15: production with
// the wgmma kernel's split rule before (one rank per unit only when the items are fewer than the
// block slots: no split remainders after whole waves); 16: production with class groups (a
// rank's classes split over blocks too; slower, kept for the measurement); 17: removed (pairs of
// token tiles sharing their weight boxes by cluster multicast, branch tried/linear-multicast:
// 0.38-0.5x production's speed at 128-256 rows on the H200, 2026-12-05); 18, 19: production with
// the wgmma kernel's item shapes by the cost rule, the rows rule, at every row count
// (linear_wgmma_shape.h).
constexpr Variant kVariants[] = {{Kind::kPersistent, 0},
                                 {Kind::kMma, 2},
                                 {Kind::kMma, 4},
                                 {Kind::kStream, 1},
                                 {Kind::kStream, 8},
                                 {Kind::kPreviousRule, 0},
                                 {Kind::kPersistent, 1},
                                 {Kind::kPersistent, 2},
                                 {Kind::kPersistent, 3},
                                 {Kind::kPersistent, 4},
                                 {Kind::kPersistent, kNarrowGroups},
                                 {Kind::kPersistent, kLinearPersistentWide512},
                                 {Kind::kPersistent, kLinearPersistentWide},
                                 {Kind::kWgmma, 0},
                                 {Kind::kInKernelSums, 16},
                                 {Kind::kSplitRule, 1},
                                 {Kind::kSplitRule, 2},
                                 {Kind::kRemoved, 17},
                                 {Kind::kShapeRule, 1},
                                 {Kind::kShapeRule, 2}};
int g_variant = 0;

template <int kNTiles, int kDepth, typename TOut>
void launch_mma(const LinearShape& s, cudaStream_t stream) {
  const unsigned grid = cuda::ceil_div(s.out_f, kRowsPerBlock);
  linear_mma_kernel<kNTiles, kDepth, TOut><<<grid, kWarps * 32, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(s.x), s.x_stride, static_cast<const __nv_bfloat16*>(s.w),
      s.in, s.out_f, static_cast<TOut*>(s.out), s.out_stride, static_cast<int>(s.n));
  cuda::check_launch("linear_mma_kernel");
}

template <int kNTiles, typename TOut>
void launch_variant(const Variant& v, const LinearShape& s, cudaStream_t stream) {
  constexpr bool f32 = sizeof(TOut) == 4;
  const int64_t tiles = (s.out_f + kRowsPerBlock - 1) / kRowsPerBlock;
  switch (v.kind) {
    case Kind::kPersistent:
      return linear_skinny_persistent(s, f32, v.param, stream);
    case Kind::kMma:
      return v.param == 4 ? launch_mma<kNTiles, 4, TOut>(s, stream)
                          : launch_mma<kNTiles, 2, TOut>(s, stream);
    case Kind::kStream:
      return linear_skinny_stream(s, f32, v.param, stream);
    case Kind::kPreviousRule:
      if (tiles < 4 * cuda::sm_count())
        return linear_skinny_stream(s, f32, kStreamMaxSplits, stream);
      return launch_mma<kNTiles, 2, TOut>(s, stream);
    case Kind::kWgmma:
    case Kind::kInKernelSums:
    case Kind::kSplitRule:
    case Kind::kRemoved:
    case Kind::kShapeRule:
      break;  // launch() takes them
  }
}

template <typename TOut>
void launch(const LinearShape& s, cudaStream_t stream) {
  const Variant& v = kVariants[g_variant];
  if (v.kind == Kind::kPersistent) {  // production: the kernel picks its own B tiles
    return linear_skinny_persistent(s, sizeof(TOut) == 4, v.param, stream);
  }
  if (v.kind == Kind::kWgmma) {
    if (linear_decode_wgmma(s, sizeof(TOut) == 4, stream)) return;
    return linear_skinny_persistent(s, sizeof(TOut) == 4, 0, stream);
  }
  if (v.kind == Kind::kInKernelSums) {
    linear_wgmma_set_inkernel_sums(v.param);
    linear_skinny_persistent(s, sizeof(TOut) == 4, 0, stream);
    linear_wgmma_set_inkernel_sums(kInKernelSumsRows);
    return;
  }
  if (v.kind == Kind::kSplitRule) {
    linear_wgmma_set_split_rule(v.param);
    linear_skinny_persistent(s, sizeof(TOut) == 4, 0, stream);
    linear_wgmma_set_split_rule(0);
    return;
  }
  TANDEM_CHECK(v.kind != Kind::kRemoved, "linear: decode variant {} was removed (bench only)",
               g_variant);
  if (v.kind == Kind::kShapeRule) {
    linear_wgmma_set_shape_rule(v.param);
    linear_skinny_persistent(s, sizeof(TOut) == 4, 0, stream);
    linear_wgmma_set_shape_rule(0);
    return;
  }
  TANDEM_CHECK(s.epilogue == LinearEpilogue::kNone && !s.input_rms && s.n <= kSkinnyMaxTokens,
               "linear: decode variant {} (bench only) has no epilogue and no input_rms, and takes "
               "at most {} rows, got {}",
               g_variant, kSkinnyMaxTokens, s.n);
  if (s.n <= 8) return launch_variant<1, TOut>(v, s, stream);
  launch_variant<2, TOut>(v, s, stream);
}

}  // namespace

void linear_skinny_mma_bf16(const LinearShape& s, cudaStream_t stream) {
  launch<__nv_bfloat16>(s, stream);
}
void linear_skinny_mma_f32(const LinearShape& s, cudaStream_t stream) { launch<float>(s, stream); }
int64_t linear_decode_group_rows() {
  const Variant& v = kVariants[g_variant];
  if (!kWideDecodeGroups) return kSkinnyMaxTokens;
  if (v.kind == Kind::kWgmma || v.kind == Kind::kInKernelSums || v.kind == Kind::kSplitRule ||
      v.kind == Kind::kShapeRule)
    return kWgmmaMaxTokens;
  if (v.kind != Kind::kPersistent || v.param == kNarrowGroups) return kSkinnyMaxTokens;
  const bool older_wide = v.param == kLinearPersistentWide512 || v.param == kLinearPersistentWide;
  if (older_wide) return kWideMaxTokens;
  return kWgmmaMaxTokens;
}
int linear_skinny_set_variant(int v) {
  if (v >= 0 && v < static_cast<int>(std::size(kVariants))) g_variant = v;
  return static_cast<int>(std::size(kVariants));
}

}  // namespace tandem::kernels
