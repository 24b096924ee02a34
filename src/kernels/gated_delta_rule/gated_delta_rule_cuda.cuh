// Internal interface between the two CUDA gated delta rule paths: the token recurrence
// (gated_delta_rule_cuda.cu: decode, verify, and the chunked fallback) and the chunked WY form
// (gated_delta_rule_chunked_cuda.cu: prefill). Not part of the op interface: model code includes
// gated_delta_rule.h only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace tandem::kernels {

struct GdrParams {
  const __nv_bfloat16 *q, *k, *v, *a, *b;
  int64_t q_s0, q_s1, k_s0, k_s1, v_s0, v_s1, a_s0, a_s1, b_s0, b_s1;
  cuda::AnyFloatPtr a_log, dt_bias;
  float* state;  // [n_cols, n_heads_v, d_k, d_v]
  const int32_t* n_acc;
  __nv_bfloat16* out;
  int64_t out_s0, out_s1;
  int64_t n_tokens, n_cols, hv_n, hk_n, dv;
  bool per_token_columns;  // kRecurrent: column t after token t; kChunked: final state in column 0
  int64_t start_position;  // kChunked: position of token 0 (chunk boundaries at multiples of 64)
  // The fused output norm (GdrOutputNorm; recurrent kernel only): norm_out == nullptr: none.
  const __nv_bfloat16* z;
  int64_t z_s0, z_s1;
  cuda::AnyFloatPtr norm_w;
  __nv_bfloat16* norm_out;
  int64_t norm_out_s0, norm_out_s1;
  float norm_eps;
};

// Launches the chunked (WY) kernel and returns true, or returns false without launching anything
// when the call is outside what it covers (chunk_size != 64, negative start, q/k not 4-byte
// aligned); the caller then runs the recurrence, which computes the same function.
bool gdr_chunked_launch(const GdrParams& p, int64_t d_k, int chunk_size, cudaStream_t s);

}  // namespace tandem::kernels
