// Chunked (WY) form of the gated delta rule for prefill (GdrMode::kChunked), on tensor cores,
// all the call's sequences in one launch. One block per (32 value columns, value head, sequence)
// walks its sequence's chunks in order (boundaries at multiples of 64 positions counted from the
// sequence's start_position), holding its slice S [d_k, 32] of state[slot] in shared memory: it
// loads it before the PDL wait (only this op writes the state, two or more launches back; the
// call's sequences own their slots) and stores the final state after the last chunk. Per chunk of
// up to 64 tokens (the algebra of gated_delta_rule_ref.cpp; G is the cumulative log decay inside
// the chunk):
//   A = strict_lower(beta_t e^(G_t - G_r) k_t.k_r)    P = lower(e^(G_t - G_r) q_t.k_r)
//   U = (I + A)^-1 beta (V - e^G K S)                 forward substitution, r = 0..63 in order
//   O = e^G Q S + P U                                 S <- e^G_last S + (e^(G_last - G) K)^T U
// Products run on mma.sync with fp32 accumulation and are fp32-accurate wherever they feed the
// state (checked at 1e-4): q and k enter raw (bf16, exact on the tensor cores) with their L2
// scales applied to the sums; K K^T and Q K^T take bf16 m16n8k16; K S and K^T U take tf32
// m16n8k8 with the fp32 operand split in two tf32 parts (two products per pair). Q S and P U
// only reach the bf16 output and take one tf32 product. Fixed tiling and order: the bits never
// vary between runs. Not here: chunk sizes other than 64 and q/k views that are not 4-byte
// aligned (the caller runs the recurrence); the state-independent part of a chunk (A, P) is
// recomputed by each of a head's column blocks rather than shared.
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int kChunk = 64;  // tokens per chunk
constexpr int kCols = 32;   // value columns per block
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPitchA = kChunk + 4;  // floats per row of A and P (fragment loads: 32 banks)
constexpr int kPitchS = kCols + 4;   // floats per row of S and U

template <int kDk>
struct __align__(16) Smem {
  static constexpr int kPitchK = kDk + 8;  // bf16 per row of q and k (fragment loads: 32 banks)
  __nv_bfloat16 q[kChunk * kPitchK];       // raw rows of the chunk, zeros past its end
  __nv_bfloat16 k[kChunk * kPitchK];
  float s[kDk * kPitchS];            // S[i][j] of this block's columns
  float a[kChunk * kPitchA];         // A[t][r]
  float p[kChunk * kPitchA];         // P[t][r]
  float u[kChunk * kPitchS];         // V, then beta (V - e^G K S), then U
  float inv_q[kChunk];               // 1/|q_t| * d_k^-1/2
  float inv_k[kChunk];               // 1/|k_t|
  float beta[kChunk], g[kChunk];     // g: cumulative G_t inside the chunk
  float egt[kChunk], dlast[kChunk];  // e^G_t and e^(G_last - G_t)
};

// ---- mma helpers (g = lane / 4, c = lane % 4). tf32 m16n8k8 fragments:
//   A 16x8: a0 (g, c) a1 (g+8, c) a2 (g, c+4) a3 (g+8, c+4);  B 8x8: b0 (c, g) b1 (c+4, g);
// bf16 m16n8k16, two values per register (lower k in the low half):
//   A 16x16: a0 (g, 2c..) a1 (g+8, 2c..) a2 (g, 2c+8..) a3 (g+8, 2c+8..);  B: b0 (2c.., g)
//   b1 (2c+8.., g);  C 16x8 (both): c0 (g, 2c) c1 (g, 2c+1) c2 (g+8, 2c) c3 (g+8, 2c+1).
// For tf32 the k index is relabelled (it is summed over, so any fixed relabelling applied to A
// and B alike leaves the product unchanged): slot c reads column 2c and slot c+4 reads 2c+1, so
// a thread's two k values of a row are one bf16 pair or adjacent floats.

__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// x = hi + lo, both tf32, to about fp32 accuracy; with y exactly tf32 (a bf16), hi*y + lo*y is
// then x*y to fp32 accuracy.
__device__ __forceinline__ void split(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32(x);
  lo = tf32(x - __uint_as_float(hi));
}

