// CUDA gated delta rule. One block per (value head, 32 value columns); in a block each column j
// is held by 4 threads, each owning d_k/4 rows of S[:, j] in fp32 registers for the whole call.
// Per token: q and k are L2-normalised in shared memory (fixed-order block sums), then every
// thread decays its rows, forms partial dot products in row order and combines the 4 parts with
// a fixed butterfly. The arithmetic of a token never depends on how many tokens share the call,
// so a verify's state columns equal a token-by-token run bit for bit (DESIGN.md inv. 2, 3).
// kRecurrent writes the state after token t into column t. kChunked runs the WY form
// (gated_delta_rule_chunked_cuda.cu) and falls back to this recurrence over the whole prompt, final
// state into column 0, for what that does not cover. n_acc is read on the device (graph-safe).
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"

namespace tandem::kernels {

namespace {

constexpr int kParts = 4;  // threads per value column
constexpr int kCols = 32;  // value columns per block
constexpr int kThreads = kParts * kCols;
constexpr int kWarps = kThreads / 32;

}  // namespace

bool gated_delta_rule_cuda_supports(int64_t d_k) {
  return d_k == 16 || d_k == 32 || d_k == 64 || d_k == 128 || d_k == 256;
}

namespace {

template <int kDk>
__global__ void __launch_bounds__(kThreads) gdr_recurrent_kernel(GdrParams p) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  constexpr int kRowsPerThread = kDk / kParts;
  __shared__ float qn[kDk], kn[kDk];
  __shared__ float partial[2][kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane & (kParts - 1);
  const int64_t h = blockIdx.y, hk = h / (p.hv_n / p.hk_n);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kCols + warp * (32 / kParts) + lane / kParts;
  const bool col_ok = j < p.dv;
  const int64_t jc = col_ok ? j : 0;  // inactive columns compute on column 0 and store nothing
  const int64_t head_elems = static_cast<int64_t>(kDk) * p.dv;
  const int64_t col_elems = p.hv_n * head_elems;
  int32_t col0 = p.n_acc[0] - 1;
  col0 = col0 < 0 ? 0 : (col0 >= p.n_cols ? static_cast<int32_t>(p.n_cols - 1) : col0);

  float s[kRowsPerThread];  // rows i = part * kRowsPerThread + r of S[:, j]
  {
    const float* src = p.state + col0 * col_elems + h * head_elems + jc;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) s[r] = src[(part * kRowsPerThread + r) * p.dv];
  }
  const float a_decay = expf(p.a_log[h]), dt_bias = p.dt_bias[h];
  const float q_scale = 1.f / sqrtf(static_cast<float>(kDk));

  for (int64_t t = 0; t < p.n_tokens; ++t) {
    // Loads this token needs, issued together so their latencies overlap.
    const float a_raw = __bfloat162float(p.a[t * p.a_s0 + h * p.a_s1]);
    const float b_raw = __bfloat162float(p.b[t * p.b_s0 + h * p.b_s1]);
    const float v_j = __bfloat162float(p.v[t * p.v_s0 + h * p.v_s1 + jc]);
    // 1. normalised q and k of this token's key head, in shared memory
    float ssq = 0.f, ssk = 0.f;
    for (int i = threadIdx.x; i < kDk; i += kThreads) {
      const float qi = __bfloat162float(p.q[t * p.q_s0 + hk * p.q_s1 + i]);
      const float ki = __bfloat162float(p.k[t * p.k_s0 + hk * p.k_s1 + i]);
      qn[i] = qi;
      kn[i] = ki;
      ssq += qi * qi;
      ssk += ki * ki;
    }
    ssq = cuda::warp_sum(ssq);
    ssk = cuda::warp_sum(ssk);
    if (lane == 0) {
      partial[0][warp] = ssq;
      partial[1][warp] = ssk;
    }
    __syncthreads();
    ssq = 0.f;
    ssk = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      ssq += partial[0][w];
      ssk += partial[1][w];
    }
    const float inv_q = 1.f / sqrtf(ssq + 1e-6f), inv_k = 1.f / sqrtf(ssk + 1e-6f);
    for (int i = threadIdx.x; i < kDk; i += kThreads) {
      qn[i] = (qn[i] * inv_q) * q_scale;
      kn[i] = kn[i] * inv_k;
    }
    __syncthreads();
    // 2. gate, delta update and output for column j
    const float decay = expf(-a_decay * cuda::softplus(a_raw + dt_bias));
    const float beta = cuda::sigmoid(b_raw);
    float kv = 0.f;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      s[r] *= decay;
      kv = fmaf(s[r], kn[part * kRowsPerThread + r], kv);
    }
    kv += __shfl_xor_sync(0xffffffffu, kv, 1);
    kv += __shfl_xor_sync(0xffffffffu, kv, 2);
    const float u = beta * (v_j - kv);
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      s[r] = fmaf(kn[part * kRowsPerThread + r], u, s[r]);
      o = fmaf(s[r], qn[part * kRowsPerThread + r], o);
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    if (col_ok && part == 0) p.out[t * p.out_s0 + h * p.out_s1 + j] = __float2bfloat16_rn(o);
    if (col_ok && p.per_token_columns) {
      float* dst = p.state + t * col_elems + h * head_elems + j;
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) dst[(part * kRowsPerThread + r) * p.dv] = s[r];
    }
    __syncthreads();  // qn/kn are rewritten for the next token
  }
  if (col_ok && !p.per_token_columns) {
    float* dst = p.state + h * head_elems + j;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) dst[(part * kRowsPerThread + r) * p.dv] = s[r];
  }
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
  const cudaStream_t s = cuda::stream_of(ctx);
  if (a.mode == GdrMode::kChunked && gdr_chunked_launch(p, dk, a.chunk_size, s)) return;
  const dim3 grid(cuda::ceil_div(p.dv, kCols), static_cast<unsigned>(p.hv_n));
  if (dk == 16) cuda::launch_pdl(gdr_recurrent_kernel<16>, grid, kThreads, 0, s, p);
  if (dk == 32) cuda::launch_pdl(gdr_recurrent_kernel<32>, grid, kThreads, 0, s, p);
  if (dk == 64) cuda::launch_pdl(gdr_recurrent_kernel<64>, grid, kThreads, 0, s, p);
  if (dk == 128) cuda::launch_pdl(gdr_recurrent_kernel<128>, grid, kThreads, 0, s, p);
  if (dk == 256) cuda::launch_pdl(gdr_recurrent_kernel<256>, grid, kThreads, 0, s, p);
  cuda::check_launch("gdr_recurrent_kernel");
}

}  // namespace tandem::kernels
