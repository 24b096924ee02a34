// CUDA depthwise causal conv1d + SiLU with the speculative conv history (conv1d.h). Outputs read
// the window at offset n_acc - 1 of the old history; then the history is rewritten in place
// (kSpec or kCompact), per channel in ascending order (reads stay ahead of writes). Up to 64
// tokens (decode, verify) one launch does both, one thread per channel; longer calls (prefill)
// compute outputs with one thread per (channel, chunk of 64 tokens) and rewrite the history in a
// second launch. n_acc is read on the device (graph-safe). Every output is the same fixed-order
// sum whichever launch computes it.
#include "kernels/conv1d/conv1d.h"
#include "kernels/cuda_common.cuh"

namespace tandem::kernels {

namespace {

constexpr int kMaxKernel = 8;
constexpr int kTokenChunk = 64;
constexpr int kThreads = 128;

struct ConvParams {
  const __nv_bfloat16* x;
  int64_t x_stride;
  cuda::AnyFloatPtr w;  // [channels, kernel]
  __nv_bfloat16* hist;
  int64_t hist_stride, hist_len;
  const int32_t* n_acc;
  __nv_bfloat16* out;
  int64_t out_stride, channels, n_tokens;
  int kernel;
};

__device__ __forceinline__ int64_t window_offset(const ConvParams& p) {
  const int64_t o = static_cast<int64_t>(__ldcg(p.n_acc)) - 1;  // clamped to stay in bounds
  return o < 0 ? 0 : (o > p.hist_len - (p.kernel - 1) ? p.hist_len - (p.kernel - 1) : o);
}

// seq = [window, x_0 .. x_{T-1}], element j for channel c.
__device__ __forceinline__ float seq_at(const ConvParams& p, int64_t c, int64_t o, int64_t j) {
  const int64_t wlen = p.kernel - 1;
  return j < wlen ? __bfloat162float(p.hist[c * p.hist_stride + o + j])
                  : __bfloat162float(p.x[(j - wlen) * p.x_stride + c]);
}

// The kernel's weights of channel c.
__device__ __forceinline__ void load_weights(const ConvParams& p, int64_t c,
                                             float (&w)[kMaxKernel]) {
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j) w[j] = j < p.kernel ? p.w[c * p.kernel + j] : 0.f;
}

// Outputs of tokens [t_begin, t_end) for channel c; seq(j) is seq_at(p, c, o, j) or its value.
template <class Seq>
__device__ __forceinline__ void conv_outputs(const ConvParams& p, int64_t c,
                                             const float (&w)[kMaxKernel], int64_t t_begin,
                                             int64_t t_end, Seq&& seq) {
  for (int64_t t = t_begin; t < t_end; ++t) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxKernel; ++j) {
      if (j < p.kernel) acc = fmaf(w[j], seq(t + j), acc);
    }
    p.out[t * p.out_stride + c] = __float2bfloat16_rn(cuda::silu(acc));
  }
}

// Rewrites channel c's history in place, in ascending order (reads stay ahead of writes).
template <class Seq>
__device__ __forceinline__ void rewrite_history(const ConvParams& p, int64_t c, bool spec,
                                                Seq&& seq) {
  const int64_t wlen = p.kernel - 1;
  __nv_bfloat16* h = p.hist + c * p.hist_stride;
  if (spec) {  // history[0 : wlen - 1 + T] = seq[1 : wlen + T]
    for (int64_t j = 0; j + 1 < wlen + p.n_tokens; ++j) h[j] = __float2bfloat16_rn(seq(j + 1));
  } else {  // history[0 : wlen] = seq[T : T + wlen]
    for (int64_t j = 0; j < wlen; ++j) h[j] = __float2bfloat16_rn(seq(p.n_tokens + j));
  }
}

__global__ void conv1d_out_kernel(ConvParams p) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= p.channels) return;
  const int64_t t_begin = static_cast<int64_t>(blockIdx.y) * kTokenChunk, o = window_offset(p);
  float w[kMaxKernel];
  load_weights(p, c, w);
  conv_outputs(p, c, w, t_begin, min(p.n_tokens, t_begin + kTokenChunk),
               [&](int64_t j) { return seq_at(p, c, o, j); });
}

__global__ void conv1d_history_kernel(ConvParams p, bool spec) {
  cuda::pdl_begin();  // launched with launch_pdl: wait for the predecessor first
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= p.channels) return;
  const int64_t o = window_offset(p);
  rewrite_history(p, c, spec, [&](int64_t j) { return seq_at(p, c, o, j); });
}

