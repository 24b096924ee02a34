// CUDA gated delta rule over a batch of sequences, one launch per call. kRecurrent calls of 8 or
// more sequences whose shape it takes go to the streaming kernel (gated_delta_rule_stream_cuda.cu,
// same bits); the rest run here. Grid (value-column blocks of 32, value heads, sequences); in a
// block each column j is held by 4 threads, each owning d_k/4 rows of S[:, j] in fp32 registers for
// the whole call. kRecurrent (decode, verify), per block:
//   before the PDL wait: the sequence's metadata, its committed state slice state[slot] and the
//     fold: the first n_acc rows of replay half 1 - parity (the last step's accepted raw rows),
//     applied with the per-token code below; if n_acc > 0 the folded slice goes back to
//     state[slot]. Only this op writes the state and the replay buffer, and always two or more
//     launches back (the conv runs in between), so all of it may overlap the predecessor.
//   after the wait: the inputs of up to 4 rows are loaded together, q and k L2-normalised per row
//     by one warp (fixed order); row after row every thread decays its rows, forms partial dot
//     products in row order and combines the 4 parts with a fixed butterfly; outputs are stored,
//     the rows' states are not; the raw k/v/a/b rows are copied into replay half `parity`.
// A folded row and a current row run the same code, so the committed state equals a
// token-by-token run bit for bit (DESIGN.md inv. 2, 3); nothing depends on the other sequences.
// kChunked runs the WY form (gated_delta_rule_chunked_cuda.cu) and falls back to this recurrence
// over each whole prompt, final state into state[slot], for what that does not cover. With an
// output norm (GdrOutputNorm) and d_v <= 128, the blocks of a (head, sequence) form a cluster that
// also writes each row's gated RMSNorm, the sums of squares shared through DSMEM once per batch:
// one launch fewer per GDN layer, bit for bit the separate op. Not here: d_k outside 16..256.
#include "kernels/diag_skip.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/gated_delta_rule/gated_delta_rule_cuda.cuh"
#include "kernels/gated_delta_rule/gated_delta_rule_rows_cuda.cuh"
#include "kernels/gated_rms_norm/gated_rms_norm.h"

namespace tandem::kernels {

bool gated_delta_rule_cuda_supports(int64_t d_k) {
  return d_k == 16 || d_k == 32 || d_k == 64 || d_k == 128 || d_k == 256;
}

namespace {

// kMinBlocks: blocks per SM the registers must allow. 1 lets the compiler use what it wants (168
// registers with the norm: 3 blocks, 48 KB of state in flight per SM, which left a 32-sequence
// 27B step's recurrence at ~1.3 TB/s, 155 us per layer); kManyBlocks (96 registers, 72 bytes of
// spill) for calls of kManySeqs or more sequences. Register limits change the allocation, not the
// arithmetic: both compute the same bits.
constexpr int kManyBlocks = 5;
constexpr int64_t kManySeqs = 8;

template <int kDk, bool kNorm, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) gdr_recurrent_kernel(GdrParams p) {
  constexpr int kRowsPerThread = kDk / kParts;
  __shared__ BatchSmem<kDk> b;
  // kNorm: the first remote shared-memory write waits until every block of the cluster has
  // started (this arrival's phase completes); the wait comes right after the PDL wait.
  if constexpr (kNorm) cg::this_cluster().barrier_arrive();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane & (kParts - 1);
  const int64_t h = blockIdx.y, hk = h / (p.hv_n / p.hk_n);
  const int jl = warp * (32 / kParts) + lane / kParts;  // column within the block
  const int64_t col_base = static_cast<int64_t>(blockIdx.x) * kCols, j = col_base + jl;
  const bool col_ok = j < p.dv;
  const int64_t jc = col_ok ? j : 0;  // inactive columns compute on column 0 and store nothing
  const int64_t head_elems = static_cast<int64_t>(kDk) * p.dv;
  // The cluster spans x only, so all its blocks see the same sequence (uniform branches below).
  // A sequence with no rows and nothing to fold (a graph bucket's padding) touches nothing.
  const GdrSeq sq = gdr_seq(p, blockIdx.z);
  if (!sq.ok || (sq.n == 0 && sq.n_acc == 0)) {
    cuda::pdl_begin();
    if constexpr (kNorm) cg::this_cluster().barrier_wait();
    return;
  }
  float* const state = p.state + sq.slot * p.hv_n * head_elems + h * head_elems + jc;
  const float a_decay = expf(p.a_log[h]), dt_bias = p.dt_bias[h];
  const float norm_w = kNorm ? p.norm_w[jc] : 0.f;

  // Before the wait for the predecessor: the committed state, the fold of the last step's
  // accepted rows and its write-back. Only this op writes the state and the replay buffer, two
  // or more launches back (cuda_common.cuh, pdl_begin); this call reads replay half 1 - parity
  // and writes half `parity` (after the wait), so its reads never see its own writes.
  float s[kRowsPerThread];  // rows i = part * kRowsPerThread + r of S[:, j]
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    s[r] = gdr_ld_cg(state + (part * kRowsPerThread + r) * p.dv);
  }
  const ColumnAt c{h, hk, col_base, j, jl, part, col_ok};
  if (sq.n_acc > 0) {
    fold_rows<kDk>(p, b, s, sq, c, a_decay, dt_bias);
    if (col_ok) {
#pragma unroll
      for (int r = 0; r < kRowsPerThread; ++r) state[(part * kRowsPerThread + r) * p.dv] = s[r];
    }
  }
  cuda::pdl_begin();
  if constexpr (kNorm) cg::this_cluster().barrier_wait();

