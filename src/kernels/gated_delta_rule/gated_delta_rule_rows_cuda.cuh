// Block-level pieces of the CUDA gated delta rule's token recurrence, shared by the kernel that
// gives each (value-column block, value head, sequence) its own block (gated_delta_rule_cuda.cu)
// and the streaming kernel whose blocks walk many of them (gated_delta_rule_stream_cuda.cu): the
// thread layout, a batch of rows loaded together, the per-token state update and the fused output
// norm. Both kernels run exactly this per-token code, so they compute the same bits.
#pragma once

#include <cooperative_groups.h>

#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int kParts = 4;  // threads per value column
constexpr int kCols = 32;  // value columns per block
constexpr int kThreads = kParts * kCols;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxNormBlocks = 4;  // the fused output norm takes d_v <= 4 * kCols
// Rows whose inputs are loaded together. Small, so that the block's shared memory (5.6 KB at
// d_k 128) leaves room for the next decode linear's block (214 KB) on the same SM: it then starts
// streaming its weights while this kernel runs (programmatic dependent launch).
constexpr int kBatch = 4;

namespace cg = cooperative_groups;

// Inputs of one batch of up to kBatch rows, loaded together (one memory round trip for the batch
// instead of one per row), and the batch's outputs for the norm.
template <int kDk>
struct BatchSmem {
  float q[kBatch][kDk], k[kBatch][kDk];  // normalised in place
  float v[kBatch][kCols], z[kBatch][kCols];
  float decay[kBatch], beta[kBatch];
  float o[kBatch][kCols];              // kNorm: the rounded outputs
  float psum[kBatch][kMaxNormBlocks];  // kNorm: the cluster's sums of squares by block
};

// Element offsets inside a replay row [k (n_heads_k d_k) | v (n_heads_v d_v) | a | b].
template <int kDk>
__device__ __forceinline__ int64_t replay_k(int64_t hk) {
  return hk * kDk;
}
template <int kDk>
__device__ __forceinline__ int64_t replay_v(const GdrParams& p, int64_t h) {
  return p.hk_n * kDk + h * p.dv;
}
template <int kDk>
__device__ __forceinline__ int64_t replay_a(const GdrParams& p, int64_t h) {
  return p.hk_n * kDk + p.hv_n * p.dv + h;
}

// Where one batch comes from and goes to. kFold: rows t of the replay half at element offset
// `base` (no q, no copy). Otherwise: the call's rows base + t, copied raw into the replay half at
// element offset `sink` (sink < 0: no copy) for t < replay_rows; k only where own_k (one block
// per key head), a and b only where own_ab (one block per value head), v by every block for its
// columns. Addresses come from the kernel parameters (constant bank) and these few scalars, so no
// pointer stays live in registers across the recurrence.
struct BatchAt {
  int64_t base, sink;
  bool own_k, own_ab;
};

// A row's gate: the decay e^g and beta (gated_delta_rule.h).
__device__ __forceinline__ void row_gate(__nv_bfloat16 a, __nv_bfloat16 b, float a_decay,
                                         float dt_bias, float& decay, float& beta) {
  decay = expf(-a_decay * cuda::softplus(__bfloat162float(a) + dt_bias));
  beta = cuda::sigmoid(__bfloat162float(b));
}

// L2-normalises one row's k (and q unless kFold, scaled by d_k^-1/2) in place, by one warp: lane
// l sums elements l, l + 32, ... in order, then a butterfly.
template <int kDk, bool kFold>
__device__ __forceinline__ void normalise_row(float* q, float* k, int lane) {
  const float q_scale = 1.f / sqrtf(static_cast<float>(kDk));
  float ssq = 0.f, ssk = 0.f;
  for (int i = lane; i < kDk; i += 32) {
    if constexpr (!kFold) ssq += q[i] * q[i];
    ssk += k[i] * k[i];
  }
  if constexpr (!kFold) ssq = cuda::warp_sum(ssq);
  ssk = cuda::warp_sum(ssk);
  const float inv_q = 1.f / sqrtf(ssq + 1e-6f), inv_k = 1.f / sqrtf(ssk + 1e-6f);
  for (int i = lane; i < kDk; i += 32) {
    if constexpr (!kFold) q[i] = (q[i] * inv_q) * q_scale;
    k[i] = k[i] * inv_k;
  }
}

