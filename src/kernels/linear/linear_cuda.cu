// CUDA linear y = x W^T, bf16 x and W, fp32 accumulation, bf16 or f32 out. Each row belongs to
// a numerics family (LinearArgs::decode_rows), and the kernel is chosen by the family and the
// operands' alignment, never by how many rows share the call (docs/cuda.md):
//  - decode/verify rows with 16-byte aligned rows: the persistent bulk-copy kernel up to 4 rows,
//    the batched kernel for 5..64 (linear_persistent_cuda.cu, linear_batch_cuda.cu, through the
//    dispatcher in linear_mma_cuda.cu), one pass over the weights per launch; more decode rows (a
//    batch) run as groups [0, 64), [64, 128), ..., each token its own mma column and every group
//    size and kernel the same plan and order of additions, so a row's bits are the same at batch 1
//    and at batch 256 (kWideDecodeGroups off: groups of 16);
//  - decode rows otherwise (odd `in`, tests): this file's weight-streaming kernel. Each warp
//    owns kRows weight rows and applies every weight element to all tokens; lane l accumulates
//    elements k = 256 i + 8 l + j in increasing (i, j) order with fmaf, then a fixed butterfly
//    sums the lanes: a token's result never depends on how many tokens share it;
//  - prefill rows: cuBLAS (linear_gemm_cuda.cu), whatever their number; rows are invariant among
//    prefill calls but not bit-equal to the decode family.
// The epilogues and input_rms are fused into the persistent kernel. The other two paths first
// write x's normed rows (x times its inverse RMS, rounded) into input_scratch and read those, and
// write y into the caller's scratch, then run swiglu_cuda over its pairs or add it to out
// (rows_kernel): without input_rms the same bits as the persistent kernel, in two or three
// launches.
#include <fmt/format.h>

#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_cuda.cuh"
#include "kernels/swiglu/swiglu.h"

namespace tandem::kernels {

namespace {

constexpr int kRows = 4;   // weight rows per warp: x chunks are reused kRows times from registers
constexpr int kWarps = 4;  // warps per block
constexpr int kChunk = 8;  // bf16 elements per lane per step (one 16-byte load)

template <typename TOut>
__device__ __forceinline__ void store_out(TOut* p, float v) {
  *p = cuda::from_float<TOut>(v);
}

// Applies one 8-element chunk of kRows weight rows (at column k) to every token of the group:
// acc[r][t] += x[t, k + j] * w[r, k + j] for j = 0..7 in order, with fmaf.
template <int kNt, bool kVec>
__device__ __forceinline__ void apply_chunk(float (&acc)[kRows][kNt],
                                            const float (&wv)[kRows][kChunk],
                                            const __nv_bfloat16* __restrict__ x, int64_t x_stride,
                                            int64_t k, int64_t in, int t0, int n_tokens) {
#pragma unroll
  for (int t = 0; t < kNt; ++t) {
    if (t0 + t >= n_tokens) break;
    const __nv_bfloat16* xp = x + static_cast<int64_t>(t0 + t) * x_stride + k;
    float xv[kChunk];
    if constexpr (kVec) {
      const cuda::Bf16x8 v = cuda::load_bf16x8(xp);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) xv[j] = v.v[j];
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) xv[j] = k + j < in ? __bfloat162float(xp[j]) : 0.f;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) acc[r][t] = fmaf(xv[j], wv[r][j], acc[r][t]);
    }
  }
}

__device__ __forceinline__ void widen(float (&wv)[kRows][kChunk], const uint4 (&raw)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw[r]);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      wv[r][2 * i] = f.x;
      wv[r][2 * i + 1] = f.y;
    }
  }
}

