// CUDA gated delta rule, the register form of the streaming kernel (opt-in `gdr-regs`,
// gated_delta_rule_set_stream_registers): for calls whose sequences carry several rows (verify
// steps), where the streaming kernel (gated_delta_rule_stream_cuda.cu) is bound by its passes over
// S in shared memory, not by the state's traffic: each pass moves 64 KB of S through shared
// memory (an update pass 128 KB), so an item with 4 folded and 4 current rows moves ~1.6 MB there
// against 128 KB of HBM (docs/cuda.md, gap 3).
// Here a block still owns one (value head, sequence) item at a time and S arrives by one bulk copy,
// but each thread then takes its slice (the rows of its part, columns c and c + 1: 64 floats at
// d_k 128) into registers, every pass runs on registers, and the folded state goes back by the
// threads' own stores. The shared buffer is free once the slice is in registers, so the next
// item's state is copied in while this one runs. Rows load 4 at a time (a verify step's k + 1 <= 4
// in one load), and every update pass also sums the next row's kv (n + 1 passes and barriers for
// n rows, as the pairs do for 2). 2 blocks of 256 threads per SM (128 registers a thread).
// The per-token arithmetic is the per-sequence grid's, in the same order (kv_partial's and
// update_pass's expressions on the values they would read back), so the bits are the same:
// CudaRowInvariance.GdrStreamMatchesPerSequence and GdnBatchInvariance with it on.
#include <atomic>

#include "kernels/bulk_copy.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule_stream_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int kRegRows = 4;       // rows loaded together
constexpr int kRegBlocks = 2;     // blocks per SM: 65536 / (2 x 256) = 128 registers a thread
constexpr int kRegThreads = 256;  // 2 x d_v
constexpr int kRegRingSlots = 4;  // row t's kv in slot t & 1, its o in slot 2 + (t & 1)
constexpr int64_t kRegMaxHeads = 2048;

std::atomic<bool> g_regs{false};
std::atomic<int64_t> g_regs_calls{0};

// Loaded rows 0..nb-1 applied to the slice in order, each row's update pass also summing the next
// row's kv: nb + 1 passes. Ring slots: row t's kv in slot t & 1, its o (kOut) in slot 2 + (t & 1);
// a slot is written again two barriers after it was read. With kOut, emit(t, o) gets row t's o.
template <int kDk, bool kOut, class Emit>
__device__ __forceinline__ void chain_rows(const HeadSmem& m, float2 (&s)[kDk / kParts], int dv,
                                           int part, int c, int nb, Emit&& emit) {
  constexpr int kR = kDk / kParts;
  const int off = part * kR;
  const auto at = [&](int i) -> float2& { return s[i]; };
  post(m, dv, part, c, 0, kv_pass<kR, kR / 4>(at, m.k + off, m.decay[0]));
  __syncthreads();
  float2 u = row_u(m, dv, c, 0, gather(m, dv, c, 0));
  for (int t = 0; t < nb; ++t) {
    const float* kt = m.k + t * kDk + off;
    const float* qt = m.q + t * kDk + off;
    float2 kv_next = make_float2(0.f, 0.f), o;
    const bool next = t + 1 < nb;
    if (next) {
      o = update_pass_at<kR, kR / 4, true, kOut, true>(at, kt, qt, kt + kDk, m.decay[t],
                                                       m.decay[t + 1], u.x, u.y, kv_next);
      post(m, dv, part, c, (t + 1) & 1, kv_next);
    } else {
      o = update_pass_at<kR, kR / 4, true, kOut, false>(at, kt, qt, kt, m.decay[t], 0.f, u.x, u.y,
                                                        kv_next);
    }
    if constexpr (kOut) post(m, dv, part, c, 2 + (t & 1), o);
    if (kOut || next) __syncthreads();
    if constexpr (kOut) emit(t, gather(m, dv, c, 2 + (t & 1)));
    if (next) u = row_u(m, dv, c, t + 1, gather(m, dv, c, (t + 1) & 1));
  }
}