  // The call's rows (they come from the predecessor); their raw k/v/a/b go to replay half
  // `parity`, each byte from one block: k from the first value head of its key head and column
  // block 0, a and b from column block 0, v from the block that owns the columns.
  const int64_t half_elems = p.replay_rows * p.replay_width;
  const BatchAt cur{sq.r0, p.recurrent ? (sq.slot * 2 + sq.parity) * half_elems : -1,
                    p.recurrent && blockIdx.x == 0 && h % (p.hv_n / p.hk_n) == 0,
                    p.recurrent && blockIdx.x == 0};
  int pbuf = 0;
  current_rows<kDk, kNorm>(p, b, &b.psum, pbuf, false, s, sq, cur, c, a_decay, dt_bias, norm_w);
  if (!p.recurrent && sq.n > 0 && col_ok) {  // the chunked fallback: the prompt's final state
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) state[(part * kRowsPerThread + r) * p.dv] = s[r];
  }
}

template <int kDk>
void launch_recurrent(const GdrParams& p, cudaStream_t s) {
  const unsigned col_blocks = static_cast<unsigned>(cuda::ceil_div(p.dv, kCols));
  const dim3 grid(col_blocks, static_cast<unsigned>(p.hv_n), static_cast<unsigned>(p.n_seqs));
  const bool many = p.n_seqs >= kManySeqs;
  if (p.norm_out != nullptr) {  // one cluster per (value head, sequence): the norm spans d_v
    cuda::launch_pdl_cluster(
        many ? gdr_recurrent_kernel<kDk, true, kManyBlocks> : gdr_recurrent_kernel<kDk, true, 1>,
        grid, kThreads, col_blocks, 0, s, p);
  } else {
    cuda::launch_pdl(
        many ? gdr_recurrent_kernel<kDk, false, kManyBlocks> : gdr_recurrent_kernel<kDk, false, 1>,
        grid, kThreads, 0, s, p);
  }
  cuda::check_launch("gdr_recurrent_kernel");
}

void expect_per_seq_cuda(const Tensor& t, const SeqLayout& seqs, const char* name) {
  expect_per_seq(t, seqs, "gated_delta_rule", name);
  cuda::expect_cuda(t, "gated_delta_rule", name);
}

}  // namespace