// Raw 16-byte weight chunks of kRows rows at column k (rows past out_f are clamped, never stored).
__device__ __forceinline__ void fetch(uint4 (&raw)[kRows], const __nv_bfloat16* __restrict__ w,
                                      int64_t row0, int64_t out_f, int64_t in, int64_t k) {
  if (k >= in) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = row0 + r < out_f ? row0 + r : out_f - 1;
    raw[r] = __ldg(reinterpret_cast<const uint4*>(w + row * in + k));
  }
}

// kNt: tokens handled per pass (power of two >= n_tokens, at most 16). kVec: 16-byte loads
// (in % 8 == 0 and 16-byte aligned rows), software-pipelined two steps ahead so that weight loads
// stay in flight during the FMAs; otherwise scalar loads. Both apply chunks in the same order.
template <int kNt, bool kVec, typename TOut>
__global__ void __launch_bounds__(kWarps * 32)
    linear_skinny_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride,
                         const __nv_bfloat16* __restrict__ w, int64_t in, int64_t out_f,
                         TOut* __restrict__ out, int64_t out_stride, int n_tokens) {
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
  if (row0 >= out_f) return;
  const int t0 = blockIdx.y * kNt;  // token group (only > 0 on the fallback path for n > 16)
  float acc[kRows][kNt];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kNt; ++t) acc[r][t] = 0.f;
  }
  constexpr int64_t kStep = 32 * kChunk;
  float wv[kRows][kChunk];
  if constexpr (kVec) {
    uint4 ra[kRows], rb[kRows];
    const int64_t k0 = static_cast<int64_t>(lane) * kChunk;
    fetch(ra, w, row0, out_f, in, k0);
    fetch(rb, w, row0, out_f, in, k0 + kStep);
    for (int64_t k = k0; k < in; k += 2 * kStep) {
      widen(wv, ra);
      fetch(ra, w, row0, out_f, in, k + 2 * kStep);
      apply_chunk<kNt, true>(acc, wv, x, x_stride, k, in, t0, n_tokens);
      if (k + kStep >= in) break;
      widen(wv, rb);
      fetch(rb, w, row0, out_f, in, k + 3 * kStep);
      apply_chunk<kNt, true>(acc, wv, x, x_stride, k + kStep, in, t0, n_tokens);
    }
  } else {
    for (int64_t k = static_cast<int64_t>(lane) * kChunk; k < in; k += kStep) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t row = row0 + r < out_f ? row0 + r : out_f - 1;
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          wv[r][j] = k + j < in ? __bfloat162float(w[row * in + k + j]) : 0.f;
        }
      }
      apply_chunk<kNt, false>(acc, wv, x, x_stride, k, in, t0, n_tokens);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kNt; ++t) {
      const float s = cuda::warp_sum(acc[r][t]);
      if (lane == 0 && row0 + r < out_f && t0 + t < n_tokens) {
        store_out(out + static_cast<int64_t>(t0 + t) * out_stride + row0 + r, s);
      }
    }
  }
}

template <int kNt, typename TOut>
void launch_skinny_nt(const LinearShape& s, cudaStream_t stream) {
  const dim3 grid(cuda::ceil_div(s.out_f, kRows * kWarps), cuda::ceil_div(s.n, kNt));
  const auto* x = static_cast<const __nv_bfloat16*>(s.x);
  const auto* w = static_cast<const __nv_bfloat16*>(s.w);
  auto* out = static_cast<TOut*>(s.out);
  if (s.vec_ok) {
    linear_skinny_kernel<kNt, true, TOut><<<grid, kWarps * 32, 0, stream>>>(
        x, s.x_stride, w, s.in, s.out_f, out, s.out_stride, static_cast<int>(s.n));
  } else {
    linear_skinny_kernel<kNt, false, TOut><<<grid, kWarps * 32, 0, stream>>>(
        x, s.x_stride, w, s.in, s.out_f, out, s.out_stride, static_cast<int>(s.n));
  }
  cuda::check_launch("linear_skinny_kernel");
}

