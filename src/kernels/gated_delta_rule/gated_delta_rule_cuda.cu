// CUDA gated delta rule. One block per (value head, 32 value columns); in a block each column j
// is held by 4 threads, each owning d_k/4 rows of S[:, j] in fp32 registers for the whole call.
// The state is loaded before the wait for the previous kernel; the inputs of up to 4 tokens are
// loaded together after it, and q and k L2-normalised per token by one warp (fixed order). Then,
// token after token, every thread decays its rows, forms partial dot products in row order and
// combines the 4 parts with a fixed butterfly. The arithmetic of a token never depends on how many
// tokens share the call, so a verify's state columns equal a token-by-token run bit for bit
// (DESIGN.md inv. 2, 3). kRecurrent writes the state after token t into column t. kChunked runs
// the WY form (gated_delta_rule_chunked_cuda.cu) and falls back to this recurrence over the whole
// prompt, final state into column 0, for what that does not cover. n_acc is read on the device
// (graph-safe). With an output norm (GdrOutputNorm) and d_v <= 128, a value head's blocks form a
// cluster that also writes each token's gated RMSNorm, the sums of squares shared through DSMEM
// once per batch: one launch fewer per GDN layer, bit for bit the separate op.
#include <cooperative_groups.h>

#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"
#include "kernels/gated_rms_norm/gated_rms_norm.h"