void gated_delta_rule_cuda(const GatedDeltaRuleArgs& a, const ExecContext& ctx) {
  if (diag_skipped(DiagClass::kGdr)) return;  // timing diagnostic (diag_skip.h)
  const char* op = "gated_delta_rule";
  for (const auto& [t, name] :
       {std::pair{&a.q, "q"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"}, std::pair{&a.a, "a"},
        std::pair{&a.b, "b"}, std::pair{&a.out, "out"}}) {
    cuda::expect_cuda_dtype(*t, DType::kBF16, op, name);
    cuda::expect_last_contiguous(*t, op, name);
  }
  cuda::expect_cuda_dtype(a.state, DType::kF32, op, "state");
  expect_seq_layout(a.seqs, op);
  cuda::expect_cuda(a.seqs.row_start, op, "row_start");
  expect_per_seq_cuda(a.slot, a.seqs, "slot");
  expect_per_seq_cuda(a.n_acc, a.seqs, "n_acc");
  const bool recurrent = a.mode == GdrMode::kRecurrent;
  if (recurrent) expect_per_seq_cuda(a.parity, a.seqs, "parity");
  if (!recurrent) expect_per_seq_cuda(a.start_position, a.seqs, "start_position");
  GdrParams p{};
  p.n_rows = a.q.dim(0);
  p.hk_n = a.q.dim(1);
  const int64_t dk = a.q.dim(2);
  p.hv_n = a.v.dim(1);
  p.dv = a.v.dim(2);
  p.n_slots = a.state.dim(0);
  p.n_seqs = a.seqs.n_seqs;
  TANDEM_CHECK(p.hv_n % p.hk_n == 0 && a.k.shape() == a.q.shape() && a.v.dim(0) == p.n_rows &&
                   a.a.dim(0) == p.n_rows && a.b.dim(0) == p.n_rows && a.a.dim(1) == p.hv_n &&
                   a.b.dim(1) == p.hv_n && a.out.shape() == a.v.shape(),
               "gated_delta_rule_cuda: q {} k {} v {} a {} b {} out {} (value heads must be a "
               "multiple of key heads)",
               a.q.describe(), a.k.describe(), a.v.describe(), a.a.describe(), a.b.describe(),
               a.out.describe());
  TANDEM_CHECK(a.state.ndim() == 4 && a.state.is_contiguous() && a.state.dim(1) == p.hv_n &&
                   a.state.dim(2) == dk && a.state.dim(3) == p.dv,
               "gated_delta_rule_cuda: state {} does not match [slots, {}, {}, {}]",
               a.state.describe(), p.hv_n, dk, p.dv);
  TANDEM_CHECK(
      gated_delta_rule_cuda_supports(dk),
      "gated_delta_rule_cuda: d_k {} unsupported (16, 32, 64, 128 or 256) for dtype bf16 on cuda",
      dk);
  p.replay_width = gdr_replay_width(p.hk_n, dk, p.hv_n, p.dv);
  if (recurrent || a.replay.raw() != nullptr) {
    cuda::expect_cuda_dtype(a.replay, DType::kBF16, op, "replay");
    TANDEM_CHECK(a.replay.ndim() == 4 && a.replay.is_contiguous() && a.replay.dim(0) == p.n_slots &&
                     a.replay.dim(1) == 2 && a.replay.dim(3) == p.replay_width,
                 "gated_delta_rule_cuda: replay {} does not match [{}, 2, rows, {}]",
                 a.replay.describe(), p.n_slots, p.replay_width);
    p.replay_rows = a.replay.dim(2);
  }
  // max_rows only sizes the separate norm's grid: a slice keeps its parent's bound, so it is not
  // held against replay_rows. Rows past replay_rows (which the reference refuses) still get
  // their outputs; the replay keeps the first replay_rows, all a commit can accept.
  TANDEM_CHECK(a.seqs.max_rows >= 0 && p.n_seqs <= 65535,
               "gated_delta_rule_cuda: max_rows {} < 0 or {} sequences (a grid holds 65535)",
               a.seqs.max_rows, p.n_seqs);
  if (p.n_seqs == 0) return;
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
  p.replay = a.replay.raw() != nullptr ? a.replay.data<__nv_bfloat16>() : nullptr;
  p.row_start = a.seqs.row_start.data<const int32_t>();
  p.slot = a.slot.data<const int32_t>();
  p.n_acc = a.n_acc.data<const int32_t>();
  p.parity = recurrent ? a.parity.data<const int32_t>() : nullptr;
  p.start_position = recurrent ? nullptr : a.start_position.data<const int32_t>();
  p.out = a.out.data<__nv_bfloat16>();
  p.out_s0 = a.out.stride(0), p.out_s1 = a.out.stride(1);
  p.recurrent = recurrent;
  const GdrOutputNorm& norm = a.norm;
  const bool has_norm = norm.out.raw() != nullptr;
  const bool fuse_norm = has_norm && recurrent && p.dv <= kMaxNormBlocks * kCols;
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
  const bool launched = recurrent ? gdr_stream_launch(p, dk, a.seqs.max_rows, s)
                                  : gdr_chunked_launch(p, dk, a.chunk_size, s);
  if (!launched) {
    if (dk == 16) launch_recurrent<16>(p, s);
    if (dk == 32) launch_recurrent<32>(p, s);
    if (dk == 64) launch_recurrent<64>(p, s);
    if (dk == 128) launch_recurrent<128>(p, s);
    if (dk == 256) launch_recurrent<256>(p, s);
  }
  if (has_norm && !fuse_norm) {  // the separate op, over this call's rows only
    gated_rms_norm_rows_cuda(
        {.o = a.out, .z = norm.z, .weight = norm.weight, .out = norm.out, .eps = norm.eps},
        p.row_start, p.n_seqs, p.n_seqs * a.seqs.max_rows, ctx);
  }
}

}  // namespace tandem::kernels