template <typename TOut>
void launch_skinny(const LinearShape& s, cudaStream_t stream) {
  if (s.n <= 1) return launch_skinny_nt<1, TOut>(s, stream);
  if (s.n <= 2) return launch_skinny_nt<2, TOut>(s, stream);
  if (s.n <= 4) return launch_skinny_nt<4, TOut>(s, stream);
  if (s.n <= 8) return launch_skinny_nt<8, TOut>(s, stream);
  launch_skinny_nt<16, TOut>(s, stream);  // n > 16: decode groups of up to 32, odd prefill rows
}

// The unfused steps, one block per token row t: v = y[t, j], times the inverse RMS of x[t, :] and
// rounded when `rms`, then stored to out[t, j] or added to it. With y = x and rms: the normed x.
__global__ void rows_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride, int64_t in,
                            bool rms, float eps, const __nv_bfloat16* y, int64_t y_stride,
                            __nv_bfloat16* out, int64_t out_stride, int64_t cols, bool add) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  float inv = 1.f;
  if (rms) {
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < in; i += blockDim.x) {
      const float v = __bfloat162float(x[t * x_stride + i]);
      ss += v * v;
    }
    inv = 1.f / sqrtf(cuda::block_sum(ss, scratch) / static_cast<float>(in) + eps);
  }
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = __bfloat162float(y[t * y_stride + j]);
    if (rms) v = __bfloat162float(__float2bfloat16_rn(v * inv));
    __nv_bfloat16& o = out[t * out_stride + j];
    o = __float2bfloat16_rn(add ? __bfloat162float(o) + v : v);
  }
}

// rows_kernel over bf16 tensors, with the inverse RMS of x's rows when `rms`.
void rows(const Tensor& x, bool rms, float eps, const Tensor& y, const Tensor& out, bool add,
          cudaStream_t stream) {
  rows_kernel<<<static_cast<unsigned>(y.dim(0)), 256, 0, stream>>>(
      x.data<const __nv_bfloat16>(), x.stride(0), x.dim(1), rms, eps, y.data<const __nv_bfloat16>(),
      y.stride(0), out.data<__nv_bfloat16>(), out.stride(0), y.dim(1), add);
  cuda::check_launch("rows_kernel");
}

}  // namespace

