// CUDA gated paged attention for decode, verify and prefill: one kernel body for all three.
// attention_split_kernel: one CTA per (split of kAttentionSplitGranule positions, kv head, block of
//   up to kMaxRows query rows); the rows are all (token, q head) pairs of that kv head, so a KV
//   tile is read once for every row (DESIGN.md section 4). K and V tiles of 32 positions stream
//   through shared memory with a two-stage cp.async pipeline; the split's scores are kept whole in
//   shared memory, so its softmax is exact (no in-split rescaling). It writes the unnormalised
//   partial output, max and sum of every (row, split).
// attention_merge_kernel: per row, merges the splits in increasing order with log-sum-exp, then
//   applies the sigmoid gate. A row's bits depend only on its own inputs and position: never on
//   n_tokens, on which CTA or row block it sat in, or on kv_len beyond its causal limit.
// Prefill is the same pair of kernels over chunks of query tokens (correct, CUDA cores; not fast).
#include <algorithm>
#include <cmath>

#include "kernels/attention/attention.h"
#include "kernels/cuda_common.cuh"

namespace tandem::kernels {

namespace {

constexpr int kGranule = static_cast<int>(kAttentionSplitGranule);
constexpr int kTile = 32;      // positions per shared-memory tile
constexpr int kThreads = 256;  // 8 warps
constexpr int kMaxRows = 64;   // query rows per CTA: 8 warps x at most 8 rows each
constexpr int64_t kFallbackWorkspaceBytes = int64_t{256} << 20;

struct AttnParams {
  const __nv_bfloat16 *q, *gate;  // already offset to the launch's first token
  int64_t q_s0, q_s1, g_s0, g_s1;
  const __nv_bfloat16 *k_cache, *v_cache;
  const int32_t* block_table;
  int64_t capacity, block_size;
  const int32_t* kv_len;
  __nv_bfloat16* out;
  int64_t out_s0, out_s1;
  float* part_o;            // [rows, max_splits, d]
  float* part_ml;           // [rows, max_splits, 2]
  int64_t n_total, q0, nq;  // all query tokens of the call, first token and tokens of this launch
  int hq, hkv, group, max_splits;
  float scale;
};

__device__ __forceinline__ int64_t device_kv_len(const AttnParams& p) {
  const int64_t l = p.kv_len[0];
  return l < p.capacity ? l : p.capacity;
}
// Last position visible to local token t (causal, bottom-right aligned).
__device__ __forceinline__ int64_t last_pos(const AttnParams& p, int64_t kv_len, int64_t t) {
  return kv_len - p.n_total + p.q0 + t;
}

// Pipeline depth (K/V tiles in flight) by rows per warp: fewer rows leave more shared memory for
// the tile ring. The depth never changes the arithmetic, only how far loads run ahead.
template <int kRows>
constexpr int kStages = kRows <= 2 ? 8 : (kRows == 4 ? 4 : 3);

template <int kD>
struct Smem {
  static constexpr int kLd = kD + 8;  // bf16 row stride: 16-byte aligned, conflict-free 16B reads
  static size_t bytes(int rows, int stages) {
    return static_cast<size_t>(rows) * kLd * 2 + static_cast<size_t>(stages) * kTile * kLd * 2 +
           static_cast<size_t>(rows) * kGranule * 4 + static_cast<size_t>(rows) * 8 + kGranule * 4;
  }
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0));
}

// Issues the cp.async loads of one 32-position tile of K or V starting at split offset `off`;
// slot_s holds each split position's cache slot (-1: not loaded, reads as 0), resolved once per
// split so that no block-table load sits between two tiles.
template <int kD>
__device__ __forceinline__ void load_kv_tile(__nv_bfloat16* dst, const __nv_bfloat16* cache,
                                             const AttnParams& p, int hk, const int32_t* slot_s,
                                             int off) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per position
  for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
    const int j = c / kChunks, e = (c % kChunks) * 8;
    const int32_t slot = slot_s[off + j];
    const bool valid = slot >= 0;
    const __nv_bfloat16* src = cache;
    if (valid) src = cache + (static_cast<int64_t>(slot) * p.hkv + hk) * kD + e;
    cp_async16(dst + j * Smem<kD>::kLd + e, src, valid);
  }
}

