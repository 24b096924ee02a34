// CUDA gated delta rule, the token recurrence over many sequences (kRecurrent calls of
// gated_delta_rule_set_stream_min_seqs(), default 8, or more sequences; d_v 64 or 128, d_k 64 or
// 128 with d_k <= d_v). The per-sequence grid (gated_delta_rule_cuda.cu) keeps
// each 32-column slice of S in the registers of 128 threads: 4-5 blocks per SM, each a chain of
// dependent steps (state, fold rows, current rows, the norm's cluster barriers), so 256 sequences
// of the 27B shape moved their 1.6 GB per layer at 1.7 TB/s (946 us per layer, a quarter of the
// step). A first streaming form with the same blocks and the next slice brought by bulk copies
// while the current one ran was slower (1.55 TB/s): the blocks were bound by their serial phases
// (ncu: copy issue, the fold's and the rows' loads, the cluster barrier, the compute chains each
// 5-14% of the samples), not by the state load.
// Here a block owns a whole value head of one sequence at a time, its state S [d_k, d_v] in shared
// memory (64 KB at 128 x 128): loaded by one bulk copy, folded in place, written back by one bulk
// store, and only read by the last current row. No state in registers, 3 blocks per SM: 24 warps
// whose phases overlap. A resident grid walks the items (value head, sequence): block g takes items
// g, g + G, ...; the fold's rows load while the state is in flight. Per token the thread of (part,
// column pair) runs the per-sequence kernel's arithmetic for each of its two columns: its d_k / 4
// rows in order, then the 4 parts added as (p0 + p1) + (p2 + p3) (what that kernel's butterfly
// gives), through shared memory instead of shuffles; the norm sums each 32 columns by a warp
// butterfly and those in column order. Same bits (CudaRowInvariance.GdrStreamMatchesPerSequence).
#include <fmt/format.h>

#include <atomic>

#include "kernels/bulk_copy.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule_stream_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int kHeadRows = 2;  // rows whose inputs load together
// Blocks per SM: 3 x (64 KB + 8.5 KB (10.5 with pairs' third ring slot) + 1 KB reserved) <= 228 KB.
constexpr int kHeadBlocks = 3;
constexpr int kMaxHeadThreads = 256;  // 2 x d_v: a thread holds 2 columns of one part
constexpr int64_t kMaxHeads = 2048;   // value heads whose gate parameters a block stages

std::atomic<int64_t> g_stream_min_seqs{8};
std::atomic<bool> g_stream_pairs{true};  // gated_delta_rule_set_stream_pairs

// Ring slots of the parts' partial sums: kv and o of a row, and with pairs (below) the second
// row's kv, posted in the same pass as the first row's o.
constexpr int kRingSlots = 2;
constexpr int kPairRingSlots = 3;

// A thread's place in a head item: columns c and c + 1 of part `part`, and their norm weights.
struct HeadThread {
  int dv, part, c;
  float norm_w0, norm_w1;
};

template <bool kNorm>
__device__ __forceinline__ HeadThread head_thread(const GdrParams& p) {
  HeadThread t;
  t.dv = static_cast<int>(p.dv);
  const int half = t.dv / 2, tid = static_cast<int>(threadIdx.x);
  t.part = tid / half;
  t.c = 2 * (tid % half);
  t.norm_w0 = kNorm ? p.norm_w[t.c] : 0.f;
  t.norm_w1 = kNorm ? p.norm_w[t.c + 1] : 0.f;
  return t;
}