// Loads rows [t0, t0 + nb) for this block's heads and columns and L2-normalises k (and q unless
// kFold): warp w takes rows w, w + 4, ...; lane l sums elements l, l + 32, ... in order, then a
// butterfly. Folded and current rows run the same arithmetic. Every load of the batch is issued
// before the first store, so the batch costs one memory round trip. The fold's rows (written two
// or more launches back) load with ld_cg before the PDL wait; the call's rows (the predecessor's
// output) load after it with plain loads, which the compiler cannot move above the wait.
template <int kDk, bool kFold, bool kNorm>
__device__ __forceinline__ void load_batch(const GdrParams& p, BatchSmem<kDk>& b, const BatchAt& at,
                                           int64_t t0, int nb, int64_t h, int64_t hk,
                                           int64_t col_base, float a_decay, float dt_bias) {
  constexpr int kIters = (kBatch * kDk + kThreads - 1) / kThreads;  // q/k elements per thread
  static_assert(kBatch * kCols == kThreads, "one v element per thread");
  const int64_t w = p.replay_width;
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.f);
  __nv_bfloat16 qr[kIters], kr[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = threadIdx.x + it * kThreads, tb = idx / kDk, i = idx % kDk;
    const int64_t t = t0 + tb;
    qr[it] = zero;
    kr[it] = zero;
    if (tb < nb) {
      if constexpr (kFold) {
        kr[it] = gdr_ld_cg(p.replay + at.base + t * w + replay_k<kDk>(hk) + i);
      } else {
        qr[it] = p.q[(at.base + t) * p.q_s0 + hk * p.q_s1 + i];
        kr[it] = p.k[(at.base + t) * p.k_s0 + hk * p.k_s1 + i];
      }
    }
  }
  const int tv = threadIdx.x / kCols, jl = threadIdx.x % kCols;  // v: row tv, column jl
  const int64_t j = col_base + jl;
  const bool v_ok = tv < nb && j < p.dv;
  __nv_bfloat16 vr = zero, zr = zero, ar = zero, br = zero;
  if (v_ok) {
    if constexpr (kFold) {
      vr = gdr_ld_cg(p.replay + at.base + (t0 + tv) * w + replay_v<kDk>(p, h) + j);
    } else {
      vr = p.v[(t0 + tv + at.base) * p.v_s0 + h * p.v_s1 + j];
      if constexpr (kNorm) zr = p.z[(t0 + tv + at.base) * p.z_s0 + h * p.z_s1 + j];
    }
  }
  if (threadIdx.x < nb) {
    const int64_t t = t0 + threadIdx.x;
    if constexpr (kFold) {
      ar = gdr_ld_cg(p.replay + at.base + t * w + replay_a<kDk>(p, h));
      br = gdr_ld_cg(p.replay + at.base + t * w + replay_a<kDk>(p, h) + p.hv_n);
    } else {
      ar = p.a[(at.base + t) * p.a_s0 + h * p.a_s1];
      br = p.b[(at.base + t) * p.b_s0 + h * p.b_s1];
    }
  }
  // Stores: shared memory, and (current rows of kRecurrent) the raw rows into the replay half.
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = threadIdx.x + it * kThreads, tb = idx / kDk, i = idx % kDk;
    const int64_t t = t0 + tb;
    if (tb < nb) {
      if constexpr (!kFold) b.q[tb][i] = __bfloat162float(qr[it]);
      b.k[tb][i] = __bfloat162float(kr[it]);
      if (!kFold && at.own_k && t < p.replay_rows)
        p.replay[at.sink + t * w + replay_k<kDk>(hk) + i] = kr[it];
    }
  }
  if (tv < nb) {
    b.v[tv][jl] = v_ok ? __bfloat162float(vr) : 0.f;
    if constexpr (kNorm) b.z[tv][jl] = v_ok ? __bfloat162float(zr) : 0.f;
    if (!kFold && v_ok && at.sink >= 0 && t0 + tv < p.replay_rows)
      p.replay[at.sink + (t0 + tv) * w + replay_v<kDk>(p, h) + j] = vr;
  }
  if (threadIdx.x < nb) {
    const int64_t t = t0 + threadIdx.x;
    if (!kFold && at.own_ab && t < p.replay_rows) {
      __nv_bfloat16* row = p.replay + at.sink + t * w + replay_a<kDk>(p, h);
      row[0] = ar;
      row[p.hv_n] = br;
    }
    row_gate(ar, br, a_decay, dt_bias, b.decay[threadIdx.x], b.beta[threadIdx.x]);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int t = warp; t < nb; t += kWarps) normalise_row<kDk, kFold>(b.q[t], b.k[t], lane);
  __syncthreads();
}