namespace tandem::kernels {

namespace {

constexpr int kParts = 4;  // threads per value column
constexpr int kCols = 32;  // value columns per block
constexpr int kThreads = kParts * kCols;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxNormBlocks = 4;  // the fused output norm takes d_v <= 4 * kCols
// Tokens whose inputs are loaded together. Small, so that the block's shared memory (5.6 KB at
// d_k 128) leaves room for the next decode linear's block (214 KB) on the same SM: it then starts
// streaming its weights while this kernel runs (programmatic dependent launch).
constexpr int kBatch = 4;

namespace cg = cooperative_groups;

}  // namespace

bool gated_delta_rule_cuda_supports(int64_t d_k) {
  return d_k == 16 || d_k == 32 || d_k == 64 || d_k == 128 || d_k == 256;
}

namespace {

// Token inputs of one batch of up to kBatch tokens, loaded together after the wait (one memory
// round trip for the batch instead of one per token), and the batch's outputs for the norm.
template <int kDk>
struct BatchSmem {
  float q[kBatch][kDk], k[kBatch][kDk];  // normalised in place
  float v[kBatch][kCols], z[kBatch][kCols];
  float decay[kBatch], beta[kBatch];
  float o[kBatch][kCols];              // kNorm: the rounded outputs
  float psum[kBatch][kMaxNormBlocks];  // kNorm: the cluster's sums of squares by block
};

// Loads tokens [t0, t0 + nb) of this block's head and columns and L2-normalises q and k: warp w
// takes tokens w, w + 4, ...; lane l sums elements l, l + 32, ... in order, then a butterfly.
template <int kDk, bool kNorm>
__device__ __forceinline__ void load_batch(const GdrParams& p, BatchSmem<kDk>& b, int64_t t0,
                                           int nb, int64_t h, int64_t hk, int64_t col_base,
                                           float a_decay, float dt_bias) {
  for (int idx = threadIdx.x; idx < nb * kDk; idx += kThreads) {
    const int64_t t = t0 + idx / kDk, i = idx % kDk;
    b.q[idx / kDk][i] = __bfloat162float(p.q[t * p.q_s0 + hk * p.q_s1 + i]);
    b.k[idx / kDk][i] = __bfloat162float(p.k[t * p.k_s0 + hk * p.k_s1 + i]);
  }
  for (int idx = threadIdx.x; idx < nb * kCols; idx += kThreads) {
    const int64_t t = t0 + idx / kCols, j = col_base + idx % kCols;
    const bool ok = j < p.dv;
    b.v[idx / kCols][idx % kCols] = ok ? __bfloat162float(p.v[t * p.v_s0 + h * p.v_s1 + j]) : 0.f;
    if constexpr (kNorm) {
      b.z[idx / kCols][idx % kCols] = ok ? __bfloat162float(p.z[t * p.z_s0 + h * p.z_s1 + j]) : 0.f;
    }
  }
  if (threadIdx.x < nb) {
    const int64_t t = t0 + threadIdx.x;
    const float a_raw = __bfloat162float(p.a[t * p.a_s0 + h * p.a_s1]);
    const float b_raw = __bfloat162float(p.b[t * p.b_s0 + h * p.b_s1]);
    b.decay[threadIdx.x] = expf(-a_decay * cuda::softplus(a_raw + dt_bias));
    b.beta[threadIdx.x] = cuda::sigmoid(b_raw);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float q_scale = 1.f / sqrtf(static_cast<float>(kDk));
  for (int t = warp; t < nb; t += kWarps) {
    float ssq = 0.f, ssk = 0.f;
    for (int i = lane; i < kDk; i += 32) {
      ssq += b.q[t][i] * b.q[t][i];
      ssk += b.k[t][i] * b.k[t][i];
    }
    ssq = cuda::warp_sum(ssq);
    ssk = cuda::warp_sum(ssk);
    const float inv_q = 1.f / sqrtf(ssq + 1e-6f), inv_k = 1.f / sqrtf(ssk + 1e-6f);
    for (int i = lane; i < kDk; i += 32) {
      b.q[t][i] = (b.q[t][i] * inv_q) * q_scale;
      b.k[t][i] = b.k[t][i] * inv_k;
    }
  }
  __syncthreads();
}

// The fused output norm of the batch's tokens, as gated_rms_norm_kernel computes it with 128
// threads: per token a warp butterfly over each 32 columns, then those sums added in column
// order. Block r of the cluster holds columns 32r..32r+31 (b.o, 0 past d_v) and posts its sums
// to every block; a cluster barrier once they are posted, and one more before another batch
// reuses the buffer.
template <int kDk>
__device__ __forceinline__ void store_norm(const GdrParams& p, BatchSmem<kDk>& b, int64_t t0,
                                           int nb, int64_t h, int64_t j, bool col_ok, int jl,
                                           float norm_w) {
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), blocks = cluster.num_blocks();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // b.o complete
  for (int t = warp; t < nb; t += kWarps) {
    const float sq = cuda::warp_sum(b.o[t][lane] * b.o[t][lane]);
    if (lane < static_cast<int>(blocks)) *cluster.map_shared_rank(&b.psum[t][rank], lane) = sq;
  }
  cluster.sync();  // every block's sums are in
  if (col_ok && (threadIdx.x & (kParts - 1)) == 0) {
    for (int t = 0; t < nb; ++t) {
      float ss = 0.f;
      for (unsigned r = 0; r < blocks; ++r) ss += b.psum[t][r];
      const float inv = 1.f / sqrtf(ss / static_cast<float>(p.dv) + p.norm_eps);
      p.norm_out[(t0 + t) * p.norm_out_s0 + h * p.norm_out_s1 + j] =
          __float2bfloat16_rn(((b.o[t][jl] * inv) * norm_w) * cuda::silu(b.z[t][jl]));
    }
  }
  // b.psum is free for the next batch. After the last batch no block writes another's shared
  // memory any more (the sync above saw every post), so a block may exit without waiting.
  if (t0 + kBatch < p.n_tokens) cluster.sync();
}

template <int kDk, bool kNorm>
__global__ void __launch_bounds__(kThreads) gdr_recurrent_kernel(GdrParams p) {
  constexpr int kRowsPerThread = kDk / kParts;
  __shared__ BatchSmem<kDk> b;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane & (kParts - 1);
  const int64_t h = blockIdx.y, hk = h / (p.hv_n / p.hk_n);
  const int jl = warp * (32 / kParts) + lane / kParts;  // column within the block
  const int64_t col_base = static_cast<int64_t>(blockIdx.x) * kCols, j = col_base + jl;
  const bool col_ok = j < p.dv;
  const int64_t jc = col_ok ? j : 0;  // inactive columns compute on column 0 and store nothing
  const int64_t head_elems = static_cast<int64_t>(kDk) * p.dv;
  const int64_t col_elems = p.hv_n * head_elems;

  // The state and the head's constants load before the wait for the predecessor: only this op
  // writes them, two or more launches back (cuda_common.cuh, pdl_begin), so the state read
  // overlaps the conv kernel's tail.
  int32_t col0 = __ldcg(p.n_acc) - 1;
  col0 = col0 < 0 ? 0 : (col0 >= p.n_cols ? static_cast<int32_t>(p.n_cols - 1) : col0);
  float s[kRowsPerThread];  // rows i = part * kRowsPerThread + r of S[:, j]
  {
    const float* src = p.state + col0 * col_elems + h * head_elems + jc;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      s[r] = __ldcg(src + (part * kRowsPerThread + r) * p.dv);
    }
  }
  const float a_decay = expf(p.a_log[h]), dt_bias = p.dt_bias[h];
  const float norm_w = kNorm ? p.norm_w[jc] : 0.f;
  cuda::pdl_begin();

