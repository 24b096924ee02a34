// CUDA gated delta rule, the token recurrence over many sequences (kRecurrent calls of
// gdr_stream_min_seqs or more sequences). The per-sequence grid (gated_delta_rule_cuda.cu) gives
// each (value-column block, value head, sequence) its own block, which holds its 16 KB slice of
// the state in registers through a chain of dependent steps (metadata, state, fold rows, current
// rows, the norm's cluster barriers): with 5 blocks per SM that kept ~80 KB of state per SM in
// flight only part of the time, and 256 sequences of the 27B shape read and wrote their 1.6 GB
// per layer at 1.7 TB/s (946 us per layer, a quarter of the step).
// Here a grid that fits the GPU at once walks the items (value head, sequence) in a fixed order:
// group g (a cluster of the column blocks when the norm is fused) takes items g, g + G, ...
// While a block works on one item, the bulk-copy engine already brings the next item's state
// slice (d_k rows of up to 128 bytes) into shared memory, and the item after that has its
// metadata loaded. The work on an item is the per-sequence kernel's, through the same functions
// (gated_delta_rule_rows_cuda.cuh): fold of the accepted rows and write-back, then the call's
// rows, outputs, replay rows and fused norm. Same per-token code, so the same bits (tested
// against the per-sequence grid: CudaRowInvariance.GdrStreamMatchesPerSequence).
#include <atomic>

#include "kernels/bulk_copy.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule_rows_cuda.cuh"