// One row's update of this thread's rows of S[:, j] (S <- e^g S; u = beta (v - S^T k);
// S <- S + k u^T): partial sums in row order, the 4 parts combined by a fixed butterfly.
template <int kRows>
__device__ __forceinline__ void state_update(float (&s)[kRows], const float* kn, float decay,
                                             float beta, float v) {
  float kv = 0.f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    s[r] *= decay;
    kv = fmaf(s[r], kn[r], kv);
  }
  kv += __shfl_xor_sync(0xffffffffu, kv, 1);
  kv += __shfl_xor_sync(0xffffffffu, kv, 2);
  const float u = beta * (v - kv);
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = fmaf(kn[r], u, s[r]);
}

// The fused output norm of the batch's rows, as gated_rms_norm_kernel computes it with 128
// threads: per row a warp butterfly over each 32 columns, then those sums added in column order.
// Block r of the cluster holds columns 32r..32r+31 (b.o, 0 past d_v) and posts its sums to every
// block's `psum`; a cluster barrier once they are posted, and (unless `last`) one more before
// another batch reuses the buffer. A caller that alternates two buffers passes last = true always:
// a block is then at most one batch ahead of the others, so no post lands in a buffer still being
// read. `row0` is the absolute row of the batch's first row.
template <int kDk>
__device__ __forceinline__ void store_norm(const GdrParams& p, BatchSmem<kDk>& b,
                                           float (&psum)[kBatch][kMaxNormBlocks], int64_t row0,
                                           int nb, bool last, int64_t h, int64_t j, bool col_ok,
                                           int jl, float norm_w) {
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), blocks = cluster.num_blocks();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // b.o complete
  for (int t = warp; t < nb; t += kWarps) {
    const float sq = cuda::warp_sum(b.o[t][lane] * b.o[t][lane]);
    if (lane < static_cast<int>(blocks)) *cluster.map_shared_rank(&psum[t][rank], lane) = sq;
  }
  cluster.sync();  // every block's sums are in
  if (col_ok && (threadIdx.x & (kParts - 1)) == 0) {
    for (int t = 0; t < nb; ++t) {
      float ss = 0.f;
      for (unsigned r = 0; r < blocks; ++r) ss += psum[t][r];
      const float inv = 1.f / sqrtf(ss / static_cast<float>(p.dv) + p.norm_eps);
      p.norm_out[(row0 + t) * p.norm_out_s0 + h * p.norm_out_s1 + j] =
          __float2bfloat16_rn(((b.o[t][jl] * inv) * norm_w) * cuda::silu(b.z[t][jl]));
    }
  }
  // psum is free for the next batch. After the last batch no block writes another's shared
  // memory any more (the sync above saw every post), so a block may exit without waiting.
  if (!last) cluster.sync();
}

