// CUDA depthwise causal conv1d + SiLU with a speculative conv history per slot (conv1d.h), all the
// call's sequences in one launch. Per sequence s (o = n_acc[s], H = history[slot[s]]) a thread of
// channel c reads the window H[c, o : o + Kc - 1] into registers before the PDL wait (only this op
// writes the history, two or more launches back, and a call's sequences own their slots), forms
// the outputs from [window, x_0 .. x_{T-1}] after it, then rewrites H[c] in place.
//   kSpec, and kCompact when every sequence has <= 64 rows (decode, verify, short chunks): grid
//     (channel blocks, sequences), one thread per (channel, sequence) computes all its rows and
//     writes H[c, 0 : Kc - 1 + T] = window ++ x (kSpec) or the last Kc - 1 of them (kCompact).
//   kCompact with longer rows (prefill): grid (channel blocks, row chunks of 64, sequences). Only
//     rows t < Kc - 1 read the window, all in chunk 0, so the chunk-0 thread of a channel is the
//     only one that reads H[c] or writes it (the last Kc - 1 inputs come from its window and x);
//     the other chunks read x only. No second launch, no race.
// Every output is the same fixed-order fma sum whichever path computes it (row invariance).
// Not here: kernel sizes above 8. kSpec calls of 32+ sequences: 8 channels a thread, below.
#include <atomic>
#include <utility>

#include "kernels/conv1d/conv1d.h"
#include "kernels/cuda_common.cuh"
#include "kernels/diag_skip.h"