namespace tandem::kernels {

namespace {

// Blocks per SM the registers must allow (at most 128 registers): 4 blocks x 16 KB of state slices
// in flight per SM, plus the write-backs.
constexpr int kStreamBlocks = 4;
constexpr int kMaxHeads = 256;  // value heads whose gate parameters a block stages

std::atomic<int64_t> g_stream_min_seqs{8};

// A block's slice of S (d_k rows, 32 columns) in shared memory: row i at float i * kCols, shifted
// by 8 floats per part (i / (d_k / 4)), so that the 4 parts of a column, which read rows d_k / 4
// apart at once, fall in 4 different groups of 8 banks.
template <int kDk>
constexpr int slice_floats() {
  return kDk * kCols + (kParts - 1) * 8;
}
template <int kDk>
__device__ __forceinline__ int slice_at(int i) {
  return i * kCols + (i / (kDk / kParts)) * 8;
}

// One item's metadata as loaded (decoded only when used, so that the loads stay in flight).
struct ItemLoad {
  int32_t rs0, rs1, slot, n_acc, parity;
};

__device__ __forceinline__ ItemLoad load_item(const GdrParams& p, int64_t u, int64_t items) {
  ItemLoad l{0, 0, -1, 0, 0};
  if (u < items) {
    const int64_t s = u / p.hv_n;
    l.rs0 = gdr_ld_cg(p.row_start + s);
    l.rs1 = gdr_ld_cg(p.row_start + s + 1);
    l.slot = gdr_ld_cg(p.slot + s);
    l.n_acc = gdr_ld_cg(p.n_acc + s);
    l.parity = gdr_ld_cg(p.parity + s);
  }
  return l;
}

// gdr_seq's clamps, on loaded values: an item is live if its slot is in the pool and it has rows
// or rows to fold (a graph bucket's padding touches nothing).
__device__ __forceinline__ GdrSeq decode_item(const GdrParams& p, const ItemLoad& l, bool& live) {
  GdrSeq q;
  const int64_t a = l.rs0, b = l.rs1;
  q.r0 = a < 0 ? 0 : (a > p.n_rows ? p.n_rows : a);
  const int64_t r1 = b < q.r0 ? q.r0 : (b > p.n_rows ? p.n_rows : b);
  q.n = r1 - q.r0;
  q.slot = l.slot;
  q.ok = q.slot >= 0 && q.slot < p.n_slots;
  q.n_acc = l.n_acc < 0 ? 0 : (l.n_acc > p.replay_rows ? static_cast<int>(p.replay_rows) : l.n_acc);
  q.parity = l.parity & 1;
  live = q.ok && (q.n > 0 || q.n_acc > 0);
  return q;
}

// Thread 0 has expected the bytes on `full`; every thread copies rows i = tid, tid + 128, ...
template <int kDk>
__device__ __forceinline__ void copy_slice(const GdrParams& p, int64_t slot, int64_t h,
                                           int64_t col_base, uint32_t row_bytes, float* slice,
                                           uint64_t* full) {
  const float* src = p.state + (slot * p.hv_n + h) * kDk * p.dv + col_base;
  for (int i = threadIdx.x; i < kDk; i += kThreads) {
    cuda::bulk_copy(slice + slice_at<kDk>(i), src + i * p.dv, row_bytes, full);
  }
}

template <int kDk, bool kNorm>
__global__ void __launch_bounds__(kThreads, kStreamBlocks) gdr_stream_kernel(GdrParams p) {
  constexpr int kRowsPerThread = kDk / kParts;
  __shared__ BatchSmem<kDk> b;
  __shared__ alignas(128) float slice[slice_floats<kDk>()];
  __shared__ float psum[2][kBatch][kMaxNormBlocks];
  __shared__ float head_decay[kMaxHeads], head_dt[kMaxHeads];
  __shared__ uint64_t full;
  // kNorm: the first remote shared-memory write waits until every block of the cluster has
  // started (this arrival's phase completes); the wait comes right after the PDL wait.
  if constexpr (kNorm) cg::this_cluster().barrier_arrive();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane & (kParts - 1);
  const int64_t col_blocks = (p.dv + kCols - 1) / kCols;
  // Block x of a group holds column block x (the cluster's rank under kNorm).
  const int64_t cb = blockIdx.x % col_blocks, group = blockIdx.x / col_blocks;
  const int64_t n_groups = gridDim.x / col_blocks, items = p.hv_n * p.n_seqs;
  const int jl = warp * (32 / kParts) + lane / kParts;  // column within the block
  const int64_t col_base = cb * kCols, j = col_base + jl;
  const bool col_ok = j < p.dv;
  const int js = col_ok ? jl : 0;  // inactive columns compute on the slice's column 0
  const int64_t jc = col_ok ? j : 0;
  const uint32_t row_bytes =
      static_cast<uint32_t>(min(static_cast<int64_t>(kCols), p.dv - col_base)) * 4u;
  const uint32_t slice_bytes = row_bytes * kDk;
  const int64_t head_elems = static_cast<int64_t>(kDk) * p.dv;
  const int64_t half_elems = p.replay_rows * p.replay_width;
  const float norm_w = kNorm ? p.norm_w[jc] : 0.f;
  for (int64_t h = threadIdx.x; h < p.hv_n; h += kThreads) {
    head_decay[h] = expf(p.a_log[h]);
    head_dt[h] = p.dt_bias[h];
  }
  if (threadIdx.x == 0) {
    cuda::mbar_init(&full, 1);
    cuda::fence_mbar_init();
  }
  // Before the wait for the predecessor: the first item's metadata, state slice and fold (only
  // this op writes the state and the replay buffer, two or more launches back; cuda_common.cuh).
  bool live = false, next_live = false;
  GdrSeq sq = decode_item(p, load_item(p, group, items), live);
  if (threadIdx.x == 0 && live) cuda::mbar_arrive_expect_tx(&full, slice_bytes);
  __syncthreads();  // the barrier is initialised, the head parameters staged
  if (live) copy_slice<kDk>(p, sq.slot, group % p.hv_n, col_base, row_bytes, slice, &full);
  ItemLoad next = load_item(p, group + n_groups, items);
  uint32_t phase = 0;
  int pbuf = 0;
  bool waited = false;  // past the PDL wait (and the cluster's start)
  for (int64_t u = group; u < items; u += n_groups) {
    const GdrSeq nsq = decode_item(p, next, next_live);
    const int64_t h = u % p.hv_n, nh = (u + n_groups) % p.hv_n;
    float s[kRowsPerThread];  // rows i = part * kRowsPerThread + r of S[:, j]
    if (live) {
      cuda::mbar_wait(&full, phase);
      phase ^= 1;
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        s[r] = slice[slice_at<kDk>(part * kRowsPerThread + r) + js];
      }
    }
    if (threadIdx.x == 0 && next_live) cuda::mbar_arrive_expect_tx(&full, slice_bytes);
    __syncthreads();  // the slice is read: the next item's copy may land
    if (next_live) copy_slice<kDk>(p, nsq.slot, nh, col_base, row_bytes, slice, &full);
    next = load_item(p, u + 2 * n_groups, items);
    if (live) {
      const int64_t hk = h / (p.hv_n / p.hk_n);
      float* const state = p.state + sq.slot * p.hv_n * head_elems + h * head_elems + jc;
      const float a_decay = head_decay[h], dt_bias = head_dt[h];
      const ColumnAt c{h, hk, col_base, j, jl, part, col_ok};
      if (sq.n_acc > 0) {
        fold_rows<kDk>(p, b, s, sq, c, a_decay, dt_bias);
        if (col_ok) {
#pragma unroll
          for (int r = 0; r < kRowsPerThread; ++r) {
            state[(part * kRowsPerThread + r) * p.dv] = s[r];
          }
        }
      }
      if (!waited) {
        cuda::pdl_begin();
        if constexpr (kNorm) cg::this_cluster().barrier_wait();
        waited = true;
      }
      // The call's rows; their raw k/v/a/b go to replay half `parity`, each byte from one block
      // (as in the per-sequence kernel).
      const BatchAt at{sq.r0, (sq.slot * 2 + sq.parity) * half_elems,
                       cb == 0 && h % (p.hv_n / p.hk_n) == 0, cb == 0};
      current_rows<kDk, kNorm>(p, b, psum, pbuf, true, s, sq, at, c, a_decay, dt_bias, norm_w);
    }
    sq = nsq;
    live = next_live;
  }
  if (!waited) {
    cuda::pdl_begin();
    if constexpr (kNorm) cg::this_cluster().barrier_wait();
  }
}

// Groups that are resident at once (clusters of the column blocks under kNorm), per kernel and
// column-block count, computed once.
template <int kDk, bool kNorm>
int64_t resident_groups(unsigned col_blocks) {
  static std::atomic<int> cache[kMaxNormBlocks + 1] = {};
  const unsigned key = kNorm ? col_blocks : 0;
  int n = cache[key].load();
  if (n > 0) return n;
  if constexpr (kNorm) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(col_blocks * 64);
    cfg.blockDim = dim3(kThreads);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = col_blocks;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cuda::check(cudaOccupancyMaxActiveClusters(&n, gdr_stream_kernel<kDk, kNorm>, &cfg),
                "cudaOccupancyMaxActiveClusters");
  } else {
    int per_sm = 0;
    cuda::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                    &per_sm, gdr_stream_kernel<kDk, kNorm>, kThreads, 0),
                "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    n = per_sm * cuda::sm_count();  // groups of col_blocks blocks: divided at the call
  }
  n = n > 0 ? n : 1;
  cache[key].store(n);
  return n;
}