// kRows: rows per warp (rows r = warp + 8 i), so at most 8 * kRows rows per CTA.
template <int kD, int kRows>
__global__ void __launch_bounds__(kThreads, 1) attention_split_kernel(AttnParams p) {
  constexpr int kLd = Smem<kD>::kLd;
  constexpr int kE = kD / 32;  // output dims per lane in the PV phase
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int split = blockIdx.x, hk = blockIdx.y;
  const int rows_per_head = static_cast<int>(p.nq) * p.group;
  const int row0 = blockIdx.z * (8 * kRows);
  const int n_rows = min(8 * kRows, rows_per_head - row0);
  const int64_t kv_len = device_kv_len(p);
  const int64_t pos0 = static_cast<int64_t>(split) * kGranule;
  const int64_t block_last = last_pos(p, kv_len, (row0 + n_rows - 1) / p.group);
  if (pos0 > block_last) return;  // no row of this block sees this split
  const int64_t end = min(kv_len, min(pos0 + kGranule, block_last + 1));
  const int n_tiles = static_cast<int>((end - pos0 + kTile - 1) / kTile);

  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  constexpr int kDepth = kStages<kRows>;
  auto* kv_s = q_s + 8 * kRows * kLd;                                 // [kDepth][kTile][kLd]
  auto* s_s = reinterpret_cast<float*>(kv_s + kDepth * kTile * kLd);  // [rows][kGranule]
  float* m_s = s_s + 8 * kRows * kGranule;
  float* l_s = m_s + 8 * kRows;
  auto* slot_s = reinterpret_cast<int32_t*>(l_s + 8 * kRows);  // [kGranule]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  for (int c = threadIdx.x; c < n_rows * (kD / 8); c += kThreads) {  // this block's q rows
    const int r = c / (kD / 8), e = (c % (kD / 8)) * 8;
    const int rr = row0 + r, t = rr / p.group, h = hk * p.group + rr % p.group;
    *reinterpret_cast<uint4*>(q_s + r * kLd + e) =
        *reinterpret_cast<const uint4*>(p.q + t * p.q_s0 + h * p.q_s1 + e);
  }
  for (int j = threadIdx.x; j < kGranule; j += kThreads) {
    const int64_t pos = pos0 + j;
    slot_s[j] = pos < end ? static_cast<int32_t>(p.block_table[pos / p.block_size] * p.block_size +
                                                 pos % p.block_size)
                          : -1;
  }
  __syncthreads();
  int64_t last[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + 8 * i;
    last[i] = r < n_rows ? last_pos(p, kv_len, (row0 + r) / p.group) : -1;
  }

  float acc[kRows][kE];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[i][e] = 0.f;
  }
  // Tiles 0..n_tiles-1 are K, then n_tiles..2 n_tiles-1 are V, streamed through a ring of kDepth
  // buffers: tile i + kDepth - 1 is issued while tile i is used (one commit group per tile, empty
  // groups past the end keep the wait count uniform).
  const int n_seq = 2 * n_tiles;
  auto issue = [&](int i) {
    if (i < n_seq) {
      const bool is_k = i < n_tiles;
      load_kv_tile<kD>(kv_s + (i % kDepth) * kTile * kLd, is_k ? p.k_cache : p.v_cache, p, hk,
                       slot_s, (is_k ? i : i - n_tiles) * kTile);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
#pragma unroll
  for (int i = 0; i < kDepth - 1; ++i) issue(i);
  for (int it = 0; it < n_seq; ++it) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kDepth - 2));
    __syncthreads();  // tile it is visible to all; buffer (it - 1) % kDepth is free again
    issue(it + kDepth - 1);
    const __nv_bfloat16* tile_s = kv_s + (it % kDepth) * kTile * kLd;
    if (it < n_tiles) {  // S = q k^T * scale for position pos0 + it*32 + lane
      const int off = it * kTile + lane;
      const int64_t pos = pos0 + off;
      float dot[kRows][4];  // 4 interleaved partial sums per row, combined in a fixed order
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
#pragma unroll
        for (int u = 0; u < 4; ++u) dot[i][u] = 0.f;
      }
