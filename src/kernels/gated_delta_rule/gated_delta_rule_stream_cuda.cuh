// Pieces shared by the two kernels whose blocks walk (value head, sequence) items with a whole
// head's state S [d_k, d_v] at a time: the streaming kernel (gated_delta_rule_stream_cuda.cu, S in
// shared memory for every pass) and its register form for calls with several rows per sequence
// (gated_delta_rule_regs_cuda.cu, S in registers between one load and one write-back). The
// block's shared memory, the items, a batch of rows loaded together, the parts' partial sums and
// the fused output norm. Both run the per-sequence grid's per-token arithmetic
// (gated_delta_rule_rows_cuda.cuh), so all three compute the same bits.
#pragma once

#include "kernels/bulk_copy.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule_rows_cuda.cuh"

namespace tandem::kernels {

namespace {

// Shared memory of a block, in floats from the start: S, then the row buffers.
struct HeadSmem {
  float *S, *q, *k, *v, *z, *o, *ring, *decay, *beta, *psum, *head_decay, *head_dt;
  uint64_t* full;
};

// S, `rows` rows' q, k, v, z and gates, `ring_slots` slots of the parts' partial sums, the
// per-head gate parameters, an mbarrier.
__host__ __device__ inline int64_t head_smem_floats(int64_t dk, int64_t dv, int64_t hv_n,
                                                    int ring_slots, int rows) {
  const int64_t n = dk * dv + rows * (2 * dk + 2 * dv) + ring_slots * kParts * dv +
                    rows * (2 + kMaxNormBlocks) + 2 * hv_n;
  return (n + 1) / 2 * 2 + 2;  // an 8-byte aligned mbarrier at the end
}

template <int kDk>
__device__ __forceinline__ HeadSmem head_smem(float* base, int64_t dv, int64_t hv_n, int ring_slots,
                                              int rows) {
  HeadSmem m;
  m.S = base;
  m.q = m.S + kDk * dv;  // [rows][kDk], normalised in place
  m.k = m.q + rows * kDk;
  m.v = m.k + rows * kDk;  // [rows][dv]
  m.z = m.v + rows * dv;
  m.o = m.v;  // kNorm: the rounded outputs, over v (row tb's v is read before its o is written)
  m.ring = m.z + rows * dv;  // [ring_slots][kParts][dv]: the parts' partial sums
  m.decay = m.ring + ring_slots * kParts * dv;
  m.beta = m.decay + rows;
  m.psum = m.beta + rows;  // [rows][kMaxNormBlocks]
  m.head_decay = m.psum + rows * kMaxNormBlocks;
  m.head_dt = m.head_decay + hv_n;
  m.full =
      reinterpret_cast<uint64_t*>(base + head_smem_floats(kDk, dv, hv_n, ring_slots, rows) - 2);
  return m;
}

// A block's start: every value head's gate parameters into shared memory, the state's mbarrier.
__device__ __forceinline__ void head_block_start(const GdrParams& p, const HeadSmem& m) {
  for (int64_t h = threadIdx.x; h < p.hv_n; h += blockDim.x) {
    m.head_decay[h] = expf(p.a_log[h]);
    m.head_dt[h] = p.dt_bias[h];
  }
  if (threadIdx.x == 0) {
    cuda::mbar_init(m.full, 1);
    cuda::fence_mbar_init();
  }
  __syncthreads();
}

// Item u's sequence values as loaded (gdr_seq_load; past the last item: no sequence), decoded
// only when used so that the loads stay in flight.
__device__ __forceinline__ GdrSeqLoad load_item(const GdrParams& p, int64_t u, int64_t items) {
  return u < items ? gdr_seq_load(p, u / p.hv_n) : GdrSeqLoad{0, 0, -1, 0, 0};
}

// An item is live if its slot is in the pool and it has rows or rows to fold (a graph bucket's
// padding touches nothing).
__device__ __forceinline__ GdrSeq decode_item(const GdrParams& p, const GdrSeqLoad& l, bool& live) {
  const GdrSeq q = gdr_seq_of(p, l);
  live = q.ok && (q.n > 0 || q.n_acc > 0);
  return q;
}

// Row t0 + threadIdx.x's raw gate inputs a and b (threads below nb): from replay half `base` when
// kFold (before the PDL wait), else the call's row base + t.
template <int kDk, bool kFold>
__device__ __forceinline__ void load_gate_ab(const GdrParams& p, int64_t base, int64_t t0, int nb,
                                             int64_t h, __nv_bfloat16& ar, __nv_bfloat16& br) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid >= nb) return;
  const int64_t t = t0 + tid;
  if constexpr (kFold) {
    const int64_t at = base + t * p.replay_width + replay_a<kDk>(p, h);
    ar = gdr_ld_cg(p.replay + at);
    br = gdr_ld_cg(p.replay + at + p.hv_n);
  } else {
    ar = p.a[(base + t) * p.a_s0 + h * p.a_s1];
    br = p.b[(base + t) * p.b_s0 + h * p.b_s1];
  }
}