namespace {

// One launch family over all of a's rows.
void linear_family(const LinearArgs& a, bool decode, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.x, DType::kBF16, "linear", "x");
  cuda::expect_cuda_dtype(a.weight, DType::kBF16, "linear", "weight");
  cuda::expect_cuda(a.out, "linear", "out");
  cuda::expect_last_contiguous(a.x, "linear", "x");
  cuda::expect_last_contiguous(a.out, "linear", "out");
  TANDEM_CHECK(a.out.dtype() == DType::kBF16 || a.out.dtype() == DType::kF32,
               "linear_cuda: out must be bf16 or f32, got {}", a.out.describe());
  TANDEM_CHECK(a.weight.is_contiguous(), "linear_cuda: weight {} must be contiguous",
               a.weight.describe());
  const bool pairs = a.epilogue == LinearEpilogue::kSwiGluPairs;
  const bool add = a.epilogue == LinearEpilogue::kAddToOut;
  LinearShape s;
  s.n = a.x.dim(0);
  s.in = a.x.dim(1);
  s.out_f = a.weight.dim(0);
  TANDEM_CHECK(a.weight.dim(1) == s.in && a.out.dim(0) == s.n &&
                   a.out.dim(1) == (pairs ? s.out_f / 2 : s.out_f),
               "linear_cuda: x {} weight {} out {} do not agree", a.x.describe(),
               a.weight.describe(), a.out.describe());
  if (pairs || add) {
    pairs ? linear_expect_swiglu_pairs(a, "linear_cuda") : linear_expect_scratch(a, "linear_cuda");
    cuda::expect_cuda_dtype(a.out, DType::kBF16, "linear", "out (epilogue)");
    cuda::expect_cuda_dtype(a.scratch, DType::kBF16, "linear", "scratch (epilogue)");
    cuda::expect_last_contiguous(a.scratch, "linear", "scratch");
  }
  if (a.input_rms) {
    TANDEM_CHECK(a.input_scratch.shape() == a.x.shape(),
                 "linear_cuda (input_rms): input_scratch must be [n_tokens, in] like x {}, got {}",
                 a.x.describe(), a.input_scratch.describe());
    cuda::expect_cuda_dtype(a.input_scratch, DType::kBF16, "linear", "input_scratch");
    cuda::expect_last_contiguous(a.input_scratch, "linear", "input_scratch");
  }
  if (s.n == 0 || s.out_f == 0) return;
  s.x = a.x.raw();
  s.w = a.weight.raw();
  s.out = a.out.raw();
  s.x_stride = a.x.stride(0);
  s.out_stride = a.out.stride(0);
  const auto vec_loadable = [&s] {  // x and w rows readable as 16-byte vectors
    return s.in % 8 == 0 && s.x_stride % 8 == 0 && cuda::aligned16(s.x) && cuda::aligned16(s.w);
  };
  s.vec_ok = vec_loadable();
  const bool f32_out = a.out.dtype() == DType::kF32;
  const cudaStream_t stream = cuda::stream_of(ctx);
  TANDEM_CHECK(!decode || s.n <= linear_decode_group_rows(),
               "linear_cuda: {} decode rows in one launch (at most {})", s.n,
               linear_decode_group_rows());
  if (decode && s.vec_ok) {  // decode/verify: epilogue and scale are fused
    s.epilogue = a.epilogue;
    s.input_rms = a.input_rms;
    s.input_rms_eps = a.input_rms_eps;
    return f32_out ? linear_skinny_mma_f32(s, stream) : linear_skinny_mma_bf16(s, stream);
  }
  if (a.input_rms) {  // the normed rows, which the linear then reads
    rows(a.x, true, a.input_rms_eps, a.x, a.input_scratch, false, stream);
    s.x = a.input_scratch.raw();
    s.x_stride = a.input_scratch.stride(0);
    s.vec_ok = vec_loadable();
  }
  const Tensor& y = pairs || add ? a.scratch : a.out;  // y, then the epilogue
  s.out = y.raw();
  s.out_stride = y.stride(0);
  if (!decode && s.vec_ok) {
    f32_out ? linear_gemm_f32(s, stream) : linear_gemm_bf16(s, stream);
  } else {
    f32_out ? launch_skinny<float>(s, stream) : launch_skinny<__nv_bfloat16>(s, stream);
  }
  if (add) rows(a.x, false, 0.f, y, a.out, true, stream);
  if (pairs) swiglu_cuda({.out = a.out, .gate_up = a.scratch}, ctx);
}

// Rows [begin, end) of every row tensor of a.
LinearArgs rows_of(const LinearArgs& a, int64_t begin, int64_t end) {
  LinearArgs r = a;
  auto cut = [&](Tensor& t) {
    if (t.raw() != nullptr) t = t.slice(0, begin, end);
  };
  cut(r.x), cut(r.out), cut(r.scratch), cut(r.input_scratch);
  r.decode_rows = -1;
  return r;
}

// The decode rows of a call: LinearArgs::decode_rows, or by n_tokens alone when it is -1.
int64_t decode_rows_of(const LinearArgs& a) {
  const int64_t n = a.x.dim(0);
  return a.decode_rows < 0 ? (n <= kLinearDecodeMaxTokens ? n : 0) : std::min(a.decode_rows, n);
}

// The prefill path's dequantised copy of an FP8 matrix (linear_reserve_fp8_scratch); never
// destroyed, since a static's destructor would free it after the CUDA runtime has shut down.
Tensor& g_fp8_scratch = *new Tensor();