// One item (value head h of sequence sq) once its state's bulk copy into m.S has been issued on
// m.full: the fold's rows (the first ones loading while the state is in flight), the wait for the
// state (phase), the folded state back to `state`, the PDL wait (first item), the call's rows
// with their outputs and norm, and their raw k (one value head per key head), v, a, b into replay
// half `parity`. Only a row with a later row stores its state, after the bulk store has read S
// out. store_pending: thread 0's bulk store may still be reading m.S.
template <int kDk, bool kNorm, bool kPairs>
__device__ __forceinline__ void head_item(const GdrParams& p, const HeadSmem& m,
                                          const HeadThread& th, const GdrSeq& sq, int64_t h,
                                          float* state, uint32_t phase, bool& waited,
                                          bool& store_pending) {
  const int tid = threadIdx.x, dvi = th.dv, part = th.part, c = th.c;
  const int64_t hk = h / (p.hv_n / p.hk_n), half_elems = p.replay_rows * p.replay_width;
  const uint32_t state_bytes = static_cast<uint32_t>(kDk * p.dv * 4);
  const float a_decay = m.head_decay[h], dt_bias = m.head_dt[h];
  const int64_t fold_base = (sq.slot * 2 + (1 - sq.parity)) * half_elems;
  fold_head_rows<kDk, kPairs, kHeadRows>(
      m, dvi, part, c, sq.n_acc, phase,
      [&](int t0, int nb) {
        load_head_rows<kDk, true, false, kHeadRows>(p, m, fold_base, -1, false, t0, nb, h, hk,
                                                    a_decay, dt_bias);
      },
      [&] { cuda::bulk_store(state, m.S, state_bytes); }, store_pending);
  if (!waited) {
    cuda::pdl_begin();
    waited = true;
  }
  const int64_t sink = (sq.slot * 2 + sq.parity) * half_elems;
  const bool own_k = h % (p.hv_n / p.hk_n) == 0;
  for (int64_t t0 = 0; t0 < sq.n; t0 += kHeadRows) {
    const int nb = static_cast<int>(min(static_cast<int64_t>(kHeadRows), sq.n - t0));
    load_head_rows<kDk, false, kNorm, kHeadRows>(p, m, sq.r0, sink, own_k, t0, nb, h, hk, a_decay,
                                                 dt_bias);
    const auto emit = [&](int tb, float2 o) {  // row tb's output (and its copy for the norm)
      emit_row<kNorm>(p, m, sq.r0 + t0 + tb, h, dvi, part, c, tb, o);
    };
    if (t0 == 0 && sq.n > 1) {  // the item's first state store comes next
      if (tid == 0 && store_pending) cuda::bulk_wait_read();
      store_pending = false;
      __syncthreads();
    }
    if (kPairs && nb == 2) {
      float2 o_first, o_second;
      head_pair<kDk, true>(m, dvi, part, c, t0 + 2 < sq.n, o_first, o_second);
      emit(0, o_first);
      emit(1, o_second);
    } else {
      for (int tb = 0; tb < nb; ++tb) {
        emit(tb, t0 + tb + 1 < sq.n ? head_token<kDk, true, true>(m, dvi, part, c, tb, 0)
                                    : head_token<kDk, false, true>(m, dvi, part, c, tb, 0));
      }
    }
    if constexpr (kNorm) {  // gated RMSNorm: each 32 columns by a warp, then in column order
      norm_rows(p, m, sq.r0 + t0, h, dvi, part, c, nb, th.norm_w0, th.norm_w1);
    }
    // Every thread's reads and writes of S (generic proxy) before a later bulk copy rewrites it
    // (async proxy): the fence, then the barrier thread 0 passes before copying.
    cuda::fence_proxy_async();
    __syncthreads();  // the row buffers are rewritten by the next rows
  }
}

// kPairs: each two rows loaded together run as head_pair (three passes over S) instead of two
// head_token calls (four); the same bits. One state buffer: an item's state is copied in once the
// previous item's store has read the buffer out.
template <int kDk, bool kNorm, bool kPairs>
__global__ void __launch_bounds__(kMaxHeadThreads, kHeadBlocks) gdr_head_kernel(GdrParams p) {
  extern __shared__ __align__(128) float smem[];
  const int64_t items = p.hv_n * p.n_seqs, head_elems = kDk * p.dv, n_blocks = gridDim.x;
  const HeadSmem m =
      head_smem<kDk>(smem, p.dv, p.hv_n, kPairs ? kPairRingSlots : kRingSlots, kHeadRows);
  const HeadThread th = head_thread<kNorm>(p);
  const uint32_t state_bytes = static_cast<uint32_t>(head_elems * 4);
  head_block_start(p, m);
  uint32_t phase = 0;
  bool waited = false, store_pending = false;  // thread 0 tracks the bulk store
  GdrSeqLoad next = load_item(p, blockIdx.x, items);
  for (int64_t u = blockIdx.x; u < items; u += n_blocks) {
    bool live = false;
    const GdrSeq sq = decode_item(p, next, live);
    next = load_item(p, u + n_blocks, items);
    if (!live) continue;
    const int64_t h = u % p.hv_n;
    float* const state = p.state + (sq.slot * p.hv_n + h) * head_elems;
    // The state (the previous item's store has read it out first). Before the PDL wait for the
    // first item (cuda_common.cuh, pdl_begin).
    if (threadIdx.x == 0) {
      if (store_pending) cuda::bulk_wait_read();
      store_pending = false;
      cuda::mbar_arrive_expect_tx(m.full, state_bytes);
      cuda::bulk_copy(m.S, state, state_bytes, m.full);
    }
    head_item<kDk, kNorm, kPairs>(p, m, th, sq, h, state, phase, waited, store_pending);
    phase ^= 1;
  }
  if (!waited) cuda::pdl_begin();
  if (threadIdx.x == 0 && store_pending) cuda::bulk_wait();
}