namespace tandem::kernels {

namespace {

constexpr int kMaxKernel = 8;
constexpr int kRowChunk = 64;
constexpr int kThreads = 128;

struct ConvParams {
  const __nv_bfloat16* x;  // rows are absolute (SeqLayout)
  int64_t x_stride;
  cuda::AnyFloatPtr w;  // [channels, kernel]
  __nv_bfloat16* hist;  // [n_slots, channels, hist_len]
  int64_t hist_len, n_slots;
  const int32_t *row_start, *slot, *n_acc;
  __nv_bfloat16* out;
  int64_t out_stride, channels, n_rows;
  int kernel;
  bool spec;
};

// Loads, before the PDL wait, of what only launches two or more back wrote (the history, the
// host-written metadata). volatile with a memory clobber, so that the compiler keeps them ahead of
// this thread's own history stores (cuda_common's __ldcg is a plain asm it may move).
__device__ __forceinline__ int32_t ld_cg(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ float ld_cg_f32(const __nv_bfloat16* p) {
  unsigned short v;
  asm volatile("ld.global.cg.b16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
  return __bfloat162float(__ushort_as_bfloat16(v));
}

// One sequence as its threads read it (host-written metadata, so before the wait), clamped so that
// no access leaves its tensor: rows inside [0, n_rows), the window inside the history. A slot
// outside the pool disables the sequence.
struct ConvSeq {
  int64_t r0, n, o;
  __nv_bfloat16* h;  // H[c] of the thread's channel
  bool ok;
};

__device__ __forceinline__ ConvSeq conv_seq(const ConvParams& p, int64_t s, int64_t c) {
  ConvSeq q;
  const int64_t a = ld_cg(p.row_start + s), b = ld_cg(p.row_start + s + 1);
  q.r0 = a < 0 ? 0 : (a > p.n_rows ? p.n_rows : a);
  q.n = (b < q.r0 ? q.r0 : (b > p.n_rows ? p.n_rows : b)) - q.r0;
  const int64_t slot = ld_cg(p.slot + s), o = ld_cg(p.n_acc + s);
  const int64_t o_max = p.hist_len - (p.kernel - 1);
  q.o = o < 0 ? 0 : (o > o_max ? o_max : o);
  q.ok = slot >= 0 && slot < p.n_slots;
  q.h = p.hist + ((q.ok ? slot : 0) * p.channels + c) * p.hist_len;
  return q;
}

// The kernel's weights of channel c.
__device__ __forceinline__ void load_weights(const ConvParams& p, int64_t c,
                                             float (&w)[kMaxKernel]) {
#pragma unroll
  for (int j = 0; j < kMaxKernel; ++j) w[j] = j < p.kernel ? p.w[c * p.kernel + j] : 0.f;
}

// The window H[c, o : o + Kc - 1] (this op's own output, a step or more back).
__device__ __forceinline__ void load_window(const ConvParams& p, const ConvSeq& q,
                                            float (&win)[kMaxKernel - 1]) {
#pragma unroll
  for (int j = 0; j < kMaxKernel - 1; ++j) {
    win[j] = j < p.kernel - 1 ? ld_cg_f32(q.h + q.o + j) : 0.f;
  }
}

// Outputs of rows [t_begin, t_end) of the sequence for channel c; seq(j) is element j of
// [window, x_0 .. x_{T-1}].
template <class Seq>
__device__ __forceinline__ void conv_outputs(const ConvParams& p, const ConvSeq& q, int64_t c,
                                             const float (&w)[kMaxKernel], int64_t t_begin,
                                             int64_t t_end, Seq&& seq) {
  for (int64_t t = t_begin; t < t_end; ++t) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxKernel; ++j) {
      if (j < p.kernel) acc = fmaf(w[j], seq(t + j), acc);
    }
    p.out[(q.r0 + t) * p.out_stride + c] = __float2bfloat16_rn(cuda::silu(acc));
  }
}

// Rewrites channel c's history: kSpec H[0 : Kc - 1 + T] = seq (as far as the history reaches),
// kCompact H[0 : Kc - 1] = seq[T : T + Kc - 1]. The window is already in registers, so the order
// of the stores does not matter.
template <class Seq>
__device__ __forceinline__ void rewrite_history(const ConvParams& p, const ConvSeq& q, Seq&& seq) {
  const int64_t wlen = p.kernel - 1;
  if (p.spec) {
    const int64_t len = wlen + q.n < p.hist_len ? wlen + q.n : p.hist_len;
    for (int64_t j = 0; j < len; ++j) q.h[j] = __float2bfloat16_rn(seq(j));
  } else {
    for (int64_t j = 0; j < wlen; ++j) q.h[j] = __float2bfloat16_rn(seq(q.n + j));
  }
}

// One thread per (channel, sequence) for all the sequence's rows; channels and sequences share
// nothing. The window, the metadata and the weights load before the wait for the previous kernel,
// whose output x is then the only load on the critical path.
__global__ void conv1d_step_kernel(ConvParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t cl = c < p.channels ? c : p.channels - 1;  // past the end: loads only
  const ConvSeq q = conv_seq(p, blockIdx.y, cl);
  const int64_t wlen = p.kernel - 1;
  float w[kMaxKernel], win[kMaxKernel - 1] = {};
  load_weights(p, cl, w);
  if (q.ok) load_window(p, q, win);
  cuda::pdl_begin();
  // No rows and a window already at offset 0 (a graph bucket's padding): nothing changes.
  if (c >= p.channels || !q.ok || (q.n == 0 && q.o == 0)) return;
  const auto seq = [&](int64_t j) {
    return j < wlen ? win[j] : __bfloat162float(p.x[(q.r0 + j - wlen) * p.x_stride + c]);
  };
  conv_outputs(p, q, c, w, 0, q.n, seq);
  rewrite_history(p, q, seq);
}

// kCompact over long rows: block (x, y, s) computes rows y*64 + k*gridDim.y*64 .. of sequence s
// (a grid stride, so rows past the host's max_rows bound are still covered); y == 0 also owns the
// window and the history rewrite.
__global__ void conv1d_rows_kernel(ConvParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t cl = c < p.channels ? c : p.channels - 1;
  const ConvSeq q = conv_seq(p, blockIdx.z, cl);
  const int64_t wlen = p.kernel - 1;
  const bool owner = blockIdx.y == 0;
  float w[kMaxKernel], win[kMaxKernel - 1] = {};
  load_weights(p, cl, w);
  if (owner && q.ok) load_window(p, q, win);
  cuda::pdl_begin();
  if (c >= p.channels || !q.ok) return;
  // Rows t >= 64 never reach the window: seq(t + j) >= 64 > wlen - 1 there.
  const auto seq = [&](int64_t j) {
    return j < wlen ? win[j] : __bfloat162float(p.x[(q.r0 + j - wlen) * p.x_stride + c]);
  };
  const int64_t stride = static_cast<int64_t>(gridDim.y) * kRowChunk;
  for (int64_t t0 = static_cast<int64_t>(blockIdx.y) * kRowChunk; t0 < q.n; t0 += stride) {
    conv_outputs(p, q, c, w, t0, t0 + kRowChunk < q.n ? t0 + kRowChunk : q.n, seq);
  }
  if (owner) rewrite_history(p, q, seq);
}

// ---- kSpec with 8 channels a thread (calls of conv1d_set_vector_min_seqs+ sequences) ----
// For kernel size 4 and a history of kHist (4..12) entries, whose 8 channels x kHist bf16 sit
// contiguous in the pool ([slot, channel, hist_len]): the thread loads that block with kHist
// 16-byte loads before the PDL wait (all issued before the first use), x and out as one 16-byte
// access per row, and writes the whole block back with kHist 16-byte stores (positions the scalar
// kernel leaves alone are written with the values they held). The window is picked out of the
// registers by one branch per offset o, each with compile-time positions (no local memory). Each
// output is the scalar kernel's fma chain over the same values, so the same bits
// (CudaRowInvariance.ConvVector*).
constexpr int kVecKernel = 4;
constexpr int kVecChannels = 8;
constexpr int kVecMinHist = kVecKernel;  // the window and at least one row
constexpr int kVecMaxHist = 12;          // the window and 9 rows (k = 8 drafts)

std::atomic<int64_t> g_conv_vector_min_seqs{32};
std::atomic<int64_t> g_conv_vector_calls{0};

__device__ __forceinline__ uint4 ld_cg_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// Element e (channel e / kHist, position e % kHist) of a block held as 32-bit words.
__device__ __forceinline__ uint32_t block_get(const uint32_t* b, int e) {
  return (e & 1) ? b[e >> 1] >> 16 : b[e >> 1] & 0xffffu;
}
__device__ __forceinline__ void block_set(uint32_t* b, int e, uint32_t v) {
  b[e >> 1] = (e & 1) ? (b[e >> 1] & 0xffffu) | (v << 16) : (b[e >> 1] & 0xffff0000u) | v;
}
__device__ __forceinline__ float bf16_bits_to_float(uint32_t v) {
  return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(v)));
}

