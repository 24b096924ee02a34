// Opt-in gdr-half-heads (gated_delta_rule_set_stream_half_heads): the streaming kernel's items
// cut in two along the value columns. The columns of S are independent in the recurrence (kv, u,
// the update and o of column j read only column j of S and the whole q and k), so a block of d_v
// threads takes half a value head of one sequence: its d_k x d_v/2 piece of S (32 KB at 128 x
// 128) loaded and stored by one tensor-map box copy each (the state pool as a 2D matrix [slots x
// heads x d_k, d_v]), the whole q and k rows, its half of v. Why (docs/cuda.md gap 3): the
// streaming kernel's time at 32+ sequences is each item's serial chain (state copy, row loads,
// barriers, passes over S), and 3 blocks per SM (64 KB of state each) run only 3 chains at once;
// half items hold half the state, so ~5 blocks of 128 threads fit an SM: 5 chains, each half as
// long. Each thread runs the streaming kernel's per-column arithmetic on its column pair
// (head_token / head_pair over the half's S, whose rows are d_v/2 wide), so the sums are the same
// and so are the bits (CudaRowInvariance.GdrStreamMatchesPerSequence, GdnBatchInvariance). The
// fused output norm needs both halves' sums of squares, so calls with a norm run it as its own
// launch after this kernel (gated_rms_norm_rows_cuda: the same bits as the fused one).
// Replay rows: k by half 0 of the key head's first value head, v by each half for its columns,
// a and b by half 0.
#include <algorithm>
#include <atomic>

#include "kernels/bulk_copy.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule_stream_cuda.cuh"
#include "kernels/tensor_map_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int kHalfRows = 2;       // rows whose inputs load together (the pairs: 3 passes)
constexpr int kHalfRingSlots = 3;  // head_pair's slots
constexpr int kHalfMaxThreads = 128;
constexpr int64_t kHalfMaxHeads = 2048;

std::atomic<bool> g_half_heads{false};
std::atomic<int64_t> g_half_calls{0};

struct GdrHalfParams {
  GdrParams p;
  CUtensorMap state;  // fp32 [n_slots * hv_n * d_k, d_v] in boxes [d_v / 2, d_k]
};

// Rows [t0, t0 + nb) of head h for a half block (d_v threads, columns col0 .. col0 + W): q and k
// whole (normalised), v of its columns, the gates. As load_head_rows, every load issued before the
// first store; the replay copies as the header says (own_k, own_ab: this half writes k, a and b).
template <int kDk, bool kFold>
__device__ __forceinline__ void load_half_rows(const GdrParams& p, const HeadSmem& m, int64_t base,
                                               int64_t sink, bool own_k, bool own_ab, int64_t t0,
                                               int nb, int64_t h, int64_t hk, int col0, int w,
                                               float a_decay, float dt_bias) {
  constexpr int kQk = (kHalfRows * kDk + kHalfMaxThreads - 1) / kHalfMaxThreads;  // per thread
  const int tid = threadIdx.x, threads = static_cast<int>(blockDim.x);
  const int64_t rw = p.replay_width;
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.f);
  __nv_bfloat16 qr[kQk], kr[kQk], vr[kHalfRows], ar = zero, br = zero;
#pragma unroll
  for (int it = 0; it < kQk; ++it) {
    const int e = tid + it * threads, tq = e / kDk, iq = e % kDk;
    qr[it] = kr[it] = zero;
    if (tq < nb) {
      const int64_t t = t0 + tq;
      if constexpr (kFold) {
        kr[it] = gdr_ld_cg(p.replay + base + t * rw + replay_k<kDk>(hk) + iq);
      } else {
        qr[it] = p.q[(base + t) * p.q_s0 + hk * p.q_s1 + iq];
        kr[it] = p.k[(base + t) * p.k_s0 + hk * p.k_s1 + iq];
      }
    }
  }
#pragma unroll
  for (int it = 0; it < kHalfRows; ++it) {  // v: row tv, column jv of the half
    const int e = tid + it * threads, tv = e / w, jv = e % w;
    vr[it] = zero;
    if (tv < nb) {
      const int64_t t = t0 + tv;
      vr[it] = kFold ? gdr_ld_cg(p.replay + base + t * rw + replay_v<kDk>(p, h) + col0 + jv)
                     : p.v[(base + t) * p.v_s0 + h * p.v_s1 + col0 + jv];
    }
  }
  load_gate_ab<kDk, kFold>(p, base, t0, nb, h, ar, br);