#pragma unroll 4
      for (int e = 0; e < kD; e += 8) {
        const uint4 kraw = *reinterpret_cast<const uint4*>(tile_s + lane * kLd + e);
        const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&kraw);
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          if (warp + 8 * i >= n_rows) break;
          const uint4 qraw = *reinterpret_cast<const uint4*>(q_s + (warp + 8 * i) * kLd + e);
          const __nv_bfloat162* q2 = reinterpret_cast<const __nv_bfloat162*>(&qraw);
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float2 qf = __bfloat1622float2(q2[u]), kf = __bfloat1622float2(k2[u]);
            dot[i][u] = fmaf(qf.x, kf.x, dot[i][u]);
            dot[i][u] = fmaf(qf.y, kf.y, dot[i][u]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int r = warp + 8 * i;
        const float d = (dot[i][0] + dot[i][1]) + (dot[i][2] + dot[i][3]);
        if (r < n_rows) s_s[r * kGranule + off] = pos <= last[i] ? d * p.scale : -INFINITY;
      }
      if (it == n_tiles - 1) {  // exact softmax of the split, one warp per row
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          const int r = warp + 8 * i;
          if (r >= n_rows) break;
          float* srow = s_s + r * kGranule;
          float m = -INFINITY;
          for (int jj = lane; jj < n_tiles * kTile; jj += 32) m = fmaxf(m, srow[jj]);
          m = cuda::warp_max(m);
          float l = 0.f;
          for (int jj = lane; jj < n_tiles * kTile; jj += 32) {
            const float e = m == -INFINITY ? 0.f : expf(srow[jj] - m);
            srow[jj] = e;
            l += e;
          }
          l = cuda::warp_sum(l);
          if (lane == 0) {
            m_s[r] = m;
            l_s[r] = l;
          }
        }
      }
    } else {  // O += P V over the tile's 32 positions
      const int off = (it - n_tiles) * kTile;
#pragma unroll 4
      for (int j = 0; j < kTile; ++j) {
        float v[kE];
        const __nv_bfloat162* v2 =
            reinterpret_cast<const __nv_bfloat162*>(tile_s + j * kLd + lane * kE);
#pragma unroll
        for (int u = 0; u < kE / 2; ++u) {
          const float2 f = __bfloat1622float2(v2[u]);
          v[2 * u] = f.x;
          v[2 * u + 1] = f.y;
        }
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          if (warp + 8 * i >= n_rows) break;
          const float pj = s_s[(warp + 8 * i) * kGranule + off + j];
#pragma unroll
          for (int e = 0; e < kE; ++e) acc[i][e] = fmaf(pj, v[e], acc[i][e]);
        }
      }
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = warp + 8 * i;
    if (r >= n_rows) break;
    const int rr = row0 + r, t = rr / p.group, h = hk * p.group + rr % p.group;
    const int64_t row = static_cast<int64_t>(t) * p.hq + h;
    float* o = p.part_o + (row * p.max_splits + split) * kD + lane * kE;
#pragma unroll
    for (int e = 0; e < kE; ++e) o[e] = acc[i][e];
    if (lane == 0) {
      p.part_ml[(row * p.max_splits + split) * 2] = m_s[r];
      p.part_ml[(row * p.max_splits + split) * 2 + 1] = l_s[r];
    }
  }
}