  for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kBatch) {
    const int nb = static_cast<int>(min(static_cast<int64_t>(kBatch), p.n_tokens - t0));
    load_batch<kDk, kNorm>(p, b, t0, nb, h, hk, col_base, a_decay, dt_bias);
    for (int tb = 0; tb < nb; ++tb) {
      const int64_t t = t0 + tb;
      // Gate, delta update and output for column j.
      const float* kn = b.k[tb] + part * kRowsPerThread;
      const float* qn = b.q[tb] + part * kRowsPerThread;
      float kv = 0.f;
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        s[r] *= b.decay[tb];
        kv = fmaf(s[r], kn[r], kv);
      }
      kv += __shfl_xor_sync(0xffffffffu, kv, 1);
      kv += __shfl_xor_sync(0xffffffffu, kv, 2);
      const float u = b.beta[tb] * (b.v[tb][jl] - kv);
      float o = 0.f;
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) {
        s[r] = fmaf(kn[r], u, s[r]);
        o = fmaf(s[r], qn[r], o);
      }
      o += __shfl_xor_sync(0xffffffffu, o, 1);
      o += __shfl_xor_sync(0xffffffffu, o, 2);
      const __nv_bfloat16 o_bf = __float2bfloat16_rn(o);
      if (part == 0) {
        if (col_ok) p.out[t * p.out_s0 + h * p.out_s1 + j] = o_bf;
        if constexpr (kNorm) b.o[tb][jl] = col_ok ? __bfloat162float(o_bf) : 0.f;
      }
      if (col_ok && p.per_token_columns) {
        float* dst = p.state + t * col_elems + h * head_elems + j;
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r) dst[(part * kRowsPerThread + r) * p.dv] = s[r];
      }
    }
    if constexpr (kNorm) store_norm<kDk>(p, b, t0, nb, h, j, col_ok, jl, norm_w);
    __syncthreads();  // the batch buffers are rewritten by the next batch
  }
  if (col_ok && !p.per_token_columns) {
    float* dst = p.state + h * head_elems + j;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) dst[(part * kRowsPerThread + r) * p.dv] = s[r];
  }
}

template <int kDk>
void launch_recurrent(const GdrParams& p, cudaStream_t s) {
  const unsigned col_blocks = static_cast<unsigned>(cuda::ceil_div(p.dv, kCols));
  const dim3 grid(col_blocks, static_cast<unsigned>(p.hv_n));
  if (p.norm_out != nullptr) {  // one cluster per value head: the norm spans its columns
    cuda::launch_pdl_cluster(gdr_recurrent_kernel<kDk, true>, grid, kThreads, col_blocks, 0, s, p);
  } else {
    cuda::launch_pdl(gdr_recurrent_kernel<kDk, false>, grid, kThreads, 0, s, p);
  }
  cuda::check_launch("gdr_recurrent_kernel");
}

}  // namespace