// The end of a row batch's load: a and b into the replay half at `sink` (current rows, own_ab),
// each row's gates, then (after a barrier) q and k L2-normalised by warp tb for row tb.
template <int kDk, bool kFold>
__device__ __forceinline__ void finish_head_rows(const GdrParams& p, const HeadSmem& m,
                                                 int64_t sink, bool own_ab, int64_t t0, int nb,
                                                 int64_t h, __nv_bfloat16 ar, __nv_bfloat16 br,
                                                 float a_decay, float dt_bias) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < nb) {
    const int64_t t = t0 + tid;
    if (!kFold && own_ab && t < p.replay_rows) {
      __nv_bfloat16* row = p.replay + sink + t * p.replay_width + replay_a<kDk>(p, h);
      row[0] = ar;
      row[p.hv_n] = br;
    }
    row_gate(ar, br, a_decay, dt_bias, m.decay[tid], m.beta[tid]);
  }
  __syncthreads();
  const int lane = tid & 31, warp = tid >> 5;
  if (warp < nb) normalise_row<kDk, kFold>(m.q + warp * kDk, m.k + warp * kDk, lane);
  __syncthreads();
}

// Rows [t0, t0 + nb) (nb <= kRows) of head h into shared memory (k, and q unless kFold,
// normalised; v, z with kNorm; the gates). kFold: from replay half `base` (the accepted rows of
// the last step). Otherwise the call's rows base + t, their raw k (own_k), v, a and b copied into
// the replay half at `sink` for t < replay_rows. Every load is issued before the first store.
// The block has 2 d_v threads and d_k <= d_v, so kRows / 2 elements of q, k, v and z a thread.
template <int kDk, bool kFold, bool kNorm, int kRows>
__device__ __forceinline__ void load_head_rows(const GdrParams& p, const HeadSmem& m, int64_t base,
                                               int64_t sink, bool own_k, int64_t t0, int nb,
                                               int64_t h, int64_t hk, float a_decay,
                                               float dt_bias) {
  static_assert(kRows % 2 == 0 && kRows <= 8, "rows a block loads together");
  constexpr int kIt = kRows / 2;
  const int tid = threadIdx.x, threads = static_cast<int>(blockDim.x);
  const int64_t w = p.replay_width, dv = p.dv;
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.f);
  __nv_bfloat16 qr[kIt], kr[kIt], vr[kIt], zr[kIt], ar = zero, br = zero;