Fp8BatchMode g_fp8_batch = Fp8BatchMode::kProduction;  // linear_fp8_set_batch
int64_t g_fp8_wgmma_rows = -1;            // linear_fp8_set_wgmma (negative: fp8_wgmma_min_rows)
bool g_fp8_prefill_decode_order = false;  // linear_fp8_set_prefill_decode_order

// FP8 weights: decode rows through linear_fp8_cuda.cu's kernel (groups of up to 4 rows, and of
// 5..8 where its staged form holds the matrix's range), the batched one (5..32 rows) or, for calls
// of fp8_wgmma_min_rows rows or more, the wgmma one, its f16 tokens in the prefill scratch (after
// the prefill rows' GEMM: stream order); prefill rows on the tensor cores with FP8 activations
// (linear_fp8_prefill_cuda.cu) where that path takes the matrix, else through the bf16 family on
// the matrix dequantised (and folded) into the scratch.
void linear_fp8(const LinearArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.x, DType::kBF16, "linear", "x");
  cuda::expect_cuda(a.out, "linear", "out");
  cuda::expect_last_contiguous(a.x, "linear", "x");
  cuda::expect_last_contiguous(a.out, "linear", "out");
  const int64_t n = a.x.dim(0), in = a.x.dim(1), out_f = a.weight.dim(0);
  const int64_t r = a.scale_block_rows;
  TANDEM_CHECK(a.weight.is_contiguous() && a.weight.dim(1) == in,
               "linear_cuda: FP8 weight {} must be contiguous [out, in={}]", a.weight.describe(),
               in);
  linear_expect_fp8_scales(a, "linear_cuda");
  TANDEM_CHECK(r <= kFp8BlockCols && (r & (r - 1)) == 0,
               "linear_cuda: FP8 weight {} has scale blocks of {} rows (a power of two up to {})",
               a.weight.describe(), r, kFp8BlockCols);
  cuda::expect_cuda(a.weight_scale_inv, "linear", "weight_scale_inv");
  TANDEM_CHECK(in % 16 == 0 && a.x.stride(0) % 8 == 0 && cuda::aligned16(a.x.raw()) &&
                   cuda::aligned16(a.weight.raw()),
               "linear_cuda: FP8 weight {} needs in a multiple of 16 and 16-byte aligned x rows, "
               "got x {}",
               a.weight.describe(), a.x.describe());
  if (a.weight_fold.raw() != nullptr) {
    cuda::expect_cuda_dtype(a.weight_fold, DType::kBF16, "linear", "weight_fold");
    TANDEM_CHECK(a.weight_fold.is_contiguous() && a.weight_fold.numel() == in &&
                     cuda::aligned16(a.weight_fold.raw()),
                 "linear_cuda: weight_fold {} must be a contiguous, aligned bf16 [{}]",
                 a.weight_fold.describe(), in);
  }
  if (n == 0 || out_f == 0) return;
  const bool pairs = a.epilogue == LinearEpilogue::kSwiGluPairs;
  TANDEM_CHECK(a.out.dim(0) == n && a.out.dim(1) == (pairs ? out_f / 2 : out_f),
               "linear_cuda: x {} weight {} out {} do not agree", a.x.describe(),
               a.weight.describe(), a.out.describe());
  LinearShape s;
  s.w = a.weight.raw();
  s.in = in;
  s.out_f = out_f;
  s.w_scale = a.weight_scale_inv.data<const float>();
  s.scale_block_rows = r;
  s.fold = a.weight_fold.raw();
  const cudaStream_t stream = cuda::stream_of(ctx);
  // FP8 prefill rows in the decode order (linear_fp8_set_prefill_decode_order): every row.
  const int64_t decode_rows = g_fp8_prefill_decode_order ? n : decode_rows_of(a);
  bool prefill_done = decode_rows == n;
  if (!prefill_done) {  // on the tensor cores, where that path takes the matrix
    const LinearArgs b = rows_of(a, decode_rows, n);
    LinearShape p = s;
    p.n = b.x.dim(0);
    p.x = b.x.raw();
    p.x_stride = b.x.stride(0);
    p.out = b.out.raw();
    p.out_stride = b.out.stride(0);
    p.epilogue = a.epilogue;
    p.input_rms = a.input_rms;
    p.input_rms_eps = a.input_rms_eps;
    prefill_done = a.out.dtype() == DType::kBF16 &&
                   linear_fp8_prefill_tc(p, g_fp8_scratch.raw(), g_fp8_scratch.numel() * 2, stream);
  }
  if (!prefill_done) {  // prefill rows: the bf16 family on the dequantised, folded matrix
    TANDEM_CHECK(g_fp8_scratch.numel() >= a.weight.numel(),
                 "linear_cuda: FP8 weight {} needs linear_reserve_fp8_scratch({}) before its "
                 "prefill rows (reserved: {})",
                 a.weight.describe(), a.weight.numel(), g_fp8_scratch.numel());
    const Tensor w = g_fp8_scratch.slice(0, 0, a.weight.numel()).reshape({out_f, in});
    linear_fp8_dequantize(s, w.raw(), stream);
    LinearArgs b = rows_of(a, decode_rows, n);
    b.weight = w;
    b.weight_scale_inv = Tensor();
    b.weight_fold = Tensor();
    linear_family(b, false, ctx);
  }
  const bool f32_out = a.out.dtype() == DType::kF32;
  if (decode_rows > 0 && a.epilogue != LinearEpilogue::kNone) {
    cuda::expect_cuda_dtype(a.out, DType::kBF16, "linear", "out (epilogue)");
  }
  s.epilogue = a.epilogue;
  s.input_rms = a.input_rms;
  s.input_rms_eps = a.input_rms_eps;
  const auto rows = [&](int64_t r0, int64_t r1) {
    const LinearArgs b = rows_of(a, r0, r1);
    s.n = b.x.dim(0);
    s.x = b.x.raw();
    s.x_stride = b.x.stride(0);
    s.out = b.out.raw();
    s.out_stride = b.out.stride(0);
  };
  // Many rows: launches of up to kFp8WgmmaMaxTokens rows of the wgmma kernel, when it takes them.
  const int64_t scratch_bytes = g_fp8_scratch.numel() * 2;
  int64_t done = 0;
  const int64_t wgmma_rows =
      g_fp8_wgmma_rows >= 0 ? g_fp8_wgmma_rows : fp8_wgmma_min_rows(out_f, cuda::sm_count());
  if (decode_rows >= wgmma_rows && g_fp8_batch != Fp8BatchMode::kOff) {
    for (; done < decode_rows; done += kFp8WgmmaMaxTokens) {
      rows(done, std::min(decode_rows, done + kFp8WgmmaMaxTokens));
      if (!linear_fp8_decode_wgmma(s, f32_out, g_fp8_scratch.raw(), scratch_bytes, stream)) break;
    }
  }
  // The rest in groups of kFp8BatchMaxTokens rows; one of kFp8BatchMinTokens or more rows in one
  // pass of the batched kernel, when it takes the call; otherwise launches of up to 8 rows. The
  // same bits either way.
  for (int64_t g0 = done; g0 < decode_rows; g0 += kFp8BatchMaxTokens) {
    const int64_t g1 = std::min(decode_rows, g0 + kFp8BatchMaxTokens);
    rows(g0, g1);
    const bool batch = g_fp8_batch == Fp8BatchMode::kAll ||
                       (g_fp8_batch == Fp8BatchMode::kProduction && g1 - g0 >= kFp8BatchMinTokens &&
                        !linear_fp8_decode_stages_rows(s));
    if (batch) {
      if (linear_fp8_decode_batch(s, f32_out, stream)) continue;
    }
    for (int64_t r0 = g0; r0 < g1; r0 += kFp8DecodeMaxTokens) {
      rows(r0, std::min(g1, r0 + kFp8DecodeMaxTokens));
      linear_fp8_decode(s, f32_out, stream);
    }
  }
}

}  // namespace

