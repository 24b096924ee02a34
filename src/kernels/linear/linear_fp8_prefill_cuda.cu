// FP8 prefill rows on the tensor cores (production since 2026-12-06;
// linear_fp8_set_prefill_tensor_cores (false) or `--fp8-prefill dequantize` dequantises the matrix
// into bf16 and runs the bf16 GEMM instead, linear_cuda.cu, as matrices this path declines always
// do). The "dynamic" activation scheme of the released checkpoints, as vLLM and SGLang run it on
// Hopper:
//   1. fp8_quant_rows_kernel: each token's row x (normed by its inverse RMS and rounded to bf16
//      when input_rms, as the bf16 path's rows_kernel does; times 1 + g with a folded norm g) is
//      cut into 128-k blocks; a block's scale is s = amax / 448 (1 for an all-zero block) and its
//      codes e4m3(v / s), round to nearest even, saturating. The scales go token-major per k block
//      ([k block][token], the token count padded to a multiple of 4, padding rows zero).
//   2. cuBLASLt's block-scaled FP8 GEMM: the weight codes as stored with their 128 x 128 block
//      scales (BLK128x128_32F, k blocks contiguous per 128-row block, as the checkpoint has them),
//      the token codes with their 1 x 128 scales (VEC128_32F), fp32 accumulation, bf16 into a
//      scratch (y, or y^T in the other operand order: Orientation); the algorithm pinned per shape
//      with split-K off (as the bf16 prefill GEMM, linear_gemm_cuda.cu), so a row's bits do not
//      depend on the call's row count.
//   3. fp8_store_rows(_t)_kernel: y into out (kAddToOut: out + y, rounded once, as rows_kernel
//      adds).
// First run (H100, 2026-12-05): with the weights as A and null scale pointers at the heuristic,
// cuBLASLt answered CUBLAS_STATUS_INVALID_VALUE for every shape; hence dummy pointers and both
// operand orders.
// Rows are invariant among prefill calls (each token is quantised alone, the algorithm pinned; a
// row count it rejects takes cuBLASLt's heuristic, said once); they are neither the
// decode family's bits nor the dequantised path's (FP8 activations: a different numerics mode).
// Taken only where cuBLASLt has such an algorithm and the shape fits its layouts: 128-row scale
// blocks, in a multiple of 128 and ceil(in / 128) a multiple of 4, out_f a multiple of 16, no
// SwiGLU pairs (gate|up's interleaved 8-row scale groups are not 128 x 128 blocks), bf16 out; the
// decision is the shape's alone (made once per shape), so every call of a matrix takes one path.
#include <cublasLt.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear_cublaslt.cuh"
#include "kernels/linear/linear_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int64_t kBlockK = 128;      // k per activation scale (and per weight scale block)
constexpr int64_t kRefTokens = 2048;  // the row count the algorithm is chosen for
constexpr float kE4m3Max = 448.f;

std::atomic<bool> g_prefill_tc{true};
std::atomic<int64_t> g_prefill_tc_calls{0};

int64_t padded_tokens(int64_t n) { return (n + 3) / 4 * 4; }

// One block of 256 threads per token row (padding rows write zero codes and scale 1): the
// inverse RMS first (input_rms, in rows_kernel's order), then warp w quantises k blocks w, w + 8,
// ...: lane l holds elements 4l..4l+3 of the block.
__global__ void __launch_bounds__(256)
    fp8_quant_rows_kernel(const __nv_bfloat16* __restrict__ x, int64_t x_stride, int64_t n,
                          int64_t in, bool rms, float eps, const __nv_bfloat16* __restrict__ fold,
                          uint8_t* __restrict__ xq, float* __restrict__ scales, int64_t n_pad) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t blocks = in / kBlockK;
  const bool real = t < n;
  float inv = 1.f;
  if (rms && real) {
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < in; i += blockDim.x) {
      const float v = __bfloat162float(x[t * x_stride + i]);
      ss += v * v;
    }
    inv = 1.f / sqrtf(cuda::block_sum(ss, scratch) / static_cast<float>(in) + eps);
  }
  for (int64_t b = warp; b < blocks; b += blockDim.x / 32) {
    const int64_t k = b * kBlockK + 4 * lane;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (real) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float e = __bfloat162float(x[t * x_stride + k + j]);
        if (rms) e = __bfloat162float(__float2bfloat16_rn(e * inv));
        if (fold != nullptr) e = e * (1.f + __bfloat162float(fold[k + j]));
        v[j] = e;
      }
    }
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = amax > 0.f ? amax / kE4m3Max : 1.f;
    uint32_t codes = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t q = __nv_cvt_float_to_fp8(v[j] / s, __NV_SATFINITE, __NV_E4M3);
      codes |= q << (8 * j);
    }
    *reinterpret_cast<uint32_t*>(xq + t * in + k) = codes;
    if (lane == 0) scales[b * n_pad + t] = s;
  }
}