#pragma unroll
  for (int it = 0; it < kIt; ++it) {
    const int e = tid + it * threads;
    const int tq = e / kDk, iq = e % kDk;  // q/k: row tq, element iq
    const int tv = static_cast<int>(e / dv), jv = static_cast<int>(e % dv);  // v/z
    qr[it] = kr[it] = vr[it] = zr[it] = zero;
    if (tq < nb) {
      const int64_t t = t0 + tq;
      if constexpr (kFold) {
        kr[it] = gdr_ld_cg(p.replay + base + t * w + replay_k<kDk>(hk) + iq);
      } else {
        qr[it] = p.q[(base + t) * p.q_s0 + hk * p.q_s1 + iq];
        kr[it] = p.k[(base + t) * p.k_s0 + hk * p.k_s1 + iq];
      }
    }
    if (tv < nb) {
      const int64_t t = t0 + tv;
      if constexpr (kFold) {
        vr[it] = gdr_ld_cg(p.replay + base + t * w + replay_v<kDk>(p, h) + jv);
      } else {
        vr[it] = p.v[(base + t) * p.v_s0 + h * p.v_s1 + jv];
        if constexpr (kNorm) zr[it] = p.z[(base + t) * p.z_s0 + h * p.z_s1 + jv];
      }
    }
  }
  load_gate_ab<kDk, kFold>(p, base, t0, nb, h, ar, br);
#pragma unroll
  for (int it = 0; it < kIt; ++it) {
    const int e = tid + it * threads;
    const int tq = e / kDk, iq = e % kDk;
    const int tv = static_cast<int>(e / dv), jv = static_cast<int>(e % dv);
    if (tq < nb) {
      const int64_t t = t0 + tq;
      if constexpr (!kFold) m.q[tq * kDk + iq] = __bfloat162float(qr[it]);
      m.k[tq * kDk + iq] = __bfloat162float(kr[it]);
      if (!kFold && own_k && t < p.replay_rows) {
        p.replay[sink + t * w + replay_k<kDk>(hk) + iq] = kr[it];
      }
    }
    if (tv < nb) {
      const int64_t t = t0 + tv;
      m.v[tv * dv + jv] = __bfloat162float(vr[it]);
      if constexpr (kNorm) m.z[tv * dv + jv] = __bfloat162float(zr[it]);
      if (!kFold && t < p.replay_rows) p.replay[sink + t * w + replay_v<kDk>(p, h) + jv] = vr[it];
    }
  }
  finish_head_rows<kDk, kFold>(p, m, sink, true, t0, nb, h, ar, br, a_decay, dt_bias);
}

// The per-token passes over a thread's slice of S, rows part * kR + i (i < kR) of columns c and
// c + 1, wherever the slice lives: at(i) is row i's float2 (in shared memory or in registers).
// kUnroll unrolls the loop over 4-row groups (a slice in registers needs all kR / 4).
// kv_pass: the partial sums kv = sum_i (S[i] e^g) k[i] in row order, S as it stands. k_part is
// the row's k from the part's first row, read 4 rows at a time (a broadcast).
template <int kR, int kUnroll, class At>
__device__ __forceinline__ float2 kv_pass(At&& at, const float* k_part, float decay) {
  const float4* kn = reinterpret_cast<const float4*>(k_part);
  float kv0 = 0.f, kv1 = 0.f;
#pragma unroll(kUnroll)
  for (int r4 = 0; r4 < kR / 4; ++r4) {
    const float4 k4 = kn[r4];
    const float kr[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 sv = at(4 * r4 + j);
      kv0 = fmaf(sv.x * decay, kr[j], kv0);
      kv1 = fmaf(sv.y * decay, kr[j], kv1);
    }
  }
  return make_float2(kv0, kv1);
}