__device__ __forceinline__ void mma1(float (&d)[4], const uint32_t (&a)[4],
                                     const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- phases of one chunk; rows t >= len are zero-padded (k = q = v = 0, beta = g = 0), which
// makes their rows and columns of A, P and U exactly zero and leaves G_last = G_(len-1).

// Loads q, k (raw bf16 + per-row L2 scale), this block's V columns and the gates of tokens
// [s0, s0 + len); warp 0 forms G (sequential sum, as the reference), e^G and e^(G_last - G).
template <int kDk>
__device__ __forceinline__ void load_chunk(const GdrParams& p, Smem<kDk>& sm, int64_t s0, int len,
                                           int64_t h, int64_t hk, int64_t j0) {
  constexpr int kWords = kDk / 2;  // bf16 pairs per row
  constexpr int kPerLane = (kWords + 31) / 32;
  constexpr int kPitchK = Smem<kDk>::kPitchK;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Issue every load before the first use so their latencies overlap.
  uint32_t qw[kChunk / kWarps][kPerLane], kw[kChunk / kWarps][kPerLane];
  float vv[kChunk / kWarps];
#pragma unroll
  for (int rr = 0; rr < kChunk / kWarps; ++rr) {
    const int t = warp + kWarps * rr;
    const __nv_bfloat16* qrow = p.q + (s0 + t) * p.q_s0 + hk * p.q_s1;
    const __nv_bfloat16* krow = p.k + (s0 + t) * p.k_s0 + hk * p.k_s1;
#pragma unroll
    for (int w = 0; w < kPerLane; ++w) {
      const int idx = lane + 32 * w;
      const bool ok = t < len && idx < kWords;
      // Plain loads: they are the predecessor's output, read after the PDL wait, and the
      // compiler keeps plain loads below it (an __ldg is an asm it may move).
      qw[rr][w] = ok ? reinterpret_cast<const unsigned int*>(qrow)[idx] : 0u;
      kw[rr][w] = ok ? reinterpret_cast<const unsigned int*>(krow)[idx] : 0u;
    }
    const bool v_ok = t < len && j0 + lane < p.dv;
    vv[rr] = v_ok ? __bfloat162float(p.v[(s0 + t) * p.v_s0 + h * p.v_s1 + j0 + lane]) : 0.f;
  }
  if (warp == 0) {
    const float a_decay = expf(p.a_log[h]), dt_bias = p.dt_bias[h];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int t = lane + 32 * e;
      float gt = 0.f, bt = 0.f;
      if (t < len) {
        const float a_raw = __bfloat162float(p.a[(s0 + t) * p.a_s0 + h * p.a_s1]);
        const float b_raw = __bfloat162float(p.b[(s0 + t) * p.b_s0 + h * p.b_s1]);
        gt = -a_decay * cuda::softplus(a_raw + dt_bias);
        bt = cuda::sigmoid(b_raw);
      }
      sm.g[t] = gt;
      sm.beta[t] = bt;
    }
    __syncwarp();
    if (lane == 0) {
      float cum = 0.f;
      for (int t = 0; t < kChunk; ++t) sm.g[t] = (cum += sm.g[t]);
    }
    __syncwarp();
    const float g_last = sm.g[kChunk - 1];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int t = lane + 32 * e;
      sm.egt[t] = expf(sm.g[t]);
      sm.dlast[t] = expf(g_last - sm.g[t]);
    }
  }
  const float q_scale = 1.f / sqrtf(static_cast<float>(kDk));
#pragma unroll
  for (int rr = 0; rr < kChunk / kWarps; ++rr) {
    const int t = warp + kWarps * rr;
    float ssq = 0.f, ssk = 0.f;
#pragma unroll
    for (int w = 0; w < kPerLane; ++w) {
      const int idx = lane + 32 * w;
      const float2 qf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&qw[rr][w]));
      const float2 kf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&kw[rr][w]));
      ssq = fmaf(qf.x, qf.x, fmaf(qf.y, qf.y, ssq));
      ssk = fmaf(kf.x, kf.x, fmaf(kf.y, kf.y, ssk));
      if (idx < kWords) {
        reinterpret_cast<uint32_t*>(sm.q + t * kPitchK)[idx] = qw[rr][w];
        reinterpret_cast<uint32_t*>(sm.k + t * kPitchK)[idx] = kw[rr][w];
      }
    }
    ssq = cuda::warp_sum(ssq);
    ssk = cuda::warp_sum(ssk);
    if (lane == 0) {
      sm.inv_q[t] = t < len ? (1.f / sqrtf(ssq + 1e-6f)) * q_scale : 0.f;
      sm.inv_k[t] = t < len ? 1.f / sqrtf(ssk + 1e-6f) : 0.f;
    }
    sm.u[t * kPitchS + lane] = vv[rr];
  }
}