#pragma unroll
  for (int it = 0; it < kQk; ++it) {
    const int e = tid + it * threads, tq = e / kDk, iq = e % kDk;
    if (tq < nb) {
      const int64_t t = t0 + tq;
      if constexpr (!kFold) m.q[tq * kDk + iq] = __bfloat162float(qr[it]);
      m.k[tq * kDk + iq] = __bfloat162float(kr[it]);
      if (!kFold && own_k && t < p.replay_rows) {
        p.replay[sink + t * rw + replay_k<kDk>(hk) + iq] = kr[it];
      }
    }
  }
#pragma unroll
  for (int it = 0; it < kHalfRows; ++it) {
    const int e = tid + it * threads, tv = e / w, jv = e % w;
    if (tv < nb) {
      const int64_t t = t0 + tv;
      m.v[tv * w + jv] = __bfloat162float(vr[it]);
      if (!kFold && t < p.replay_rows) {
        p.replay[sink + t * rw + replay_v<kDk>(p, h) + col0 + jv] = vr[it];
      }
    }
  }
  finish_head_rows<kDk, kFold>(p, m, sink, own_ab, t0, nb, h, ar, br, a_decay, dt_bias);
}

// Row tb's output o for this thread's column pair (part 0 writes; no fused norm).
__device__ __forceinline__ void emit_half(const GdrParams& p, int64_t row, int64_t h, int part,
                                          int col, float2 o) {
  if (part == 0) {
    __nv_bfloat16* out = p.out + row * p.out_s0 + h * p.out_s1 + col;
    out[0] = __float2bfloat16_rn(o.x);
    out[1] = __float2bfloat16_rn(o.y);
  }
}

// Item u = 2 (head item) + half: value head h of sequence sq, columns col0 .. col0 + W of S. As
// the streaming kernel's head_item (gated_delta_rule_stream_cuda.cu) with W-wide rows of S.
template <int kDk>
__global__ void __launch_bounds__(kHalfMaxThreads)
    gdr_half_kernel(const __grid_constant__ GdrHalfParams hp) {
  const GdrParams& p = hp.p;
  extern __shared__ __align__(128) float smem[];
  const int w = static_cast<int>(p.dv / 2);
  const int64_t head_items = p.hv_n * p.n_seqs, items = 2 * head_items;
  const int64_t n_blocks = gridDim.x, half_elems = p.replay_rows * p.replay_width;
  const HeadSmem m = head_smem<kDk>(smem, w, p.hv_n, kHalfRingSlots, kHalfRows);
  const int tid = static_cast<int>(threadIdx.x), part = tid / (w / 2), c = 2 * (tid % (w / 2));
  const uint32_t piece_bytes = static_cast<uint32_t>(kDk * w * 4);
  head_block_start(p, m);
  uint32_t phase = 0;
  bool waited = false, store_pending = false;  // thread 0 tracks the box store
  GdrSeqLoad next = load_item(p, blockIdx.x / 2, head_items);
  for (int64_t u = blockIdx.x; u < items; u += n_blocks) {
    bool live = false;
    const GdrSeq sq = decode_item(p, next, live);
    next = load_item(p, (u + n_blocks) / 2, head_items);
    if (!live) continue;
    const int64_t hu = u / 2, h = hu % p.hv_n, hk = h / (p.hv_n / p.hk_n);
    const int half = static_cast<int>(u % 2), col0 = half * w;
    const int64_t box_row = (sq.slot * p.hv_n + h) * kDk;
    const float a_decay = m.head_decay[h], dt_bias = m.head_dt[h];
    if (tid == 0) {  // the state piece, once the previous item's store has read the buffer out
      if (store_pending) cuda::bulk_wait_read();
      store_pending = false;
      cuda::mbar_arrive_expect_tx(m.full, piece_bytes);
      cuda::tensor_load_2d(m.S, &hp.state, col0, box_row, m.full);
    }
    // The fold: the accepted rows of the last step (the first loading while the piece is in
    // flight), in pairs of three passes; every folded row stores.
    const int64_t fold_base = (sq.slot * 2 + (1 - sq.parity)) * half_elems;
    fold_head_rows<kDk, true, kHalfRows>(
        m, w, part, c, sq.n_acc, phase,
        [&](int t0, int nb) {
          load_half_rows<kDk, true>(p, m, fold_base, -1, false, false, t0, nb, h, hk, col0, w,
                                    a_decay, dt_bias);
        },
        [&] { cuda::tensor_store_2d(&hp.state, col0, box_row, m.S); }, store_pending);
    if (!waited) {
      cuda::pdl_begin();
      waited = true;
    }
    const int64_t sink = (sq.slot * 2 + sq.parity) * half_elems;
    const bool own_k = half == 0 && h % (p.hv_n / p.hk_n) == 0, own_ab = half == 0;
    for (int64_t t0 = 0; t0 < sq.n; t0 += kHalfRows) {
      const int nb = static_cast<int>(min(static_cast<int64_t>(kHalfRows), sq.n - t0));
      load_half_rows<kDk, false>(p, m, sq.r0, sink, own_k, own_ab, t0, nb, h, hk, col0, w, a_decay,
                                 dt_bias);
      if (t0 == 0 && sq.n > 1) {  // the item's first in-place update comes next
        if (tid == 0 && store_pending) cuda::bulk_wait_read();
        store_pending = false;
        __syncthreads();
      }
      const int64_t row = sq.r0 + t0;
      if (nb == 2) {
        float2 o_first, o_second;
        head_pair<kDk, true>(m, w, part, c, t0 + 2 < sq.n, o_first, o_second);
        emit_half(p, row, h, part, col0 + c, o_first);
        emit_half(p, row + 1, h, part, col0 + c, o_second);
      } else {
        emit_half(p, row, h, part, col0 + c,
                  t0 + 1 < sq.n ? head_token<kDk, true, true>(m, w, part, c, 0, 0)
                                : head_token<kDk, false, true>(m, w, part, c, 0, 0));
      }
      cuda::fence_proxy_async();  // S's generic-proxy accesses before a later box copy
      __syncthreads();            // the row buffers are rewritten by the next rows
    }
    phase ^= 1;
  }
  if (!waited) cuda::pdl_begin();
  if (tid == 0 && store_pending) cuda::bulk_wait();
}