// One block per (token, q head) row, one thread per output dim. The row's split maxima and sums
// are staged in shared memory; with M = max of the maxima (exact, order-free), the output is
// sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M), both sums in increasing split order. The partial
// outputs of different splits are independent loads, so they stream instead of chaining.
template <int kD>
__global__ void __launch_bounds__(kD) attention_merge_kernel(AttnParams p) {
  extern __shared__ float merge_s[];  // [max_splits] scale factors, then [1] 1/L
  const int64_t row = blockIdx.x, t = row / p.hq, h = row % p.hq;
  const int e = threadIdx.x;
  const int64_t kv_len = device_kv_len(p);
  const int64_t last = last_pos(p, kv_len, t);
  const int n_splits = last < 0 ? 0 : static_cast<int>(last / kGranule + 1);
  const float* ml = p.part_ml + row * p.max_splits * 2;
  if (e == 0) {
    float m = -INFINITY;
    for (int s = 0; s < n_splits; ++s) m = ml[2 * s + 1] > 0.f ? fmaxf(m, ml[2 * s]) : m;
    float l = 0.f;
    for (int s = 0; s < n_splits; ++s) {
      const float f = ml[2 * s + 1] > 0.f ? expf(ml[2 * s] - m) : 0.f;
      merge_s[s] = f;
      l += ml[2 * s + 1] * f;
    }
    merge_s[p.max_splits] = l > 0.f ? 1.f / l : 0.f;
  }
  __syncthreads();
  const float* po = p.part_o + row * p.max_splits * kD + e;
  float o = 0.f;
#pragma unroll 8
  for (int s = 0; s < n_splits; ++s) o = fmaf(po[static_cast<int64_t>(s) * kD], merge_s[s], o);
  float y = o * merge_s[p.max_splits];
  if (p.gate != nullptr) y *= cuda::sigmoid(__bfloat162float(p.gate[t * p.g_s0 + h * p.g_s1 + e]));
  p.out[t * p.out_s0 + h * p.out_s1 + e] = __float2bfloat16_rn(y);
}

template <int kD, int kRows>
void launch_split(const AttnParams& p, int rows_per_head, cudaStream_t s) {
  static_assert(kThreads / 32 * kRows <= kMaxRows, "rows per CTA");
  const size_t smem = Smem<kD>::bytes(8 * kRows, kStages<kRows>);
  auto* kernel = attention_split_kernel<kD, kRows>;
  // The shared-memory opt-in is fixed per instantiation, so it is made once per process rather
  // than on every launch. Assumes one device per process (the attribute is per device).
  static const cudaError_t opted_in = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  cuda::check(opted_in, "cudaFuncSetAttribute(attention_split_kernel)");
  const dim3 grid(p.max_splits, p.hkv, cuda::ceil_div(rows_per_head, 8 * kRows));
  kernel<<<grid, kThreads, smem, s>>>(p);
  cuda::check_launch("attention_split_kernel");
}

template <int kD>
void launch(const AttnParams& p, cudaStream_t s) {
  const int rows = static_cast<int>(p.nq) * p.group;  // rows per kv head in this launch
  if (rows <= 8) {
    launch_split<kD, 1>(p, rows, s);
  } else if (rows <= 16) {
    launch_split<kD, 2>(p, rows, s);
  } else if (rows <= 32) {
    launch_split<kD, 4>(p, rows, s);
  } else {
    launch_split<kD, 8>(p, rows, s);
  }
  const size_t merge_smem = (static_cast<size_t>(p.max_splits) + 1) * 4;
  auto* merge = attention_merge_kernel<kD>;
  TANDEM_CHECK(merge_smem <= 48 * 1024, "attention_cuda: {} splits exceed the merge kernel's limit",
               p.max_splits);
  merge<<<static_cast<unsigned>(p.nq * p.hq), kD, merge_smem, s>>>(p);
  cuda::check_launch("attention_merge_kernel");
}

}  // namespace

bool attention_cuda_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

