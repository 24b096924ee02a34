// Prefill GEMM for linear (prefill rows) through cuBLASLt: bf16 operands, fp32 compute
// (CUBLAS_COMPUTE_32F, no reduced-precision reductions), bf16 or f32 out. cuBLAS picks Hopper
// wgmma/TMA kernels here that reach most of the tensor-core peak, which a hand-written WMMA
// kernel did not (27%, docs/cuda.md).
// Row invariance (DESIGN.md invariant 2): a prefill row's bits must not depend on how many rows
// share the GEMM (other sequences' chunks), so the algorithm is pinned: chosen once per weight
// shape and output type by cuBLASLt's heuristic for a reference of kRefRows rows, with split-K
// forced off (one CTA reduces all of K for an output tile, in the mainloop's fixed order), and
// then used for every row count. Prefill rows are not bit-equal to the decode family
// (linear_persistent_cuda.cu); nothing needs them to be: a row's family is fixed by its request.
#include <cublasLt.h>

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

constexpr int64_t kRefRows = 2048;

// Column-major views: out^T [out_f, n] = op(A) B with A = W^T stored as [in, out_f] (ld in, op T)
// and B = x^T [in, n] (ld x_stride).
struct Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  Layouts(int64_t in, int64_t out_f, int64_t n, int64_t x_ld, int64_t out_ld, cudaDataType out) {
    check_cublas(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, in, out_f, in), "layout A");
    check_cublas(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, in, n, x_ld), "layout B");
    check_cublas(cublasLtMatrixLayoutCreate(&d, out, out_f, n, out_ld), "layout D");
  }
  ~Layouts() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
  }
};

// One handle, one fixed workspace (so that cuBLASLt never allocates inside a step), the matmul
// descriptor, and the pinned algorithm of every (out_f, in, out type) seen.
struct Gemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  void* workspace = nullptr;
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  std::map<std::tuple<int64_t, int64_t, int>, cublasLtMatmulAlgo_t> algos;
  std::mutex mutex;

  Gemm() {
    check_cublas(cublasLtCreate(&handle), "cublasLtCreate");
    TANDEM_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
    check_cublas(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    check_cublas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)),
                 "transa");
    check_cublas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)),
                 "transb");
  }
  // Intentionally never destroyed: the CUDA context may already be gone at process exit.

  const cublasLtMatmulAlgo_t& algo(int64_t in, int64_t out_f, cudaDataType out) {
    const auto key = std::make_tuple(out_f, in, static_cast<int>(out));
    auto it = algos.find(key);
    if (it != algos.end()) return it->second;
    const Layouts ref(in, out_f, kRefRows, in, out_f, out);
    cublasLtMatmulHeuristicResult_t results[kCublasLtCandidates];
    int found = 0;
    check_cublas(
        cublaslt_candidates(handle, desc, ref.a, ref.b, ref.d, kWorkspaceBytes, results, found),
        "cublasLtMatmulAlgoGetHeuristic");
    // Valid for every row count a step may bring (probed), or not pinned.
    const auto valid = [&](const cublasLtMatmulAlgo_t& a) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{17}, int64_t{64}, int64_t{111},
                        int64_t{300}, kRefRows, int64_t{8192}}) {
        const Layouts probe(in, out_f, n, in, out_f, out);
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(handle, desc, probe.a, probe.b, probe.d, probe.d, &a, &check) !=
                CUBLAS_STATUS_SUCCESS ||
            check.workspaceSize > kWorkspaceBytes)
          return false;
      }
      return true;
    };
    cublasLtMatmulAlgo_t a{};
    if (first_split_k_free(results, found, valid, a)) return algos.emplace(key, a).first->second;
    fail("linear_cuda (prefill GEMM): cuBLASLt has no split-K-free algorithm for [{}, {}]", out_f,
         in);
  }
};

Gemm& gemm_instance() {
  static Gemm* g = new Gemm();
  return *g;
}

void gemm(const LinearShape& s, cudaDataType out_type, cudaStream_t stream) {
  Gemm* g = &gemm_instance();
  const std::lock_guard<std::mutex> lock(g->mutex);
  const cublasLtMatmulAlgo_t& algo = g->algo(s.in, s.out_f, out_type);
  const Layouts l(s.in, s.out_f, s.n, s.x_stride, s.out_stride, out_type);
  cublasLtMatmulHeuristicResult_t check{};
  const float alpha = 1.f, beta = 0.f;
  if (cublasLtMatmulAlgoCheck(g->handle, g->desc, l.a, l.b, l.d, l.d, &algo, &check) ==
          CUBLAS_STATUS_SUCCESS &&
      check.workspaceSize <= Gemm::kWorkspaceBytes) {
    check_cublas(cublasLtMatmul(g->handle, g->desc, &alpha, s.w, l.a, s.x, l.b, &beta, s.out, l.d,
                                s.out, l.d, &algo, g->workspace, Gemm::kWorkspaceBytes, stream),
                 "cublasLtMatmul");
    return;
  }
  // The pinned algorithm does not take this call's layout (strides, alignment): cuBLASLt's own
  // choice for it, said once, since such rows may then depend on the row count (invariant 6).
  static bool said = false;
  if (!said) {
    std::fprintf(
        stderr,
        "linear_cuda (prefill GEMM): the pinned algorithm rejects [%lld, %lld] x %lld rows "
        "(x stride %lld); using cuBLASLt's heuristic for such calls\n",
        static_cast<long long>(s.out_f), static_cast<long long>(s.in), static_cast<long long>(s.n),
        static_cast<long long>(s.x_stride));
    said = true;
  }
  check_cublas(cublasLtMatmul(g->handle, g->desc, &alpha, s.w, l.a, s.x, l.b, &beta, s.out, l.d,
                              s.out, l.d, nullptr, g->workspace, Gemm::kWorkspaceBytes, stream),
               "cublasLtMatmul (heuristic)");
}

}  // namespace

void linear_gemm_bf16(const LinearShape& s, cudaStream_t stream) { gemm(s, CUDA_R_16BF, stream); }
void linear_gemm_f32(const LinearShape& s, cudaStream_t stream) { gemm(s, CUDA_R_32F, stream); }

void linear_reserve_prefill_gemm() { (void)gemm_instance(); }

}  // namespace tandem::kernels
