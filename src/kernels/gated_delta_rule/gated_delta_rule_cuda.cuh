// Internal interface between the CUDA gated delta rule paths: the token recurrence
// (gated_delta_rule_cuda.cu: decode, verify with the fold of the last step's accepted rows, and the
// chunked fallback) and the chunked WY form (gated_delta_rule_chunked_cuda.cu: prefill), plus the
// output norm restricted to a call's rows (gated_rms_norm_cuda.cu). Not part of the op interface:
// model code includes gated_delta_rule.h only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/exec_context.h"
#include "kernels/cuda_common.cuh"
#include "kernels/gated_rms_norm/gated_rms_norm.h"

namespace tandem::kernels {

struct GdrParams {
  const __nv_bfloat16 *q, *k, *v, *a, *b;  // rows are absolute (SeqLayout)
  int64_t q_s0, q_s1, k_s0, k_s1, v_s0, v_s1, a_s0, a_s1, b_s0, b_s1;
  cuda::AnyFloatPtr a_log, dt_bias;
  float* state;           // [n_slots, n_heads_v, d_k, d_v]: one committed state per slot
  __nv_bfloat16* replay;  // [n_slots, 2, replay_rows, replay_width]: rows [k | v | a | b]
  int64_t replay_rows, replay_width;
  const int32_t* row_start;       // [n_seqs + 1]
  const int32_t* slot;            // [n_seqs]
  const int32_t* n_acc;           // [n_seqs] (kRecurrent: rows of replay half 1 - parity to fold)
  const int32_t* parity;          // [n_seqs] (kRecurrent)
  const int32_t* start_position;  // [n_seqs] (kChunked)
  int64_t n_seqs, n_rows, n_slots;
  __nv_bfloat16* out;
  int64_t out_s0, out_s1;
  int64_t hv_n, hk_n, dv;
  // true: kRecurrent (fold, outputs, raw rows into replay, states of the rows not stored);
  // false: the chunked fallback (the whole call's rows from state[slot], final state stored).
  bool recurrent;
  // The fused output norm (GdrOutputNorm; recurrent kernel only): norm_out == nullptr: none.
  const __nv_bfloat16* z;
  int64_t z_s0, z_s1;
  cuda::AnyFloatPtr norm_w;
  __nv_bfloat16* norm_out;
  int64_t norm_out_s0, norm_out_s1;
  float norm_eps;
};

// Loads through L2 of what only launches two or more back wrote (state, replay rows, host-written
// metadata), issued before the PDL wait. volatile with a memory clobber: the compiler keeps them
// in program order with this thread's own stores to the same buffers (cuda_common's __ldcg is a
// plain asm the compiler may move).
__device__ __forceinline__ float gdr_ld_cg(const float* p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ int32_t gdr_ld_cg(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ __nv_bfloat16 gdr_ld_cg(const __nv_bfloat16* p) {
  unsigned short v;
  asm volatile("ld.global.cg.b16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
  return __ushort_as_bfloat16(v);
}

// One sequence of a launch as every block of it reads it (per-step values from device memory,
// written by the host before the step, so they may be read before the PDL wait). Out-of-range
// values are clamped so that no access leaves its tensor; a slot outside the pool disables the
// sequence (ok == false), which then touches nothing.
struct GdrSeq {
  int64_t r0, n;  // absolute first row and row count
  int64_t slot;
  int n_acc, parity;
  bool ok;
};

// The values of sequence s as loaded (n_acc and parity only for kRecurrent), and the sequence
// they give; kept apart so that a kernel may load one sequence's values early and use them later.
struct GdrSeqLoad {
  int32_t row0, row1, slot, n_acc, parity;
};

__device__ __forceinline__ GdrSeqLoad gdr_seq_load(const GdrParams& p, int64_t s) {
  GdrSeqLoad l{gdr_ld_cg(p.row_start + s), gdr_ld_cg(p.row_start + s + 1), gdr_ld_cg(p.slot + s), 0,
               0};
  if (p.recurrent) {
    l.n_acc = gdr_ld_cg(p.n_acc + s);
    l.parity = gdr_ld_cg(p.parity + s);
  }
  return l;
}

__device__ __forceinline__ GdrSeq gdr_seq_of(const GdrParams& p, const GdrSeqLoad& l) {
  GdrSeq q;
  const int64_t a = l.row0, b = l.row1;
  q.r0 = a < 0 ? 0 : (a > p.n_rows ? p.n_rows : a);
  const int64_t r1 = b < q.r0 ? q.r0 : (b > p.n_rows ? p.n_rows : b);
  q.n = r1 - q.r0;
  q.slot = l.slot;
  q.ok = q.slot >= 0 && q.slot < p.n_slots;
  const int32_t na = l.n_acc;
  q.n_acc = na < 0 ? 0 : (na > p.replay_rows ? static_cast<int>(p.replay_rows) : na);
  q.parity = l.parity & 1;
  return q;
}

__device__ __forceinline__ GdrSeq gdr_seq(const GdrParams& p, int64_t s) {
  return gdr_seq_of(p, gdr_seq_load(p, s));
}

// Launches the chunked (WY) kernel over all the call's sequences and returns true, or returns
// false without launching anything when the call is outside what it covers (chunk_size != 64,
// q/k not 4-byte aligned); the caller then runs the recurrence, which computes the same function.
bool gdr_chunked_launch(const GdrParams& p, int64_t d_k, int chunk_size, cudaStream_t s);

// Launches the streaming recurrence (gated_delta_rule_stream_cuda.cu) and returns true for a
// kRecurrent call of gated_delta_rule_set_stream_min_seqs() or more sequences that it covers
// (d_v a multiple of 64 up to 128, d_k 64 or 128 <= d_v, at most 2048 value heads); otherwise
// false, launching nothing. max_rows bounds a sequence's rows (SeqLayout): from 2, with
// gated_delta_rule_set_stream_registers on, the call takes the register form instead.
bool gdr_stream_launch(const GdrParams& p, int64_t d_k, int64_t max_rows, cudaStream_t s);
// The register form (gated_delta_rule_regs_cuda.cu): launches and returns true if it is on and
// covers the call, else false.
bool gdr_regs_launch(const GdrParams& p, int64_t d_k, int64_t max_rows, cudaStream_t s);
bool gdr_regs_on();

// gated_rms_norm_cuda over the rows of a call's sequences only, [row_start[0], row_start[n_seqs])
// (read on the device; at most max_rows_total of them): the same kernel, so the same bits.
void gated_rms_norm_rows_cuda(const GatedRmsNormArgs& a, const int32_t* row_start, int64_t n_seqs,
                              int64_t max_rows_total, const ExecContext& ctx);

}  // namespace tandem::kernels