template <int kDk, bool kNorm>
void launch_stream(const GdrParams& p, cudaStream_t s) {
  const unsigned col_blocks = cuda::ceil_div(p.dv, kCols);
  int64_t groups = resident_groups<kDk, kNorm>(col_blocks);
  if constexpr (!kNorm) groups = groups / col_blocks > 0 ? groups / col_blocks : 1;
  groups = std::min(groups, p.hv_n * p.n_seqs);
  const dim3 grid(static_cast<unsigned>(groups * col_blocks));
  cuda::launch_pdl_cluster(gdr_stream_kernel<kDk, kNorm>, grid, kThreads, kNorm ? col_blocks : 1, 0,
                           s, p);
  cuda::check_launch("gdr_stream_kernel");
}

template <int kDk>
void launch_stream(const GdrParams& p, cudaStream_t s) {
  if (p.norm_out != nullptr) {
    launch_stream<kDk, true>(p, s);
  } else {
    launch_stream<kDk, false>(p, s);
  }
}

}  // namespace

int64_t gated_delta_rule_set_stream_min_seqs(int64_t n) { return g_stream_min_seqs.exchange(n); }

bool gdr_stream_launch(const GdrParams& p, int64_t d_k, cudaStream_t s) {
  if (!p.recurrent || p.n_seqs < g_stream_min_seqs.load() || p.dv % 4 != 0 || p.hv_n > kMaxHeads ||
      (p.norm_out != nullptr && p.dv > kMaxNormBlocks * kCols)) {
    return false;
  }
  switch (d_k) {
    case 16:
      launch_stream<16>(p, s);
      return true;
    case 32:
      launch_stream<32>(p, s);
      return true;
    case 64:
      launch_stream<64>(p, s);
      return true;
    case 128:
      launch_stream<128>(p, s);
      return true;
    case 256:
      launch_stream<256>(p, s);
      return true;
    default:
      return false;
  }
}

}  // namespace tandem::kernels