// kDv: d_v at compile time (64 or 128), so that the slice's shared-memory offsets are immediates.
template <int kDk, int kDv, bool kNorm>
__global__ void __launch_bounds__(kRegThreads, kRegBlocks) gdr_regs_kernel(GdrParams p) {
  constexpr int kR = kDk / kParts;
  extern __shared__ __align__(128) float smem[];
  constexpr int64_t dv = kDv;
  constexpr int dvi = kDv;
  const int64_t items = p.hv_n * p.n_seqs;
  const HeadSmem m = head_smem<kDk>(smem, dv, p.hv_n, kRegRingSlots, kRegRows);
  const int tid = threadIdx.x;
  const int half = dvi / 2, part = tid / half, c = 2 * (tid % half);  // columns c and c + 1
  const uint32_t state_bytes = static_cast<uint32_t>(kDk * dv * 4);
  const int64_t head_elems = kDk * dv, half_elems = p.replay_rows * p.replay_width;
  const int64_t n_blocks = gridDim.x;
  const float norm_w0 = kNorm ? p.norm_w[c] : 0.f, norm_w1 = kNorm ? p.norm_w[c + 1] : 0.f;
  head_block_start(p, m);
  const auto state_of = [&](const GdrSeq& q, int64_t u) {
    return p.state + (q.slot * p.hv_n + u % p.hv_n) * head_elems;
  };
  const auto copy_state = [&](const float* from) {
    if (tid == 0) {
      cuda::mbar_arrive_expect_tx(m.full, state_bytes);
      cuda::bulk_copy(m.S, from, state_bytes, m.full);
    }
  };
  uint32_t phase = 0;
  bool waited = false, pending = false;  // pending: the buffer receives item u's state
  GdrSeqLoad cur = load_item(p, blockIdx.x, items);
  for (int64_t u = blockIdx.x; u < items; u += n_blocks) {
    bool live = false;
    const GdrSeq sq = decode_item(p, cur, live);
    cur = load_item(p, u + n_blocks, items);
    if (!live) continue;
    const int64_t h = u % p.hv_n, hk = h / (p.hv_n / p.hk_n);
    float* const state = state_of(sq, u);
    const float a_decay = m.head_decay[h], dt_bias = m.head_dt[h];
    if (!pending) copy_state(state);
    // The fold's first rows while the state is in flight, then the slice into registers; the
    // buffer then takes the next item's state (every thread's reads of it before the copy).
    const int64_t fold_base = (sq.slot * 2 + (1 - sq.parity)) * half_elems;
    const int nb0 = min(kRegRows, sq.n_acc);
    if (nb0 > 0) {
      load_head_rows<kDk, true, false, kRegRows>(p, m, fold_base, -1, false, 0, nb0, h, hk, a_decay,
                                                 dt_bias);
    }
    cuda::mbar_wait(m.full, phase);
    phase ^= 1;
    float2 s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      s[r] = *reinterpret_cast<const float2*>(m.S + (part * kR + r) * dv + c);
    }
    cuda::fence_proxy_async();
    __syncthreads();
    bool next_live = false;
    const GdrSeq nq = decode_item(p, cur, next_live);
    pending = next_live;
    if (next_live) copy_state(state_of(nq, u + n_blocks));
    const auto no_emit = [](int, float2) {};
    for (int t0 = 0; t0 < sq.n_acc; t0 += kRegRows) {
      const int nb = min(kRegRows, sq.n_acc - t0);
      if (t0 > 0) {
        load_head_rows<kDk, true, false, kRegRows>(p, m, fold_base, -1, false, t0, nb, h, hk,
                                                   a_decay, dt_bias);
      }
      chain_rows<kDk, false>(m, s, dvi, part, c, nb, no_emit);
      __syncthreads();  // the row buffers are rewritten by the next rows
    }
    if (sq.n_acc > 0) {  // the folded state back to its slot, by each thread's own slice
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        *reinterpret_cast<float2*>(state + (part * kR + r) * dv + c) = s[r];
      }
    }
    if (!waited) {
      cuda::pdl_begin();
      waited = true;
    }
    // The call's rows: outputs (and norm); their raw k (one value head per key head), v, a, b
    // into replay half `parity`. Their states stay in registers and are dropped.
    const int64_t sink = (sq.slot * 2 + sq.parity) * half_elems;
    const bool own_k = h % (p.hv_n / p.hk_n) == 0;
    for (int64_t t0 = 0; t0 < sq.n; t0 += kRegRows) {
      const int nb = static_cast<int>(min(static_cast<int64_t>(kRegRows), sq.n - t0));
      load_head_rows<kDk, false, kNorm, kRegRows>(p, m, sq.r0, sink, own_k, t0, nb, h, hk, a_decay,
                                                  dt_bias);
      chain_rows<kDk, true>(m, s, dvi, part, c, nb, [&](int tb, float2 o) {
        emit_row<kNorm>(p, m, sq.r0 + t0 + tb, h, dvi, part, c, tb, o);
      });
      if constexpr (kNorm) norm_rows(p, m, sq.r0 + t0, h, dvi, part, c, nb, norm_w0, norm_w1);
      __syncthreads();  // the row buffers are rewritten by the next rows
    }
  }
  if (!waited) cuda::pdl_begin();
}