template <int kHist>
__global__ void __launch_bounds__(kThreads) conv1d_vec_kernel(ConvParams p) {
  constexpr int kW = kVecKernel - 1, kWords = kHist * kVecChannels / 2;
  const int64_t groups = p.channels / kVecChannels;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t c0 = (g < groups ? g : groups - 1) * kVecChannels;  // past the end: loads only
  const ConvSeq q = conv_seq(p, blockIdx.y, c0);
  float w[kVecChannels][kVecKernel];
#pragma unroll
  for (int ch = 0; ch < kVecChannels; ++ch) {
#pragma unroll
    for (int j = 0; j < kVecKernel; ++j) w[ch][j] = p.w[(c0 + ch) * kVecKernel + j];
  }
  uint32_t blk[kWords];
  if (q.ok) {
#pragma unroll
    for (int i = 0; i < kHist; ++i) {
      const uint4 v = ld_cg_v4(q.h + i * 8);
      blk[4 * i] = v.x, blk[4 * i + 1] = v.y, blk[4 * i + 2] = v.z, blk[4 * i + 3] = v.w;
    }
  }
  cuda::pdl_begin();
  if (g >= groups || !q.ok || (q.n == 0 && q.o == 0)) return;
  // Positions 0 .. kW - 1 of each channel become the window H[o : o + kW] (in place, ascending:
  // position j reads position o + j >= j, not yet rewritten).
  const int o = static_cast<int>(q.o);
#pragma unroll
  for (int oo = 1; oo <= kHist - kW; ++oo) {
    if (o == oo) {
#pragma unroll
      for (int ch = 0; ch < kVecChannels; ++ch) {
#pragma unroll
        for (int j = 0; j < kW; ++j) {
          block_set(blk, ch * kHist + j, block_get(blk, ch * kHist + oo + j));
        }
      }
    }
  }
  // Outputs: a sliding window of the last kVecKernel inputs per channel.
  float win[kVecChannels][kVecKernel];
#pragma unroll
  for (int ch = 0; ch < kVecChannels; ++ch) {
#pragma unroll
    for (int j = 0; j < kW; ++j) win[ch][j] = bf16_bits_to_float(block_get(blk, ch * kHist + j));
  }
  for (int64_t t = 0; t < q.n; ++t) {
    // A plain load (the predecessor's output, after the wait).
    const uint4 raw = *reinterpret_cast<const uint4*>(p.x + (q.r0 + t) * p.x_stride + c0);
    const uint32_t xw[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t packed[kVecChannels / 2];
#pragma unroll
    for (int ch = 0; ch < kVecChannels; ++ch) {
      win[ch][kW] = bf16_bits_to_float((ch & 1) ? xw[ch / 2] >> 16 : xw[ch / 2] & 0xffffu);
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < kVecKernel; ++j) acc = fmaf(w[ch][j], win[ch][j], acc);
      const uint32_t bits = __bfloat16_as_ushort(__float2bfloat16_rn(cuda::silu(acc)));
      packed[ch / 2] = (ch & 1) ? packed[ch / 2] | (bits << 16) : bits;
#pragma unroll
      for (int j = 0; j < kW; ++j) win[ch][j] = win[ch][j + 1];
    }
    *reinterpret_cast<uint4*>(p.out + (q.r0 + t) * p.out_stride + c0) =
        make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
  // History: positions kW .. kW + n - 1 take the rows' inputs (as far as the history reaches),
  // the rest keep what they held; then the whole block back.
#pragma unroll
  for (int pos = kW; pos < kHist; ++pos) {
    if (pos - kW < q.n) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p.x + (q.r0 + pos - kW) * p.x_stride + c0);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int ch = 0; ch < kVecChannels; ++ch) {
        block_set(blk, ch * kHist + pos, (ch & 1) ? words[ch / 2] >> 16 : words[ch / 2] & 0xffffu);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kHist; ++i) {
    *reinterpret_cast<uint4*>(q.h + i * 8) =
        make_uint4(blk[4 * i], blk[4 * i + 1], blk[4 * i + 2], blk[4 * i + 3]);
  }
}