// Where a thread works: value head h (key head hk), its column j (jl within the block's 32 from
// col_base; col_ok: j < d_v) and its part (rows part * d_k/4 .. of S[:, j]).
struct ColumnAt {
  int64_t h, hk, col_base, j;
  int jl, part;
  bool col_ok;
};

// The fold: the first n_acc rows of replay half 1 - parity (the last step's accepted raw rows)
// applied to this thread's rows of S, with the current rows' per-token code.
template <int kDk>
__device__ __forceinline__ void fold_rows(const GdrParams& p, BatchSmem<kDk>& b,
                                          float (&s)[kDk / kParts], const GdrSeq& sq,
                                          const ColumnAt& c, float a_decay, float dt_bias) {
  constexpr int kRowsPerThread = kDk / kParts;
  const int64_t half_elems = p.replay_rows * p.replay_width;
  const BatchAt fold{(sq.slot * 2 + (1 - sq.parity)) * half_elems, -1, false, false};
  for (int t0 = 0; t0 < sq.n_acc; t0 += kBatch) {
    const int nb = min(kBatch, sq.n_acc - t0);
    load_batch<kDk, true, false>(p, b, fold, t0, nb, c.h, c.hk, c.col_base, a_decay, dt_bias);
    for (int tb = 0; tb < nb; ++tb) {
      state_update(s, b.k[tb] + c.part * kRowsPerThread, b.decay[tb], b.beta[tb], b.v[tb][c.jl]);
    }
    __syncthreads();  // the batch buffers are rewritten by the next batch
  }
}

// The call's rows of one sequence: per batch of kBatch rows, the update of S, the output row (and
// with kNorm its gated RMSNorm over the cluster), the raw rows into replay as `at` says. With
// kNorm the sums go to psum[pbuf]: one buffer (alternate false: a trailing cluster barrier except
// after the sequence's last batch) or two used in turn (alternate true, pbuf flips each batch).
template <int kDk, bool kNorm>
__device__ __forceinline__ void current_rows(const GdrParams& p, BatchSmem<kDk>& b,
                                             float (*psum)[kBatch][kMaxNormBlocks], int& pbuf,
                                             bool alternate, float (&s)[kDk / kParts],
                                             const GdrSeq& sq, const BatchAt& at, const ColumnAt& c,
                                             float a_decay, float dt_bias, float norm_w) {
  constexpr int kRowsPerThread = kDk / kParts;
  for (int64_t t0 = 0; t0 < sq.n; t0 += kBatch) {
    const int nb = static_cast<int>(min(static_cast<int64_t>(kBatch), sq.n - t0));
    load_batch<kDk, false, kNorm>(p, b, at, t0, nb, c.h, c.hk, c.col_base, a_decay, dt_bias);
    for (int tb = 0; tb < nb; ++tb) {
      const float* kn = b.k[tb] + c.part * kRowsPerThread;
      const float* qn = b.q[tb] + c.part * kRowsPerThread;
      state_update(s, kn, b.decay[tb], b.beta[tb], b.v[tb][c.jl]);
      float o = 0.f;
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) o = fmaf(s[r], qn[r], o);
      o += __shfl_xor_sync(0xffffffffu, o, 1);
      o += __shfl_xor_sync(0xffffffffu, o, 2);
      const __nv_bfloat16 o_bf = __float2bfloat16_rn(o);
      if (c.part == 0) {
        if (c.col_ok) p.out[(sq.r0 + t0 + tb) * p.out_s0 + c.h * p.out_s1 + c.j] = o_bf;
        if constexpr (kNorm) b.o[tb][c.jl] = c.col_ok ? __bfloat162float(o_bf) : 0.f;
      }
    }
    if constexpr (kNorm) {
      store_norm<kDk>(p, b, psum[pbuf], sq.r0 + t0, nb, alternate || t0 + kBatch >= sq.n, c.h, c.j,
                      c.col_ok, c.jl, norm_w);
      if (alternate) pbuf ^= 1;
    }
    __syncthreads();  // the batch buffers are rewritten by the next batch
  }
}

}  // namespace

}  // namespace tandem::kernels