template <int kDk, int kDv, bool kNorm>
void launch_regs(const GdrParams& p, cudaStream_t s) {
  const int threads = static_cast<int>(2 * p.dv);
  const size_t smem =
      static_cast<size_t>(head_smem_floats(kDk, p.dv, p.hv_n, kRegRingSlots, kRegRows)) *
      sizeof(float);
  static std::atomic<int64_t> key{-1}, resident{0};  // blocks resident at once, per size
  const int64_t k = static_cast<int64_t>(smem) * 1024 + threads;
  if (key.load() != k) {
    cuda::check(
        cudaFuncSetAttribute(gdr_regs_kernel<kDk, kDv, kNorm>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "cudaFuncSetAttribute");
    int per_sm = 0;
    cuda::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                    &per_sm, gdr_regs_kernel<kDk, kDv, kNorm>, threads, smem),
                "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    resident.store(std::max(1, per_sm) * static_cast<int64_t>(cuda::sm_count()));
    key.store(k);
  }
  const int64_t blocks = std::min(resident.load(), p.hv_n * p.n_seqs);
  cuda::launch_pdl(gdr_regs_kernel<kDk, kDv, kNorm>, dim3(static_cast<unsigned>(blocks)), threads,
                   smem, s, p);
  cuda::check_launch("gdr_regs_kernel");
  g_regs_calls.fetch_add(1);
}

}  // namespace

bool gated_delta_rule_set_stream_registers(bool on) { return g_regs.exchange(on); }
int64_t gated_delta_rule_stream_register_calls() { return g_regs_calls.load(); }
bool gdr_regs_on() { return g_regs.load(); }

bool gdr_regs_launch(const GdrParams& p, int64_t d_k, int64_t max_rows, cudaStream_t s) {
  // Several rows per sequence, the streaming kernel's shapes (d_v 64 or 128, d_k 64 or 128 <=
  // d_v: 2 d_v threads load 4 rows' q and k).
  if (!g_regs.load() || !p.recurrent || max_rows < 2 || (d_k != 64 && d_k != 128) ||
      p.dv % 64 != 0 || p.dv > kRegThreads / 2 || d_k > p.dv || p.hv_n > kRegMaxHeads) {
    return false;
  }
  const bool norm = p.norm_out != nullptr;
  if (d_k == 64 && p.dv == 64)
    norm ? launch_regs<64, 64, true>(p, s) : launch_regs<64, 64, false>(p, s);
  if (d_k == 64 && p.dv == 128)
    norm ? launch_regs<64, 128, true>(p, s) : launch_regs<64, 128, false>(p, s);
  if (d_k == 128) norm ? launch_regs<128, 128, true>(p, s) : launch_regs<128, 128, false>(p, s);
  return true;
}

}  // namespace tandem::kernels