// Both in one launch when one token chunk covers the call (decode, verify): a channel's thread
// computes all its outputs, then rewrites its own history; channels share nothing. The window
// (this op's own output, a step back), n_acc (set before the step) and the weights load before
// the wait for the previous kernel, whose output x is then the only load on the critical path.
__global__ void conv1d_step_kernel(ConvParams p, bool spec) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t cl = c < p.channels ? c : p.channels - 1;  // past the end: loads only
  const int64_t o = window_offset(p), wlen = p.kernel - 1;
  float w[kMaxKernel], win[kMaxKernel - 1];
  load_weights(p, cl, w);
#pragma unroll
  for (int j = 0; j < kMaxKernel - 1; ++j) {
    win[j] = j < wlen ? __bfloat162float(__ldcg(p.hist + cl * p.hist_stride + o + j)) : 0.f;
  }
  cuda::pdl_begin();
  if (c >= p.channels) return;
  const auto seq = [&](int64_t j) {
    return j < wlen ? win[j] : __bfloat162float(p.x[(j - wlen) * p.x_stride + c]);
  };
  conv_outputs(p, c, w, 0, p.n_tokens, seq);
  rewrite_history(p, c, spec, seq);
}

}  // namespace

void conv1d_cuda(const Conv1dArgs& a, const ExecContext& ctx) {
  cuda::expect_cuda_dtype(a.x, DType::kBF16, "conv1d", "x");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, "conv1d", "out");
  cuda::expect_cuda_dtype(a.history, DType::kBF16, "conv1d", "history");
  cuda::expect_cuda_dtype(a.n_acc, DType::kI32, "conv1d", "n_acc");
  for (const Tensor* t : {&a.x, &a.out, &a.history})
    cuda::expect_last_contiguous(*t, "conv1d", "x/out/history");
  ConvParams p{};
  p.n_tokens = a.x.dim(0);
  p.channels = a.x.dim(1);
  p.kernel = static_cast<int>(a.weight.dim(-1));
  p.hist_len = a.history.dim(1);
  TANDEM_CHECK(a.weight.numel() == p.channels * p.kernel && a.history.dim(0) == p.channels &&
                   a.out.dim(0) == p.n_tokens && a.out.dim(1) == p.channels,
               "conv1d_cuda: x {} weight {} history {} out {} do not agree", a.x.describe(),
               a.weight.describe(), a.history.describe(), a.out.describe());
  TANDEM_CHECK(p.kernel >= 2 && p.kernel <= kMaxKernel && p.hist_len >= p.kernel - 1,
               "conv1d_cuda: kernel size {} (supported 2..{}) with history length {}", p.kernel,
               kMaxKernel, p.hist_len);
  TANDEM_CHECK(a.mode == ConvHistoryMode::kCompact || p.kernel - 2 + p.n_tokens <= p.hist_len,
               "conv1d_cuda: {} tokens do not fit a spec history of length {}", p.n_tokens,
               p.hist_len);
  if (p.n_tokens == 0 || p.channels == 0) return;
  p.x = a.x.data<const __nv_bfloat16>();
  p.x_stride = a.x.stride(0);
  p.w = cuda::any_float(a.weight, "conv1d", "weight");
  p.hist = a.history.data<__nv_bfloat16>();
  p.hist_stride = a.history.stride(0);
  p.n_acc = a.n_acc.data<const int32_t>();
  p.out = a.out.data<__nv_bfloat16>();
  p.out_stride = a.out.stride(0);
  const cudaStream_t s = cuda::stream_of(ctx);
  const bool spec = a.mode == ConvHistoryMode::kSpec;
  if (p.n_tokens <= kTokenChunk) {
    cuda::launch_pdl(conv1d_step_kernel, cuda::ceil_div(p.channels, kThreads), kThreads, 0, s, p,
                     spec);
    cuda::check_launch("conv1d_step_kernel");
    return;
  }
  const dim3 grid(cuda::ceil_div(p.channels, kThreads), cuda::ceil_div(p.n_tokens, kTokenChunk));
  cuda::launch_pdl(conv1d_out_kernel, grid, kThreads, 0, s, p);
  cuda::check_launch("conv1d_out_kernel");
  cuda::launch_pdl(conv1d_history_kernel, cuda::ceil_div(p.channels, kThreads), kThreads, 0, s, p,
                   spec);
  cuda::check_launch("conv1d_history_kernel");
}

}  // namespace tandem::kernels