// Phase 1: A and P (warp tile 16 x 32 of the 64 x 64 lower triangle), then R = beta (V - e^G K S)
// into sm.u and acc_o = e^G Q S (warp tile 16 x 16 of 64 x 32). Both tiles share the warp's rows.
// The products take the raw bf16 q and k, whose products the tensor cores form exactly; the L2
// scales of the rows are applied to the fp32 sums afterwards.
template <int kDk>
__device__ __forceinline__ void chunk_products(Smem<kDk>& sm, float (&acc_o)[2][4]) {
  constexpr int kPitchW = Smem<kDk>::kPitchK / 2;  // 32-bit words (bf16 pairs) per q/k row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int m0 = 16 * (warp >> 1), na0 = 32 * (warp & 1), ns0 = 16 * (warp & 1);
  const uint32_t* kw = reinterpret_cast<const uint32_t*>(sm.k);
  const uint32_t* qw = reinterpret_cast<const uint32_t*>(sm.q);
  const uint32_t* k_row0 = kw + (m0 + g) * kPitchW;
  const uint32_t* k_row1 = kw + (m0 + g + 8) * kPitchW;
  const uint32_t* q_row0 = qw + (m0 + g) * kPitchW;
  const uint32_t* q_row1 = qw + (m0 + g + 8) * kPitchW;
  // K K^T and Q K^T: bf16 m16n8k16, exact products and fp32 sums.
  float acc_a[4][4] = {}, acc_p[4][4] = {};
#pragma unroll 2
  for (int w = c; w < kDk / 2; w += 8) {  // word w holds columns 2w, 2w + 1
    const uint32_t ka[4] = {k_row0[w], k_row1[w], k_row0[w + 4], k_row1[w + 4]};
    const uint32_t qa[4] = {q_row0[w], q_row1[w], q_row0[w + 4], q_row1[w + 4]};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int n0 = na0 + 8 * nt;
      if (n0 > m0 + 15) continue;  // wholly above the diagonal: A and P are zero there
      const uint32_t b[2] = {kw[(n0 + g) * kPitchW + w], kw[(n0 + g) * kPitchW + w + 4]};
      mma_bf16(acc_a[nt], ka, b);
      mma_bf16(acc_p[nt], qa, b);
    }
  }
  // K S and Q S: tf32 m16n8k8. A bf16 is a tf32 (its bits shifted up), so only S is split and
  // K S takes two products per pair.
  float acc_r[2][4] = {};
#pragma unroll 2
  for (int k0 = 0; k0 < kDk; k0 += 8) {
    const int col = k0 + 2 * c, w = col / 2;
    const uint32_t ka[4] = {k_row0[w] << 16, k_row1[w] << 16, k_row0[w] & 0xffff0000u,
                            k_row1[w] & 0xffff0000u};
    const uint32_t qa[4] = {q_row0[w] << 16, q_row1[w] << 16, q_row0[w] & 0xffff0000u,
                            q_row1[w] & 0xffff0000u};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int n0 = ns0 + 8 * nt;
      uint32_t bh[2], bl[2];
      split(sm.s[col * kPitchS + n0 + g], bh[0], bl[0]);
      split(sm.s[(col + 1) * kPitchS + n0 + g], bh[1], bl[1]);
      mma1(acc_r[nt], ka, bl);
      mma1(acc_r[nt], ka, bh);
      mma1(acc_o[nt], qa, bh);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int t = m0 + g + (e >= 2 ? 8 : 0), r = na0 + 8 * nt + 2 * c + (e & 1);
      float av = 0.f, pv = 0.f;
      if (t >= r) {  // e^(G_t - G_r) <= 1 here; the other side is never formed (it can overflow)
        const float decay = expf(sm.g[t] - sm.g[r]);
        pv = decay * (acc_p[nt][e] * (sm.inv_q[t] * sm.inv_k[r]));
        if (t > r) av = sm.beta[t] * decay * (acc_a[nt][e] * (sm.inv_k[t] * sm.inv_k[r]));
      }
      sm.a[t * kPitchA + r] = av;
      sm.p[t * kPitchA + r] = pv;
    }
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int t = m0 + g + (e >= 2 ? 8 : 0), j = ns0 + 8 * nt + 2 * c + (e & 1);
      float& x = sm.u[t * kPitchS + j];
      x = sm.beta[t] * (x - sm.egt[t] * (acc_r[nt][e] * sm.inv_k[t]));
      acc_o[nt][e] *= sm.egt[t] * sm.inv_q[t];
    }
  }
}