// out[t, :] = y[t, :] (add: bf16(out + y)), one block per token row.
__global__ void __launch_bounds__(256)
    fp8_store_rows_kernel(const __nv_bfloat16* __restrict__ y, int64_t cols,
                          __nv_bfloat16* __restrict__ out, int64_t out_stride, bool add) {
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = __bfloat162float(y[t * cols + j]);
    __nv_bfloat16& o = out[t * out_stride + j];
    o = __float2bfloat16_rn(add ? __bfloat162float(o) + v : v);
  }
}

// The same from y^T [out_f, n_pad] (the GEMM's other orientation): 32 x 32 tiles through shared
// memory, read along tokens and written along columns.
__global__ void __launch_bounds__(256)
    fp8_store_rows_t_kernel(const __nv_bfloat16* __restrict__ yt, int64_t n_pad, int64_t n,
                            int64_t cols, __nv_bfloat16* __restrict__ out, int64_t out_stride,
                            bool add) {
  __shared__ float tile[32][33];
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * 32,
                t0 = static_cast<int64_t>(blockIdx.y) * 32;
  const int tx = static_cast<int>(threadIdx.x) & 31, ty = static_cast<int>(threadIdx.x) >> 5;
  for (int k = ty; k < 32; k += 8) {
    const int64_t o = o0 + k, t = t0 + tx;
    tile[k][tx] = o < cols && t < n ? __bfloat162float(yt[o * n_pad + t]) : 0.f;
  }
  __syncthreads();
  for (int k = ty; k < 32; k += 8) {
    const int64_t t = t0 + k, o = o0 + tx;
    if (t >= n || o >= cols) continue;
    __nv_bfloat16& d = out[t * out_stride + o];
    const float v = tile[tx][k];
    d = __float2bfloat16_rn(add ? __bfloat162float(d) + v : v);
  }
}

// The GEMM in one of two orientations (cuBLASLt's FP8 GEMMs take A transposed, B not, both with
// k contiguous; which operand may carry which block scaling is the library's to say, so both are
// tried, weights first):
//   kWeightsA: D = y^T [out_f, n] column-major (= y [n, out_f] row-major): A the codes [out_f, in]
//     row-major (= [in, out_f] column-major, op T) with BLK128x128 scales, B the token codes [n,
//     in] (op N) with VEC128 scales;
//   kTokensA: D = y [n, out_f] column-major (= y^T [out_f, n] row-major): A the token codes (op T)
//     with VEC128 scales, B the weight codes (op N) with BLK128x128 scales.
enum Orientation { kWeightsA = 0, kTokensA = 1 };

struct Fp8Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Fp8Layouts(Orientation o, int64_t in, int64_t out_f, int64_t n) {
    const int64_t m = o == kWeightsA ? out_f : n, cols = o == kWeightsA ? n : out_f;
    check_cublas(cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, in, m, in), "layout A");
    check_cublas(cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, in, cols, in), "layout B");
    check_cublas(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, m, cols, m), "layout D");
  }
  ~Fp8Layouts() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
  }
};

// A shape's pinned GEMM: whether there is one, its orientation and algorithm.
struct Fp8Pinned {
  bool found = false;
  Orientation orientation = kWeightsA;
  cublasLtMatmulAlgo_t algo{};
};