// A row's update of the slice, S <- e^g S + k u^T (stored if kStore); with kOut returns the
// partial sums of o = S^T q over the updated S; with kNext also puts those of the next row's kv
// over it into kv_next (kv_pass's arithmetic on the values it would read back; k2_part and decay2
// are that row's).
template <int kR, int kUnroll, bool kStore, bool kOut, bool kNext, class At>
__device__ __forceinline__ float2 update_pass_at(At&& at, const float* k_part, const float* q_part,
                                                 const float* k2_part, float decay, float decay2,
                                                 float u0, float u1, float2& kv_next) {
  const float4* kn = reinterpret_cast<const float4*>(k_part);
  const float4* qn = reinterpret_cast<const float4*>(q_part);
  const float4* kn2 = reinterpret_cast<const float4*>(k2_part);
  float o0 = 0.f, o1 = 0.f, n0 = 0.f, n1 = 0.f;
#pragma unroll(kUnroll)
  for (int r4 = 0; r4 < kR / 4; ++r4) {
    const float4 k4 = kn[r4];
    const float kr[4] = {k4.x, k4.y, k4.z, k4.w};
    float qr[4] = {0.f, 0.f, 0.f, 0.f}, k2[4] = {0.f, 0.f, 0.f, 0.f};
    if constexpr (kOut) {
      const float4 q4 = qn[r4];
      qr[0] = q4.x, qr[1] = q4.y, qr[2] = q4.z, qr[3] = q4.w;
    }
    if constexpr (kNext) {
      const float4 n4 = kn2[r4];
      k2[0] = n4.x, k2[1] = n4.y, k2[2] = n4.z, k2[3] = n4.w;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float2& sv = at(4 * r4 + j);
      const float s0 = fmaf(kr[j], u0, sv.x * decay);
      const float s1 = fmaf(kr[j], u1, sv.y * decay);
      if constexpr (kStore) sv = make_float2(s0, s1);
      if constexpr (kOut) {
        o0 = fmaf(s0, qr[j], o0);
        o1 = fmaf(s1, qr[j], o1);
      }
      if constexpr (kNext) {
        n0 = fmaf(s0 * decay2, k2[j], n0);
        n1 = fmaf(s1 * decay2, k2[j], n1);
      }
    }
  }
  if constexpr (kNext) kv_next = make_float2(n0, n1);
  return make_float2(o0, o1);
}

// A part's partial sums of the column pair into ring slot `slot`; after a barrier, gather() adds
// the 4 parts as (p0 + p1) + (p2 + p3), what the per-sequence kernel's butterfly gives.
__device__ __forceinline__ void post(const HeadSmem& m, int dv, int part, int c, int slot,
                                     float2 v) {
  reinterpret_cast<float2*>(m.ring + slot * kParts * dv + c)[part * (dv / 2)] = v;
}
__device__ __forceinline__ float2 gather(const HeadSmem& m, int dv, int c, int slot) {
  const float2* ring = reinterpret_cast<const float2*>(m.ring + slot * kParts * dv + c);
  const int stride = dv / 2;
  const float2 a = ring[0], b = ring[stride], e = ring[2 * stride], f = ring[3 * stride];
  return make_float2((a.x + b.x) + (e.x + f.x), (a.y + b.y) + (e.y + f.y));
}

// u = beta (v - kv) of row tb for the column pair.
__device__ __forceinline__ float2 row_u(const HeadSmem& m, int dv, int c, int tb, float2 kv) {
  const float2 vv = *reinterpret_cast<const float2*>(m.v + tb * dv + c);
  return make_float2(m.beta[tb] * (vv.x - kv.x), m.beta[tb] * (vv.y - kv.y));
}

// Row tb's kv partial sums and update pass (kv_pass, update_pass_at) on the thread's slice of S
// in shared memory (dv: the columns S holds): rows part * d_k/4 .. of columns c, c + 1, a float2 a
// row.
template <int kDk>
__device__ __forceinline__ float2 kv_partial(const HeadSmem& m, int dv, int part, int c, int tb) {
  constexpr int kR = kDk / kParts;
  const float2* col = reinterpret_cast<const float2*>(m.S + part * kR * dv + c);
  const int stride = dv / 2;  // float2 per row
  return kv_pass<kR, 2>([&](int i) -> const float2& { return col[i * stride]; },
                        m.k + tb * kDk + part * kR, m.decay[tb]);
}