bool head_kernel_fits(int64_t dk, int64_t dv) {
  return (dk == 64 || dk == 128) && dv % 64 == 0 && dv <= kMaxHeadThreads / 2 &&
         kHeadRows * dk <= 2 * dv;
}

// Blocks resident at once, per kernel and shared-memory size (computed once for each kernel).
template <auto kKernel>
int64_t resident_blocks(int threads, size_t smem) {
  static std::atomic<int64_t> key{-1}, blocks{0};
  const int64_t k = static_cast<int64_t>(smem) * 1024 + threads;
  if (key.load() == k) return blocks.load();
  cuda::check(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(smem)),
              "cudaFuncSetAttribute");
  int per_sm = 0;
  cuda::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, threads, smem),
              "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  const int64_t n = std::max(1, per_sm) * static_cast<int64_t>(cuda::sm_count());
  blocks.store(n);
  key.store(k);
  return n;
}

template <auto kKernel>
void launch_resident(const char* name, const GdrParams& p, size_t smem, cudaStream_t s) {
  const int threads = static_cast<int>(2 * p.dv);
  const int64_t blocks = std::min(resident_blocks<kKernel>(threads, smem), p.hv_n * p.n_seqs);
  cuda::launch_pdl(kKernel, dim3(static_cast<unsigned>(blocks)), threads, smem, s, p);
  cuda::check_launch(name);
}

template <int kDk, bool kNorm>
void launch_head_form(const GdrParams& p, cudaStream_t s) {
  const auto smem = [&](int64_t floats) { return static_cast<size_t>(floats) * sizeof(float); };
  if (!g_stream_pairs.load()) {
    return launch_resident<gdr_head_kernel<kDk, kNorm, false>>(
        "gdr_head_kernel", p, smem(head_smem_floats(kDk, p.dv, p.hv_n, kRingSlots, kHeadRows)), s);
  }
  launch_resident<gdr_head_kernel<kDk, kNorm, true>>(
      "gdr_head_kernel", p, smem(head_smem_floats(kDk, p.dv, p.hv_n, kPairRingSlots, kHeadRows)),
      s);
}

template <int kDk>
void launch_head(const GdrParams& p, cudaStream_t s) {
  p.norm_out != nullptr ? launch_head_form<kDk, true>(p, s) : launch_head_form<kDk, false>(p, s);
}

}  // namespace

int64_t gated_delta_rule_set_stream_min_seqs(int64_t n) { return g_stream_min_seqs.exchange(n); }
bool gated_delta_rule_set_stream_pairs(bool on) { return g_stream_pairs.exchange(on); }

std::string gated_delta_rule_cuda_paths(int64_t d_k, int64_t d_v) {
  const int64_t from = g_stream_min_seqs.load();
  if (!head_kernel_fits(d_k, d_v)) {
    return fmt::format(
        "gated delta rule: decode/verify on the per-sequence grid (state {}x{} outside the "
        "streaming kernel's shapes); prefill chunks in the chunked (WY) form",
        d_k, d_v);
  }
  return fmt::format(
      "gated delta rule: decode/verify of 1-{} sequences on the per-sequence grid, {}+ on the "
      "streaming kernel (a value head per block, state in shared memory{}); prefill chunks in "
      "the chunked (WY) form",
      from - 1, from,
      gdr_regs_on()           ? "; calls of 2+ rows a sequence with the state in registers"
      : g_stream_pairs.load() ? ", row pairs in 3 passes"
                              : "");
}

bool gdr_stream_launch(const GdrParams& p, int64_t d_k, int64_t max_rows, cudaStream_t s) {
  if (!p.recurrent || p.n_seqs < g_stream_min_seqs.load() || !head_kernel_fits(d_k, p.dv) ||
      p.hv_n > kMaxHeads) {
    return false;
  }
  if (gdr_regs_launch(p, d_k, max_rows, s)) return true;
  if (d_k == 64) launch_head<64>(p, s);
  if (d_k == 128) launch_head<128>(p, s);
  return true;
}

}  // namespace tandem::kernels
