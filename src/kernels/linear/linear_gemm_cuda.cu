// Prefill GEMM for linear (n_tokens > 16) through cuBLAS: bf16 operands, fp32 compute
// (CUBLAS_COMPUTE_32F, no reduced-precision reductions), bf16 or f32 out. cuBLAS picks Hopper
// wgmma/TMA kernels here that reach most of the tensor-core peak, which a hand-written WMMA
// kernel did not (27%, docs/cuda.md). Prefill rows are not bit-equal to the decode/verify path
// (linear_mma_cuda.cu) and may depend on the chunk size; nothing needs either: plain and
// speculative runs share the same prefill, and decode/verify never take this path
// (kSkinnyMaxTokens).
#include <cublas_v2.h>

#include <mutex>

#include "core/error.h"
#include "kernels/cuda_common.cuh"
#include "kernels/linear/linear_cuda.cuh"

namespace tandem::kernels {

namespace {

void check_cublas(cublasStatus_t st, const char* call) {
  TANDEM_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLAS call {} failed: {} ({})", call,
               cublasGetStatusName(st), cublasGetStatusString(st));
}

// One handle for the process with a fixed workspace, so that cuBLAS never allocates inside a
// step (graph capture) and picks the same algorithm every call.
struct CublasHandle {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  CublasHandle() {
    check_cublas(cublasCreate(&handle), "cublasCreate");
    TANDEM_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
    check_cublas(cublasSetWorkspace(handle, workspace, kWorkspaceBytes), "cublasSetWorkspace");
    check_cublas(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  // Intentionally never destroyed: the CUDA context may already be gone at process exit.
};

std::mutex& handle_mutex() {
  static std::mutex m;
  return m;
}

void gemm(const LinearShape& s, cudaDataType out_type, cudaStream_t stream) {
  static CublasHandle* h = new CublasHandle();
  // A handle carries its stream; calls from several threads serialise on it.
  const std::lock_guard<std::mutex> lock(handle_mutex());
  check_cublas(cublasSetStream(h->handle, stream), "cublasSetStream");
  const float alpha = 1.f, beta = 0.f;
  // Column-major view: out^T [out_f, n] = W [out_f, in] (stored as W^T [in, out_f]) x x^T [in, n].
  check_cublas(cublasGemmEx(h->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.out_f),
                            static_cast<int>(s.n), static_cast<int>(s.in), &alpha, s.w, CUDA_R_16BF,
                            static_cast<int>(s.in), s.x, CUDA_R_16BF, static_cast<int>(s.x_stride),
                            &beta, s.out, out_type, static_cast<int>(s.out_stride),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

}  // namespace

void linear_gemm_bf16(const LinearShape& s, cudaStream_t stream) { gemm(s, CUDA_R_16BF, stream); }
void linear_gemm_f32(const LinearShape& s, cudaStream_t stream) { gemm(s, CUDA_R_32F, stream); }

}  // namespace tandem::kernels