template <int kDk, bool kStore, bool kOut, bool kNext>
__device__ __forceinline__ float2 update_pass(const HeadSmem& m, int dv, int part, int c, int tb,
                                              float u0, float u1, float2& kv_next) {
  constexpr int kR = kDk / kParts;
  float2* col = reinterpret_cast<float2*>(m.S + part * kR * dv + c);
  const int stride = dv / 2;
  const int off = tb * kDk + part * kR;
  return update_pass_at<kR, 2, kStore, kOut, kNext>(
      [&](int i) -> float2& { return col[i * stride]; }, m.k + off, m.q + off, m.k + off + kDk,
      m.decay[tb], kNext ? m.decay[tb + 1] : 0.f, u0, u1, kv_next);
}

// One token (row tb of the loaded rows) for this thread's columns c and c + 1: S <- e^g S;
// u = beta (v - S^T k); S <- S + k u^T (stored if kStore); with kOut returns o = S^T q of both
// columns (every part gets them). Two passes over S; the parts' sums meet in ring slot buf (kv)
// and slot 1 (o; kOut calls pass buf 0).
template <int kDk, bool kStore, bool kOut>
__device__ __forceinline__ float2 head_token(const HeadSmem& m, int dv, int part, int c, int tb,
                                             int buf) {
  post(m, dv, part, c, buf, kv_partial<kDk>(m, dv, part, c, tb));
  __syncthreads();
  const float2 u = row_u(m, dv, c, tb, gather(m, dv, c, buf));
  float2 unused;
  float2 o = update_pass<kDk, kStore, kOut, false>(m, dv, part, c, tb, u.x, u.y, unused);
  if constexpr (kOut) {
    post(m, dv, part, c, 1, o);
    __syncthreads();
    o = gather(m, dv, c, 1);
  }
  return o;
}

// Rows 0 and 1 of the loaded rows in three passes over S instead of head_token's four: row 1's kv
// sums ride in row 0's update pass (row 0 always stores: row 1 follows it). Row 1 stores if
// store_second. The same arithmetic in the same order as two head_token calls, so the same bits.
// Ring slots: row 0's kv 0, its o 1, row 1's kv 2, its o 0 (each slot is written again only after
// a barrier that follows its last read). kOut: the rows' o come back in o_first and o_second (an
// output pair; a fold pair has none).
template <int kDk, bool kOut>
__device__ __forceinline__ void head_pair(const HeadSmem& m, int dv, int part, int c,
                                          bool store_second, float2& o_first, float2& o_second) {
  post(m, dv, part, c, 0, kv_partial<kDk>(m, dv, part, c, 0));
  __syncthreads();
  const float2 u = row_u(m, dv, c, 0, gather(m, dv, c, 0));
  float2 kv_second;
  const float2 o = update_pass<kDk, true, kOut, true>(m, dv, part, c, 0, u.x, u.y, kv_second);
  if constexpr (kOut) post(m, dv, part, c, 1, o);
  post(m, dv, part, c, 2, kv_second);
  __syncthreads();
  if constexpr (kOut) o_first = gather(m, dv, c, 1);
  const float2 u2 = row_u(m, dv, c, 1, gather(m, dv, c, 2));
  float2 unused;
  const float2 o2 =
      store_second ? update_pass<kDk, true, kOut, false>(m, dv, part, c, 1, u2.x, u2.y, unused)
                   : update_pass<kDk, false, kOut, false>(m, dv, part, c, 1, u2.x, u2.y, unused);
  if constexpr (kOut) {
    post(m, dv, part, c, 0, o2);
    __syncthreads();
    o_second = gather(m, dv, c, 0);
  }
}