// The handle, a fixed workspace, a descriptor per orientation (scale modes set once, scale
// pointers per call) and each shape's pinned GEMM, or none (then that shape keeps the dequantised
// path).
struct Fp8Gemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc[2] = {nullptr, nullptr};
  void* workspace = nullptr;
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  std::map<std::tuple<int64_t, int64_t>, Fp8Pinned> pinned;
  std::mutex mutex;

  Fp8Gemm() {
    check_cublas(cublasLtCreate(&handle), "cublasLtCreate");
    TANDEM_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    const int32_t blk = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    for (const Orientation o : {kWeightsA, kTokensA}) {
      cublasLtMatmulDesc_t& d = desc[o];
      check_cublas(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
      const int32_t a_mode = o == kWeightsA ? blk : vec, b_mode = o == kWeightsA ? vec : blk;
      check_cublas(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)),
                   "transa");
      check_cublas(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)),
                   "transb");
      check_cublas(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                                  sizeof(a_mode)),
                   "A scale mode");
      check_cublas(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                                  sizeof(b_mode)),
                   "B scale mode");
      // Valid device addresses until a call sets its own (a block scale mode may refuse null).
      set_scales(o, static_cast<const float*>(workspace), static_cast<const float*>(workspace));
    }
  }
  // Intentionally never destroyed: the CUDA context may already be gone at process exit.

  void set_scales(Orientation o, const float* w_scale, const float* x_scale) {
    const float* a = o == kWeightsA ? w_scale : x_scale;
    const float* b = o == kWeightsA ? x_scale : w_scale;
    check_cublas(cublasLtMatmulDescSetAttribute(desc[o], CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a,
                                                sizeof(a)),
                 "A scale pointer");
    check_cublas(cublasLtMatmulDescSetAttribute(desc[o], CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b,
                                                sizeof(b)),
                 "B scale pointer");
  }

  // A split-K-free algorithm of orientation o for the shape, valid for every probed row count.
  bool pin(Orientation o, int64_t in, int64_t out_f, cublasLtMatmulAlgo_t& out,
           cublasStatus_t& status, int& found) {
    const Fp8Layouts ref(o, in, out_f, kRefTokens);
    cublasLtMatmulHeuristicResult_t results[kCublasLtCandidates];
    status =
        cublaslt_candidates(handle, desc[o], ref.a, ref.b, ref.d, kWorkspaceBytes, results, found);
    const auto valid = [&](const cublasLtMatmulAlgo_t& a) {
      for (int64_t n : {int64_t{4}, int64_t{8}, int64_t{16}, int64_t{20}, int64_t{64}, int64_t{112},
                        int64_t{300}, kRefTokens, int64_t{8192}}) {
        const Fp8Layouts probe(o, in, out_f, n);
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(handle, desc[o], probe.a, probe.b, probe.d, probe.d, &a,
                                    &check) != CUBLAS_STATUS_SUCCESS ||
            check.workspaceSize > kWorkspaceBytes)
          return false;
      }
      return true;
    };
    return first_split_k_free(results, found, valid, out);
  }

  // The shape's pinned GEMM (weights as A first, then tokens as A); none is said once.
  const Fp8Pinned& get(int64_t in, int64_t out_f) {
    const auto key = std::make_tuple(out_f, in);
    auto it = pinned.find(key);
    if (it != pinned.end()) return it->second;
    Fp8Pinned p;
    cublasStatus_t status[2] = {CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS};
    int found[2] = {0, 0};
    for (const Orientation o : {kWeightsA, kTokensA}) {
      if (pin(o, in, out_f, p.algo, status[o], found[o])) {
        p.found = true;
        p.orientation = o;
        break;
      }
    }
    if (!p.found) {
      std::fprintf(stderr,
                   "linear_cuda (FP8 prefill on tensor cores): cuBLASLt has no split-K-free "
                   "block-scaled FP8 algorithm for [%lld, %lld] (weights as A: %s, %d found; "
                   "tokens as A: %s, %d found); this matrix keeps the dequantised path\n",
                   static_cast<long long>(out_f), static_cast<long long>(in),
                   cublasGetStatusName(status[0]), found[0], cublasGetStatusName(status[1]),
                   found[1]);
    }
    return pinned.emplace(key, p).first->second;
  }
};

Fp8Gemm& fp8_gemm() {
  static Fp8Gemm* g = new Fp8Gemm();
  return *g;
}

bool shape_fits(const LinearShape& s) {
  return s.scale_block_rows == kBlockK && s.in % kBlockK == 0 && (s.in / kBlockK) % 4 == 0 &&
         s.out_f % 16 == 0 && s.epilogue != LinearEpilogue::kSwiGluPairs && cuda::aligned16(s.w) &&
         reinterpret_cast<uintptr_t>(s.w_scale) % 16 == 0;
}

// Scratch bytes for `rows` token rows: codes, scales, y (each part 256-byte aligned).
int64_t align256(int64_t b) { return (b + 255) / 256 * 256; }
int64_t scratch_for(const LinearShape& s, int64_t rows) {
  const int64_t np = padded_tokens(rows);
  return align256(np * s.in) + align256(s.in / kBlockK * np * 4) + align256(np * s.out_f * 2);
}

}  // namespace

void linear_fp8_reserve_prefill_gemm() { (void)fp8_gemm(); }
bool linear_fp8_set_prefill_tensor_cores(bool on) { return g_prefill_tc.exchange(on); }
int64_t linear_fp8_prefill_tensor_core_calls() { return g_prefill_tc_calls.load(); }