void gated_delta_rule_cuda(const GatedDeltaRuleArgs& a, const ExecContext& ctx) {
  const char* op = "gated_delta_rule";
  for (const auto& [t, name] :
       {std::pair{&a.q, "q"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"}, std::pair{&a.a, "a"},
        std::pair{&a.b, "b"}, std::pair{&a.out, "out"}}) {
    cuda::expect_cuda_dtype(*t, DType::kBF16, op, name);
    cuda::expect_last_contiguous(*t, op, name);
  }
  cuda::expect_cuda_dtype(a.state, DType::kF32, op, "state");
  cuda::expect_cuda_dtype(a.n_acc, DType::kI32, op, "n_acc");
  GdrParams p{};
  p.n_tokens = a.q.dim(0);
  p.hk_n = a.q.dim(1);
  const int64_t dk = a.q.dim(2);
  p.hv_n = a.v.dim(1);
  p.dv = a.v.dim(2);
  p.n_cols = a.state.dim(0);
  TANDEM_CHECK(
      p.hv_n % p.hk_n == 0 && a.k.shape() == a.q.shape(),
      "gated_delta_rule_cuda: q {} k {} v {} (value heads must be a multiple of key heads)",
      a.q.describe(), a.k.describe(), a.v.describe());
  TANDEM_CHECK(a.state.is_contiguous() && a.state.dim(1) == p.hv_n && a.state.dim(2) == dk &&
                   a.state.dim(3) == p.dv,
               "gated_delta_rule_cuda: state {} does not match [cols, {}, {}, {}]",
               a.state.describe(), p.hv_n, dk, p.dv);
  TANDEM_CHECK(a.mode == GdrMode::kChunked || p.n_tokens <= p.n_cols,
               "gated_delta_rule_cuda: {} tokens need {} state columns, have {}", p.n_tokens,
               p.n_tokens, p.n_cols);
  TANDEM_CHECK(
      gated_delta_rule_cuda_supports(dk),
      "gated_delta_rule_cuda: d_k {} unsupported (16, 32, 64, 128 or 256) for dtype bf16 on cuda",
      dk);
  if (p.n_tokens == 0) return;
  p.q = a.q.data<const __nv_bfloat16>();
  p.k = a.k.data<const __nv_bfloat16>();
  p.v = a.v.data<const __nv_bfloat16>();
  p.a = a.a.data<const __nv_bfloat16>();
  p.b = a.b.data<const __nv_bfloat16>();
  p.q_s0 = a.q.stride(0), p.q_s1 = a.q.stride(1);
  p.k_s0 = a.k.stride(0), p.k_s1 = a.k.stride(1);
  p.v_s0 = a.v.stride(0), p.v_s1 = a.v.stride(1);
  p.a_s0 = a.a.stride(0), p.a_s1 = a.a.stride(1);
  p.b_s0 = a.b.stride(0), p.b_s1 = a.b.stride(1);
  p.a_log = cuda::any_float(a.a_log, op, "a_log");
  p.dt_bias = cuda::any_float(a.dt_bias, op, "dt_bias");
  p.state = a.state.data<float>();
  p.n_acc = a.n_acc.data<const int32_t>();
  p.out = a.out.data<__nv_bfloat16>();
  p.out_s0 = a.out.stride(0), p.out_s1 = a.out.stride(1);
  p.per_token_columns = a.mode == GdrMode::kRecurrent;
  p.start_position = a.start_position;
  const GdrOutputNorm& norm = a.norm;
  const bool has_norm = norm.out.raw() != nullptr;
  const bool fuse_norm =
      has_norm && a.mode == GdrMode::kRecurrent && p.dv <= kMaxNormBlocks * kCols;
  if (fuse_norm) {
    const char* nop = "gated_delta_rule.norm";
    cuda::expect_cuda_dtype(norm.z, DType::kBF16, nop, "z");
    cuda::expect_cuda_dtype(norm.out, DType::kBF16, nop, "out");
    cuda::expect_last_contiguous(norm.z, nop, "z");
    cuda::expect_last_contiguous(norm.out, nop, "out");
    TANDEM_CHECK(norm.z.shape() == a.out.shape() && norm.out.shape() == a.out.shape() &&
                     norm.weight.numel() == p.dv,
                 "gated_delta_rule_cuda: norm z {} weight {} out {} do not match out {}",
                 norm.z.describe(), norm.weight.describe(), norm.out.describe(), a.out.describe());
    p.z = norm.z.data<const __nv_bfloat16>();
    p.z_s0 = norm.z.stride(0), p.z_s1 = norm.z.stride(1);
    p.norm_w = cuda::any_float(norm.weight, nop, "weight");
    p.norm_out = norm.out.data<__nv_bfloat16>();
    p.norm_out_s0 = norm.out.stride(0), p.norm_out_s1 = norm.out.stride(1);
    p.norm_eps = norm.eps;
  }
  const cudaStream_t s = cuda::stream_of(ctx);
  if (!(a.mode == GdrMode::kChunked && gdr_chunked_launch(p, dk, a.chunk_size, s))) {
    if (dk == 16) launch_recurrent<16>(p, s);
    if (dk == 32) launch_recurrent<32>(p, s);
    if (dk == 64) launch_recurrent<64>(p, s);
    if (dk == 128) launch_recurrent<128>(p, s);
    if (dk == 256) launch_recurrent<256>(p, s);
  }
  if (has_norm && !fuse_norm) {
    gated_rms_norm_cuda(
        {.o = a.out, .z = norm.z, .weight = norm.weight, .out = norm.out, .eps = norm.eps}, ctx);
  }
}

}  // namespace tandem::kernels