// An item's fold: its n_acc accepted rows of the last step (each stores), kRows at a time,
// load_rows(t0, nb) bringing rows [t0, t0 + nb) into the buffers (the first while the state is in
// flight), the wait for the state (m.full, phase) before the first pass; kPairs: a loaded pair in
// head_pair's three passes. dv: the width of the block's S. Then, if rows were folded, the folded
// S back to its place: thread 0 calls store_state() (a bulk store in the bulk group it commits) and
// sets store_pending.
template <int kDk, bool kPairs, int kRows, class LoadRows, class StoreState>
__device__ __forceinline__ void fold_head_rows(const HeadSmem& m, int dv, int part, int c,
                                               int n_acc, uint32_t phase, LoadRows&& load_rows,
                                               StoreState&& store_state, bool& store_pending) {
  for (int t0 = 0; t0 < n_acc || t0 == 0; t0 += kRows) {
    const int nb = min(kRows, n_acc - t0);
    if (nb > 0) load_rows(t0, nb);
    if (t0 == 0) cuda::mbar_wait(m.full, phase);
    if (kPairs && nb == 2) {
      float2 unused0, unused1;
      head_pair<kDk, false>(m, dv, part, c, true, unused0, unused1);
    } else {
      for (int tb = 0; tb < nb; ++tb) head_token<kDk, true, false>(m, dv, part, c, tb, tb & 1);
    }
    __syncthreads();  // the row buffers are rewritten by the next rows
  }
  if (n_acc > 0) {
    cuda::fence_proxy_async();  // S's generic-proxy writes before the bulk store reads them
    __syncthreads();
    if (threadIdx.x == 0) {
      store_state();
      cuda::bulk_commit();
      store_pending = true;
    }
  }
}

// Row tb's output o (both columns, every part has them) into `out`, and with kNorm its rounded
// copy into m.o for the norm (part 0 of each column pair writes).
template <bool kNorm>
__device__ __forceinline__ void emit_row(const GdrParams& p, const HeadSmem& m, int64_t row,
                                         int64_t h, int dv, int part, int c, int tb, float2 o) {
  const __nv_bfloat16 o0 = __float2bfloat16_rn(o.x), o1 = __float2bfloat16_rn(o.y);
  if (part == 0) {
    __nv_bfloat16* out = p.out + row * p.out_s0 + h * p.out_s1 + c;
    out[0] = o0;
    out[1] = o1;
    if constexpr (kNorm) {
      m.o[tb * dv + c] = __bfloat162float(o0);
      m.o[tb * dv + c + 1] = __bfloat162float(o1);
    }
  }
}

// The gated RMSNorm of buffer rows [0, nb) of m.o (absolute rows row0 ..): each 32 columns
// summed by a warp butterfly, then those sums in column order (gated_rms_norm_kernel's order).
__device__ __forceinline__ void norm_rows(const GdrParams& p, const HeadSmem& m, int64_t row0,
                                          int64_t h, int dv, int part, int c, int nb, float norm_w0,
                                          float norm_w1) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  __syncthreads();
  const int blocks = dv / 32;
  for (int x = warp; x < nb * blocks; x += static_cast<int>(blockDim.x / 32)) {
    const int tb = x / blocks, cb = x % blocks;
    const float ov = m.o[tb * dv + cb * 32 + lane];
    const float sq2 = cuda::warp_sum(ov * ov);
    if (lane == 0) m.psum[tb * kMaxNormBlocks + cb] = sq2;
  }
  __syncthreads();
  if (part == 0) {
    for (int tb = 0; tb < nb; ++tb) {
      float ss = 0.f;
      for (int cb = 0; cb < blocks; ++cb) ss += m.psum[tb * kMaxNormBlocks + cb];
      const float inv = 1.f / sqrtf(ss / static_cast<float>(dv) + p.norm_eps);
      __nv_bfloat16* out = p.norm_out + (row0 + tb) * p.norm_out_s0 + h * p.norm_out_s1 + c;
      out[0] =
          __float2bfloat16_rn(((m.o[tb * dv + c] * inv) * norm_w0) * cuda::silu(m.z[tb * dv + c]));
      out[1] = __float2bfloat16_rn(((m.o[tb * dv + c + 1] * inv) * norm_w1) *
                                   cuda::silu(m.z[tb * dv + c + 1]));
    }
  }
}

}  // namespace

}  // namespace tandem::kernels