template <int kDk>
void launch_half(const GdrParams& p, cudaStream_t s) {
  GdrHalfParams hp{p, {}};
  TANDEM_CHECK(cuda::encode_tensor_map_2d(&hp.state, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, p.state,
                                          p.n_slots * p.hv_n * kDk, p.dv, p.dv,
                                          static_cast<int>(p.dv / 2), kDk),
               "gated_delta_rule_cuda: the driver refused the state pool's tensor map ({} x {})",
               p.n_slots * p.hv_n * kDk, p.dv);
  const int threads = static_cast<int>(p.dv);
  const size_t smem =
      static_cast<size_t>(head_smem_floats(kDk, p.dv / 2, p.hv_n, kHalfRingSlots, kHalfRows)) *
      sizeof(float);
  // Blocks resident at once (the attribute and the occupancy once per shared-memory size).
  static std::atomic<size_t> known_smem{0};
  static std::atomic<int64_t> resident{0};
  if (known_smem.load() != smem) {
    cuda::check(
        cudaFuncSetAttribute(gdr_half_kernel<kDk>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)),
        "cudaFuncSetAttribute");
    int per_sm = 0;
    cuda::check(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gdr_half_kernel<kDk>, threads, smem),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    resident.store(std::max(1, per_sm) * static_cast<int64_t>(cuda::sm_count()));
    known_smem.store(smem);
  }
  const int64_t blocks = std::min<int64_t>(resident.load(), 2 * p.hv_n * p.n_seqs);
  cuda::launch_pdl(gdr_half_kernel<kDk>, dim3(static_cast<unsigned>(blocks)), threads, smem, s, hp);
  cuda::check_launch("gdr_half_kernel");
  g_half_calls.fetch_add(1);
}

}  // namespace

bool gated_delta_rule_set_stream_half_heads(bool on) { return g_half_heads.exchange(on); }
int64_t gated_delta_rule_stream_half_calls() { return g_half_calls.load(); }
bool gdr_half_on() { return g_half_heads.load(); }

bool gdr_half_takes(const GdrParams& p, int64_t d_k) {
  return g_half_heads.load() && p.recurrent && (d_k == 64 || d_k == 128) && p.dv == 128 &&
         d_k <= p.dv && p.hv_n <= kHalfMaxHeads;
}

bool gdr_half_launch(const GdrParams& p, int64_t d_k, cudaStream_t s) {
  if (!gdr_half_takes(p, d_k) || p.norm_out != nullptr) return false;
  if (d_k == 64) launch_half<64>(p, s);
  if (d_k == 128) launch_half<128>(p, s);
  return true;
}

}  // namespace tandem::kernels
