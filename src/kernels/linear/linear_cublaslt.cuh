// cuBLASLt pieces the prefill GEMMs share (linear_gemm_cuda.cu: bf16; linear_fp8_prefill_cuda.cu:
// block-scaled FP8): error checks, the heuristic's candidates for a reference layout, and the
// pinning rule that keeps a prefill row's bits independent of the call's row count (the first
// candidate that runs with split-K off and takes every row count the caller probes).
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "core/error.h"

namespace tandem::kernels {

inline void check_cublas(cublasStatus_t st, const char* call) {
  TANDEM_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLASLt call {} failed: {} ({})", call,
               cublasGetStatusName(st), cublasGetStatusString(st));
}

constexpr int kCublasLtCandidates = 8;

// Up to kCublasLtCandidates of the heuristic's algorithms for D = op(A) op(B) (C laid out as D),
// within `workspace_bytes`; `found` is 0 when the heuristic refuses (its status is returned).
inline cublasStatus_t cublaslt_candidates(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                          cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                          cublasLtMatrixLayout_t d, size_t workspace_bytes,
                                          cublasLtMatmulHeuristicResult_t* results, int& found) {
  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check_cublas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes, sizeof(workspace_bytes)),
               "preference workspace");
  found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref,
                                                           kCublasLtCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) found = 0;
  return st;
}

// The first candidate that takes split-K off (one CTA reduces all of K for an output tile, in the
// mainloop's fixed order) and that valid(algo) accepts (the caller's row-count probes).
template <class Valid>
bool first_split_k_free(const cublasLtMatmulHeuristicResult_t* results, int found, Valid&& valid,
                        cublasLtMatmulAlgo_t& out) {
  for (int i = 0; i < found; ++i) {
    cublasLtMatmulAlgo_t a = results[i].algo;
    const int32_t splits = 1;
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof(splits)) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                             sizeof(scheme)) != CUBLAS_STATUS_SUCCESS)
      continue;
    if (valid(a)) {
      out = a;
      return true;
    }
  }
  return false;
}

}  // namespace tandem::kernels