// Phase 2: U = (I + A)^-1 R by forward substitution. Warp w owns columns 4w..4w+3; lane
// (c = lane / 8, rg = lane % 8) keeps rows rg, rg + 8, ... of column 4w + c in registers and
// row r is broadcast from its owner by a shuffle. Each u_t subtracts A_tr u_r in order
// r = 0..t-1, as the reference does. Entries of A on or above the diagonal are stored zeros.
template <int kDk>
__device__ __forceinline__ void substitute(Smem<kDk>& sm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j = 4 * warp + (lane >> 3), rg = lane & 7;
  float x[kChunk / 8];
#pragma unroll
  for (int m = 0; m < kChunk / 8; ++m) x[m] = sm.u[(rg + 8 * m) * kPitchS + j];
#pragma unroll
  for (int r = 0; r < kChunk - 1; ++r) {
    const float ur = __shfl_sync(0xffffffffu, x[r / 8], (lane & ~7) | (r & 7));
#pragma unroll
    for (int m = 0; m < kChunk / 8; ++m) {
      if (8 * m + 7 > r) x[m] = fmaf(-sm.a[(rg + 8 * m) * kPitchA + r], ur, x[m]);
    }
  }
#pragma unroll
  for (int m = 0; m < kChunk / 8; ++m) sm.u[(rg + 8 * m) * kPitchS + j] = x[m];
}

// Phase 3a: O += P U (warp tile as in phase 1; only k steps up to the diagonal), stored as bf16.
template <int kDk>
__device__ __forceinline__ void chunk_output(const GdrParams& p, Smem<kDk>& sm,
                                             float (&acc_o)[2][4], int64_t s0, int len, int64_t h,
                                             int64_t j0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int m0 = 16 * (warp >> 1), ns0 = 16 * (warp & 1);
  for (int k0 = 0; k0 < m0 + 16; k0 += 8) {
    const int col = k0 + 2 * c;
    const float2 p_lo = *reinterpret_cast<const float2*>(&sm.p[(m0 + g) * kPitchA + col]);
    const float2 p_hi = *reinterpret_cast<const float2*>(&sm.p[(m0 + g + 8) * kPitchA + col]);
    const uint32_t pa[4] = {tf32(p_lo.x), tf32(p_hi.x), tf32(p_lo.y), tf32(p_hi.y)};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int n0 = ns0 + 8 * nt;
      const uint32_t b[2] = {tf32(sm.u[col * kPitchS + n0 + g]),
                             tf32(sm.u[(col + 1) * kPitchS + n0 + g])};
      mma1(acc_o[nt], pa, b);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int t = m0 + g + (e >= 2 ? 8 : 0);
      const int64_t j = j0 + ns0 + 8 * nt + 2 * c + (e & 1);
      if (t < len && j < p.dv)
        p.out[(s0 + t) * p.out_s0 + h * p.out_s1 + j] = __float2bfloat16_rn(acc_o[nt][e]);
    }
  }
}

// Phase 3b: S <- e^G_last S + K^T (e^(G_last - G) U / |k|), warp tiles 16 x 32 (rows i of S).
// The decay and L2 scale of token r move from k_r onto row r of U, so the raw bf16 k is an exact
// tf32 operand and only the scaled U is split (two products per pair).
template <int kDk>
__device__ __forceinline__ void chunk_state(Smem<kDk>& sm, int len) {
  constexpr int kPitchK = Smem<kDk>::kPitchK;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const float eg_last = expf(sm.g[kChunk - 1]);
  const auto bits = [](__nv_bfloat16 x) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(x)) << 16;
  };
  for (int i0 = 16 * warp; i0 < kDk; i0 += 16 * kWarps) {
    float acc[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = i0 + g + (e >= 2 ? 8 : 0), j = 8 * nt + 2 * c + (e & 1);
        acc[nt][e] = sm.s[i * kPitchS + j] * eg_last;
      }
    }
    for (int k0 = 0; k0 < len; k0 += 8) {  // rows past len are zero
      const int r = k0 + 2 * c;
      const float w0 = sm.dlast[r] * sm.inv_k[r], w1 = sm.dlast[r + 1] * sm.inv_k[r + 1];
      const __nv_bfloat16* k0_row = sm.k + r * kPitchK + i0 + g;  // A(i, r) = k_r[i]
      const uint32_t a[4] = {bits(k0_row[0]), bits(k0_row[8]), bits(k0_row[kPitchK]),
                             bits(k0_row[kPitchK + 8])};
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        uint32_t bh[2], bl[2];
        split(w0 * sm.u[r * kPitchS + 8 * nt + g], bh[0], bl[0]);
        split(w1 * sm.u[(r + 1) * kPitchS + 8 * nt + g], bh[1], bl[1]);
        mma1(acc[nt], a, bl);
        mma1(acc[nt], a, bh);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = i0 + g + (e >= 2 ? 8 : 0), j = 8 * nt + 2 * c + (e & 1);
        sm.s[i * kPitchS + j] = acc[nt][e];
      }
    }
  }
}