bool linear_fp8_prefill_tc(const LinearShape& s, void* scratch, int64_t scratch_bytes,
                           cudaStream_t stream) {
  if (!g_prefill_tc.load() || !shape_fits(s)) return false;
  Fp8Gemm& g = fp8_gemm();
  const std::lock_guard<std::mutex> lock(g.mutex);
  const Fp8Pinned& pin = g.get(s.in, s.out_f);
  if (!pin.found) return false;
  const Orientation o = pin.orientation;
  // Rows per pass: as many as the scratch holds (a multiple of 4, at least 4).
  int64_t per_pass = std::max<int64_t>(4, s.n);
  while (per_pass > 4 && scratch_for(s, per_pass) > scratch_bytes)
    per_pass = (per_pass / 2 + 3) / 4 * 4;
  TANDEM_CHECK(scratch_for(s, per_pass) <= scratch_bytes,
               "linear_cuda (FP8 prefill on tensor cores): [{}, {}] needs {} bytes of scratch for "
               "4 rows, {} reserved",
               s.out_f, s.in, scratch_for(s, per_pass), scratch_bytes);
  const bool add = s.epilogue == LinearEpilogue::kAddToOut;
  for (int64_t r0 = 0; r0 < s.n; r0 += per_pass) {
    const int64_t n = std::min(per_pass, s.n - r0), np = padded_tokens(n);
    auto* xq = static_cast<uint8_t*>(scratch);
    auto* scales = reinterpret_cast<float*>(static_cast<char*>(scratch) + align256(np * s.in));
    auto* y = reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<char*>(scales) +
                                               align256(s.in / kBlockK * np * 4));
    const auto* x = static_cast<const __nv_bfloat16*>(s.x) + r0 * s.x_stride;
    fp8_quant_rows_kernel<<<static_cast<unsigned>(np), 256, 0, stream>>>(
        x, s.x_stride, n, s.in, s.input_rms, s.input_rms_eps,
        static_cast<const __nv_bfloat16*>(s.fold), xq, scales, np);
    cuda::check_launch("fp8_quant_rows_kernel");
    const Fp8Layouts l(o, s.in, s.out_f, np);
    g.set_scales(o, s.w_scale, scales);
    const float alpha = 1.f, beta = 0.f;
    cublasLtMatmulHeuristicResult_t check{};
    const bool pinned = cublasLtMatmulAlgoCheck(g.handle, g.desc[o], l.a, l.b, l.d, l.d, &pin.algo,
                                                &check) == CUBLAS_STATUS_SUCCESS &&
                        check.workspaceSize <= Fp8Gemm::kWorkspaceBytes;
    if (!pinned) {  // as the bf16 prefill GEMM does: cuBLASLt's own choice, said once
      static bool said = false;
      if (!said) {
        std::fprintf(stderr,
                     "linear_cuda (FP8 prefill on tensor cores): the pinned algorithm of [%lld, "
                     "%lld] rejects %lld rows; using cuBLASLt's heuristic for such calls\n",
                     static_cast<long long>(s.out_f), static_cast<long long>(s.in),
                     static_cast<long long>(np));
        said = true;
      }
    }
    const void* a_ptr = o == kWeightsA ? s.w : static_cast<const void*>(xq);
    const void* b_ptr = o == kWeightsA ? static_cast<const void*>(xq) : s.w;
    check_cublas(
        cublasLtMatmul(g.handle, g.desc[o], &alpha, a_ptr, l.a, b_ptr, l.b, &beta, y, l.d, y, l.d,
                       pinned ? &pin.algo : nullptr, g.workspace, Fp8Gemm::kWorkspaceBytes, stream),
        "cublasLtMatmul (FP8 block-scaled)");
    auto* out = static_cast<__nv_bfloat16*>(s.out) + r0 * s.out_stride;
    if (o == kWeightsA) {
      fp8_store_rows_kernel<<<static_cast<unsigned>(n), 256, 0, stream>>>(y, s.out_f, out,
                                                                          s.out_stride, add);
    } else {
      const dim3 grid(static_cast<unsigned>((s.out_f + 31) / 32),
                      static_cast<unsigned>((n + 31) / 32));
      fp8_store_rows_t_kernel<<<grid, 256, 0, stream>>>(y, np, n, s.out_f, out, s.out_stride, add);
    }
    cuda::check_launch("fp8_store_rows_kernel");
  }
  g_prefill_tc_calls.fetch_add(1);
  return true;
}

}  // namespace tandem::kernels