void attention_cuda(const AttentionArgs& a, const ExecContext& ctx) {
  const char* op = "attention";
  cuda::expect_cuda_dtype(a.q, DType::kBF16, op, "q");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, op, "out");
  cuda::expect_cuda_dtype(a.k_cache, DType::kBF16, op, "k_cache");
  cuda::expect_cuda_dtype(a.v_cache, DType::kBF16, op, "v_cache");
  cuda::expect_cuda_dtype(a.block_table, DType::kI32, op, "block_table");
  cuda::expect_cuda_dtype(a.kv_len, DType::kI32, op, "kv_len");
  cuda::expect_last_contiguous(a.q, op, "q");
  cuda::expect_last_contiguous(a.out, op, "out");
  const bool gated = a.gate.raw() != nullptr;
  if (gated) {
    cuda::expect_cuda_dtype(a.gate, DType::kBF16, op, "gate");
    cuda::expect_last_contiguous(a.gate, op, "gate");
    TANDEM_CHECK(a.gate.shape() == a.q.shape(), "attention_cuda: gate {} vs q {}",
                 a.gate.describe(), a.q.describe());
  }
  const int64_t n = a.q.dim(0), hq = a.q.dim(1), d = a.q.dim(2);
  const int64_t block_size = a.k_cache.dim(1), hkv = a.k_cache.dim(2);
  TANDEM_CHECK(a.k_cache.is_contiguous() && a.v_cache.is_contiguous() &&
                   a.k_cache.shape() == a.v_cache.shape() && a.k_cache.dim(3) == d &&
                   hq % hkv == 0 && a.out.shape() == a.q.shape(),
               "attention_cuda: q {} out {} k_cache {} v_cache {} do not agree", a.q.describe(),
               a.out.describe(), a.k_cache.describe(), a.v_cache.describe());
  TANDEM_CHECK(attention_cuda_supports(d),
               "attention_cuda: head_dim {} unsupported for dtype bf16 on cuda (64, 128, 256)", d);
  TANDEM_CHECK(a.q.stride(1) % 8 == 0 && a.q.stride(0) % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(a.q.raw()) % 16 == 0,
               "attention_cuda: q strides {} must be multiples of 8 and q 16-byte aligned",
               shape_str(a.q.strides()));
  if (n == 0) return;
  AttnParams p{};
  p.q_s0 = a.q.stride(0), p.q_s1 = a.q.stride(1);
  p.g_s0 = gated ? a.gate.stride(0) : 0, p.g_s1 = gated ? a.gate.stride(1) : 0;
  p.k_cache = a.k_cache.data<const __nv_bfloat16>();
  p.v_cache = a.v_cache.data<const __nv_bfloat16>();
  p.block_table = a.block_table.data<const int32_t>();
  p.block_size = block_size;
  p.capacity = a.block_table.dim(0) * block_size;
  p.kv_len = a.kv_len.data<const int32_t>();
  p.out_s0 = a.out.stride(0), p.out_s1 = a.out.stride(1);
  p.n_total = n;
  p.hq = static_cast<int>(hq);
  p.hkv = static_cast<int>(hkv);
  p.group = static_cast<int>(hq / hkv);
  p.max_splits = static_cast<int>((p.capacity + kGranule - 1) / kGranule);
  p.scale = a.scale > 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(d));
  const int64_t floats_per_token = attention_workspace_floats(1, hq, d, p.capacity);
  const cudaStream_t s = cuda::stream_of(ctx);
  float* ws = nullptr;
  int64_t ws_floats = 0;
  void* owned = nullptr;
  if (a.workspace.raw() != nullptr) {
    cuda::expect_cuda_dtype(a.workspace, DType::kF32, op, "workspace");
    ws = a.workspace.data<float>();
    ws_floats = a.workspace.numel();
  } else {
    ws_floats =
        std::min(n * floats_per_token, std::max(floats_per_token, kFallbackWorkspaceBytes / 4));
    TANDEM_CUDA_CHECK(cudaMallocAsync(&owned, static_cast<size_t>(ws_floats) * 4, s));
    ws = static_cast<float*>(owned);
  }
  TANDEM_CHECK(ws_floats >= floats_per_token,
               "attention_cuda: workspace {} holds fewer than the {} floats one token needs",
               a.workspace.describe(), floats_per_token);
  // Decode and verify (n <= 16) always fit in one launch when the workspace is sized for n.
  const int64_t chunk = std::min(n, ws_floats / floats_per_token);
  for (int64_t q0 = 0; q0 < n; q0 += chunk) {
    p.q0 = q0;
    p.nq = std::min(chunk, n - q0);
    p.q = a.q.data<const __nv_bfloat16>() + q0 * p.q_s0;
    p.gate = gated ? a.gate.data<const __nv_bfloat16>() + q0 * p.g_s0 : nullptr;
    p.out = a.out.data<__nv_bfloat16>() + q0 * p.out_s0;
    p.part_o = ws;
    p.part_ml = ws + p.nq * hq * p.max_splits * d;
    if (d == 64) launch<64>(p, s);
    if (d == 128) launch<128>(p, s);
    if (d == 256) launch<256>(p, s);
  }
  if (owned != nullptr) TANDEM_CUDA_CHECK(cudaFreeAsync(owned, s));
}

}  // namespace tandem::kernels