// Whether the call can take the vector kernel: enough sequences, kSpec, kernel 4, a history of
// 4..12 entries,
// channels a multiple of 8, x and out rows 16-byte aligned.
bool conv_vector_fits(const ConvParams& p, int64_t n_seqs) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return n_seqs >= g_conv_vector_min_seqs.load() && p.spec && p.kernel == kVecKernel &&
         p.hist_len >= kVecMinHist && p.hist_len <= kVecMaxHist && p.channels % kVecChannels == 0 &&
         p.x_stride % 8 == 0 && p.out_stride % 8 == 0 && aligned(p.x) && aligned(p.out) &&
         aligned(p.hist);
}

template <int kHist>
bool launch_vec_if(const ConvParams& p, unsigned n_seqs, cudaStream_t s) {
  if (p.hist_len != kHist) return false;
  const unsigned blocks = cuda::ceil_div(p.channels / kVecChannels, kThreads);
  cuda::launch_pdl(conv1d_vec_kernel<kHist>, dim3(blocks, n_seqs), kThreads, 0, s, p);
  cuda::check_launch("conv1d_vec_kernel");
  g_conv_vector_calls.fetch_add(1);
  return true;
}

template <int... kHists>
bool launch_vec(const ConvParams& p, unsigned n_seqs, cudaStream_t s,
                std::integer_sequence<int, kHists...>) {
  return (launch_vec_if<kHists + kVecMinHist>(p, n_seqs, s) || ...);
}

}  // namespace