// Two blocks per SM up to d_k = 128 (about 97 KB of shared memory each); one at d_k = 256.
template <int kDk>
__global__ void __launch_bounds__(kThreads, kDk <= 128 ? 2 : 1) gdr_chunked_kernel(GdrParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem<kDk>& sm = *reinterpret_cast<Smem<kDk>*>(smem_raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t h = blockIdx.y, hk = h / (p.hv_n / p.hk_n);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const bool col_ok = j0 + lane < p.dv;  // columns past d_v carry zeros and are never stored
  const int64_t head_elems = static_cast<int64_t>(kDk) * p.dv;
  const GdrSeq sq = gdr_seq(p, blockIdx.z);
  if (!sq.ok || sq.n == 0) {  // nothing to do: the state stays as it is
    cuda::pdl_begin();
    return;
  }
  // 32-bit row counters (rows of a step fit easily): the loop keeps only a few registers live
  // besides the mma fragments. A position's offset in its chunk uses &, which keeps it in [0, 64)
  // even for a (wrong) negative start.
  const int r0 = static_cast<int>(sq.r0), n = static_cast<int>(sq.n);
  const int start_off = gdr_ld_cg(p.start_position + blockIdx.z) & (kChunk - 1);
  const int slot = static_cast<int>(sq.slot);
  {
    const float* src = p.state + (static_cast<int64_t>(slot) * p.hv_n + h) * head_elems + j0 + lane;
    for (int i = warp; i < kDk; i += kWarps)
      sm.s[i * kPitchS + lane] = col_ok ? gdr_ld_cg(src + i * p.dv) : 0.f;
  }
  cuda::pdl_begin();
  for (int t = 0; t < n;) {
    const int off = (start_off + t) & (kChunk - 1);
    const int len = kChunk - off < n - t ? kChunk - off : n - t;
    const int64_t s0 = r0 + t;  // absolute row of the chunk's first row
    load_chunk(p, sm, s0, len, h, hk, j0);
    __syncthreads();
    float acc_o[2][4] = {};
    chunk_products(sm, acc_o);
    __syncthreads();
    substitute(sm);
    __syncthreads();
    chunk_output(p, sm, acc_o, s0, len, h, j0);
    chunk_state(sm, len);
    __syncthreads();  // the next chunk overwrites q, k, u and the gates
    t += len;
  }
  if (col_ok) {
    float* dst = p.state + (static_cast<int64_t>(slot) * p.hv_n + h) * head_elems + j0 + lane;
    for (int i = warp; i < kDk; i += kWarps) dst[i * p.dv] = sm.s[i * kPitchS + lane];
  }
}

template <int kDk>
void launch(const GdrParams& p, cudaStream_t s) {
  const size_t smem = sizeof(Smem<kDk>);
  auto* kernel = gdr_chunked_kernel<kDk>;
  // The opt-in is fixed per instantiation, so it is made once per process (one device assumed).
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  cuda::check(opted_in, "cudaFuncSetAttribute(gdr_chunked_kernel)");
  // Ask for the largest shared-memory carveout so that two blocks fit on an SM.
  static const cudaError_t carveout = cudaFuncSetAttribute(
      kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  cuda::check(carveout, "cudaFuncSetAttribute(gdr_chunked_kernel carveout)");
  const dim3 grid(cuda::ceil_div(p.dv, kCols), static_cast<unsigned>(p.hv_n),
                  static_cast<unsigned>(p.n_seqs));
  cuda::launch_pdl(kernel, grid, kThreads, smem, s, p);
  cuda::check_launch("gdr_chunked_kernel");
}

bool aligned4(const void* x, int64_t s0, int64_t s1) {
  return reinterpret_cast<uintptr_t>(x) % 4 == 0 && s0 % 2 == 0 && s1 % 2 == 0;
}

}  // namespace

bool gdr_chunked_launch(const GdrParams& p, int64_t d_k, int chunk_size, cudaStream_t s) {
  if (chunk_size != kChunk || !aligned4(p.q, p.q_s0, p.q_s1) || !aligned4(p.k, p.k_s0, p.k_s1))
    return false;
  switch (d_k) {
    case 16:
      launch<16>(p, s);
      return true;
    case 32:
      launch<32>(p, s);
      return true;
    case 64:
      launch<64>(p, s);
      return true;
    case 128:
      launch<128>(p, s);
      return true;
    case 256:
      launch<256>(p, s);
      return true;
    default:
      return false;
  }
}

}  // namespace tandem::kernels