void linear_cuda(const LinearArgs& a, const ExecContext& ctx) {
  if (a.weight.dtype() == DType::kF8E4M3) return linear_fp8(a, ctx);
  TANDEM_CHECK(a.weight_fold.raw() == nullptr,
               "linear_cuda: weight_fold {} is for FP8 weights (weight {}: fold bf16 matrices at "
               "load)",
               a.weight_fold.describe(), a.weight.describe());
  const int64_t n = a.x.dim(0);
  const int64_t decode_rows = decode_rows_of(a);
  const int64_t group = linear_decode_group_rows();  // the same for every call: row invariance
  if (decode_rows == n && n <= group) return linear_family(a, true, ctx);
  if (decode_rows == 0) return linear_family(a, false, ctx);
  for (int64_t g = 0; g < decode_rows; g += group) {
    linear_family(rows_of(a, g, std::min(decode_rows, g + group)), true, ctx);
  }
  if (decode_rows < n) linear_family(rows_of(a, decode_rows, n), false, ctx);
}

std::string linear_cuda_paths() {
  return fmt::format(
      "linear: decode/verify rows: the persistent bulk-copy kernel for 1-3 rows (1-{} where the "
      "matrix has fewer than {} 128-row tiles), else the wgmma kernel (one launch up to {} rows; "
      "more: groups of {}), the same bits; unaligned rows the CUDA-core kernel; prefill rows "
      "cuBLASLt (one pinned algorithm per shape); FP8 decode rows 1-{} FP8 kernel, {}-{} batched "
      "FP8 kernel (more rows: groups of {}; the FP8 wgmma kernel from {} rows where the matrix "
      "has {} or more 64-row tiles, else from {}), FP8 prefill rows on the tensor cores (FP8 "
      "activations) where cuBLASLt takes the matrix, else on its bf16 dequantisation",
      kPersistentMaxTokens, (cuda::sm_count() + 1) / 2, kWgmmaMaxTokens, kWgmmaMaxTokens,
      kFp8BatchMinTokens - 1, kFp8BatchMinTokens, kFp8BatchMaxTokens, kFp8BatchMaxTokens,
      fp8_wgmma_min_rows(int64_t{64} * cuda::sm_count(), cuda::sm_count()), cuda::sm_count(),
      fp8_wgmma_min_rows(0, cuda::sm_count()));
}

void linear_fp8_set_batch(Fp8BatchMode mode) { g_fp8_batch = mode; }
Fp8Halves linear_fp8_set_quad_halves(Fp8Halves mode) { return linear_fp8_wgmma_set_halves(mode); }

void linear_fp8_set_prefill_decode_order(bool on) { g_fp8_prefill_decode_order = on; }

void linear_set_wgmma_shape(int tile_m, int n) { linear_wgmma_force_shape(tile_m, n); }

void linear_fp8_set_wgmma(int64_t min_rows, int config, bool split) {
  g_fp8_wgmma_rows = min_rows;
  linear_fp8_wgmma_set_config(config, split);
}

void linear_reserve_prefill_gemms(Device device, bool fp8) {
  if (device != Device::kCuda) return;
  linear_reserve_prefill_gemm();
  if (fp8) linear_fp8_reserve_prefill_gemm();
}

void linear_reserve_fp8_scratch(int64_t numel, Device device) {
  if (device != Device::kCuda || numel <= g_fp8_scratch.numel()) return;
  g_fp8_scratch = Tensor();  // free the old one first
  g_fp8_scratch = Tensor::zeros({numel}, DType::kBF16, Device::kCuda);
}

}  // namespace tandem::kernels