void conv1d_cuda(const Conv1dArgs& a, const ExecContext& ctx) {
  if (diag_skipped(DiagClass::kConv)) return;  // timing diagnostic (diag_skip.h)
  const char* op = "conv1d";
  cuda::expect_cuda_dtype(a.x, DType::kBF16, op, "x");
  cuda::expect_cuda_dtype(a.out, DType::kBF16, op, "out");
  cuda::expect_cuda_dtype(a.history, DType::kBF16, op, "history");
  for (const Tensor* t : {&a.x, &a.out}) cuda::expect_last_contiguous(*t, op, "x/out");
  expect_seq_layout(a.seqs, op);
  cuda::expect_cuda(a.seqs.row_start, op, "row_start");
  expect_per_seq(a.slot, a.seqs, op, "slot");
  expect_per_seq(a.n_acc, a.seqs, op, "n_acc");
  cuda::expect_cuda(a.slot, op, "slot");
  cuda::expect_cuda(a.n_acc, op, "n_acc");
  ConvParams p{};
  p.n_rows = a.x.dim(0);
  p.channels = a.x.dim(1);
  p.kernel = static_cast<int>(a.weight.dim(-1));
  TANDEM_CHECK(a.history.ndim() == 3 && a.history.is_contiguous(),
               "conv1d_cuda: history {} must be a contiguous [slots, channels, hist_len]",
               a.history.describe());
  p.n_slots = a.history.dim(0);
  p.hist_len = a.history.dim(2);
  TANDEM_CHECK(a.weight.numel() == p.channels * p.kernel && a.history.dim(1) == p.channels &&
                   a.out.dim(0) == p.n_rows && a.out.dim(1) == p.channels,
               "conv1d_cuda: x {} weight {} history {} out {} do not agree", a.x.describe(),
               a.weight.describe(), a.history.describe(), a.out.describe());
  TANDEM_CHECK(p.kernel >= 2 && p.kernel <= kMaxKernel && p.hist_len >= p.kernel - 1,
               "conv1d_cuda: kernel size {} (supported 2..{}) with history length {}", p.kernel,
               kMaxKernel, p.hist_len);
  const bool spec = a.mode == ConvHistoryMode::kSpec;
  // max_rows only sizes grids: a slice keeps its parent's bound (a step's prefill rows), so it is
  // not held against the history. A kSpec sequence with more rows than the history keeps (which
  // the reference refuses) still gets every output; its history is written as far as it reaches.
  TANDEM_CHECK(a.seqs.max_rows >= 0 && a.seqs.n_seqs <= 65535,
               "conv1d_cuda: max_rows {} < 0 or {} sequences (a grid holds 65535)", a.seqs.max_rows,
               a.seqs.n_seqs);
  if (a.seqs.n_seqs == 0 || p.channels == 0) return;
  p.x = a.x.data<const __nv_bfloat16>();
  p.x_stride = a.x.stride(0);
  p.w = cuda::any_float(a.weight, op, "weight");
  p.hist = a.history.data<__nv_bfloat16>();
  p.row_start = a.seqs.row_start.data<const int32_t>();
  p.slot = a.slot.data<const int32_t>();
  p.n_acc = a.n_acc.data<const int32_t>();
  p.out = a.out.data<__nv_bfloat16>();
  p.out_stride = a.out.stride(0);
  p.spec = spec;
  const cudaStream_t s = cuda::stream_of(ctx);
  const unsigned channel_blocks = cuda::ceil_div(p.channels, kThreads);
  const unsigned n_seqs = static_cast<unsigned>(a.seqs.n_seqs);
  if (conv_vector_fits(p, a.seqs.n_seqs) &&
      launch_vec(p, n_seqs, s, std::make_integer_sequence<int, kVecMaxHist - kVecMinHist + 1>{})) {
    return;
  }
  if (spec || a.seqs.max_rows <= kRowChunk) {
    cuda::launch_pdl(conv1d_step_kernel, dim3(channel_blocks, n_seqs), kThreads, 0, s, p);
    cuda::check_launch("conv1d_step_kernel");
    return;
  }
  const dim3 grid(channel_blocks, cuda::ceil_div(a.seqs.max_rows, kRowChunk), n_seqs);
  cuda::launch_pdl(conv1d_rows_kernel, grid, kThreads, 0, s, p);
  cuda::check_launch("conv1d_rows_kernel");
}

int64_t conv1d_set_vector_min_seqs(int64_t n) { return g_conv_vector_min_seqs.exchange(n); }
int64_t conv1d_vector_calls() { return g_conv_vector_calls.load(); }

}  // namespace tandem::kernels
