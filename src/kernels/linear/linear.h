// Linear layer y = x W^T with fp32 accumulation, W in the PyTorch [out, in] layout, optionally
// followed by an epilogue on y. W may be block-scaled FP8 (f8_e4m3 with weight_scale_inv, below):
// the reference computes exactly the linear of its fp32 dequantisation (docs/fp8.md).
// Row invariance (DESIGN.md inv. 2): every output element is one dot product computed by the same
// code in the same order whatever n_tokens is; any k-split is fixed by the weight shape alone.
#pragma once

#include <string>

#include "core/exec_context.h"
#include "core/tensor.h"
#include "kernels/swiglu/swiglu.h"

namespace tandem::kernels {

enum class LinearEpilogue {
  kNone,  // out = y
  // The MLP's gate|up projection followed by SwiGLU, out_f = 2 inter, inter a multiple of 8. The
  // weight rows come in 16-row groups, 8 gate rows then the up rows of the same 8 features (the
  // pair layout of swiglu.h), and out [n_tokens, inter] holds
  //   out[t, 8g + i] = silu(y_gate) * y_up,  y_gate = y[t, 16g + i], y_up = y[t, 16g + 8 + i],
  // with y_gate and y_up first rounded to out's dtype (bf16 on CUDA, f32 on the CPU) and the rest
  // computed in fp32 exactly as swiglu() does: the result is bit-identical to linear into a
  // [n_tokens, 2 inter] tensor followed by swiglu() over its pairs. The decode kernel
  // (n_tokens <= 16) fuses it, since a 16-row weight tile is one group; every other path writes y
  // into `scratch` and then runs swiglu() on it.
  kSwiGluPairs,
  // A residual-stream write: out += y, i.e. out = round(out + round(y)) with out's dtype (act,
  // [n_tokens, out]), bit-identical to linear into a tensor followed by rms_norm's residual add.
  // The decode kernel fuses it; every other path writes y into `scratch` first.
  kAddToOut,
};

// Columns of an FP8 weight's scale block (the released checkpoints' 128 x 128 blocks).
constexpr int64_t kFp8BlockCols = 128;

struct LinearArgs {
  Tensor x;       // act [n_tokens, in]   (row stride may exceed in; last dim contiguous)
  Tensor weight;  // bf16|f16|f32|f8_e4m3 [out, in], contiguous
  // act or f32 [n_tokens, out] (row stride may exceed out); kSwiGluPairs: act [n_tokens, out / 2]
  Tensor out;
  LinearEpilogue epilogue = LinearEpilogue::kNone;
  // kSwiGluPairs and kAddToOut, required on every device: act [n_tokens, out] (last dim
  // contiguous) for y on the paths that do not fuse the epilogue; its contents afterwards are
  // unspecified.
  Tensor scratch;
  // Input RMS scale, for an RMSNorm folded into the weights (W'[o, i] = W[o, i] g_i, see
  // fold_rms_norm): y[t, :] is multiplied by inv_t = 1 / sqrt(sum_i x[t, i]^2 / in + eps), the sum
  // in fp32 over x's own values, before the epilogue. The decode kernel scales y before its one
  // rounding; the other paths read x[t, :] inv_t rounded to act, written into input_scratch
  // (prefill numerics, not decode's bits).
  bool input_rms = false;
  float input_rms_eps = 1e-6f;
  Tensor input_scratch;  // input_rms on CUDA: act [n_tokens, in], last dim contiguous
  // The numerics family of each row on CUDA (the reference computes every row the same way):
  // rows [0, decode_rows) are decode/verify rows, computed with the decode kernel's arithmetic
  // whatever their number (so a generated token's row has the same bits at batch 1 and 256), and
  // rows [decode_rows, n_tokens) prefill rows, computed by a GEMM whose rows are invariant among
  // prefill calls. -1: the rows' family follows n_tokens alone (all decode rows up to
  // kLinearDecodeMaxTokens, else all prefill rows), for callers that run one kind of row.
  int64_t decode_rows = -1;
  // (Last, so that positional initialisers of the fields above stay valid.)
  // f8_e4m3 weights only (CPU reference; the CUDA loader dequantises FP8 to bf16): the block
  // scales, f32 [ceil(out / scale_block_rows), ceil(in / kFp8BlockCols)], contiguous. Element
  // (o, i) of the matrix is w[o, i] * weight_scale_inv[o / scale_block_rows, i / kFp8BlockCols],
  // one fp32 multiply; blocks at the right and bottom edges may be partial. scale_block_rows is
  // 128 as stored in a checkpoint, less where the loader interleaved rows (gate|up: 8).
  Tensor weight_scale_inv;
  int64_t scale_block_rows = 128;
  // f8_e4m3 weights on CUDA with input_rms: the zero-centred RMSNorm weight g (bf16 [in]) that a
  // bf16 matrix would have folded in (fold_rms_norm); FP8 bytes are never rewritten, so the FP8
  // kernels apply it instead: the decode kernel multiplies each x element by (1 + g) as
  // bf16(x + x g) before the product, the prefill path folds it into its dequantised bf16 copy
  // (docs/fp8.md). Empty: nothing folded. CUDA only (the CPU loader does not fold norms).
  Tensor weight_fold;
};

// Rows [f0, f1) of an FP8 matrix w [rows, in] dequantised into out [f1 - f0, in] (f32): element
// (o, i) is f8e4m3_to_f32(w[o, i]) * scale[o / block_rows, i / kFp8BlockCols], one fp32 multiply,
// as LinearArgs::weight_scale_inv says (the reference's and the loader's one formula).
void fp8_dequantize_rows(const f8e4m3* w, const float* scale, int64_t block_rows, int64_t in,
                         int64_t f0, int64_t f1, float* out);

// The prefill path of an FP8 weight on CUDA dequantises the matrix into a bf16 scratch before its
// GEMM; this sizes that scratch (a process-wide device buffer) for matrices of up to `numel`
// elements, once at load, so that no step allocates. No-op on the CPU.
void linear_reserve_fp8_scratch(int64_t numel, Device device);

// The decode linear's wgmma kernel (linear_wgmma_cuda.cu) adds the k ranks (and class groups) of
// calls with few row tiles through a workspace (split mode: one rank, or some of its classes, per
// block, so that such calls fill the GPU); this reserves it (a process-wide device buffer of 64
// MB), once at load, so that no step allocates. Without it those calls run every rank in one block
// (the same bits, slower). No-op on the CPU.
void linear_reserve_decode_workspace(Device device);
// The prefill GEMMs' cuBLASLt handles and fixed workspaces (32 MB each: the bf16 one, and with
// `fp8` the block-scaled FP8 one), created at load rather than at the first prefill, so that they
// are allocated before the engine sizes its pools from the free memory. No-op on the CPU.
void linear_reserve_prefill_gemms(Device device, bool fp8);

// The block scales an f8_e4m3 weight needs, on every device: weight_scale_inv f32 [ceil(out /
// scale_block_rows), ceil(in / kFp8BlockCols)], contiguous.
inline void linear_expect_fp8_scales(const LinearArgs& a, const char* op) {
  const int64_t out_f = a.weight.dim(0), in = a.weight.dim(1), r = a.scale_block_rows;
  const Shape shape{r > 0 ? (out_f + r - 1) / r : 0, (in + kFp8BlockCols - 1) / kFp8BlockCols};
  TANDEM_CHECK(
      r > 0 && a.weight_scale_inv.raw() != nullptr && a.weight_scale_inv.dtype() == DType::kF32 &&
          a.weight_scale_inv.is_contiguous() && a.weight_scale_inv.shape() == shape,
      "{}: FP8 weight {} needs weight_scale_inv f32 [ceil(out / {}), ceil(in / {})] = "
      "[{}, {}], got {}",
      op, a.weight.describe(), r, kFp8BlockCols, shape[0], shape[1], a.weight_scale_inv.describe());
}

// Up to this many rows, a call with decode_rows = -1 takes the decode family.
constexpr int64_t kLinearDecodeMaxTokens = 16;

// The scratch rule of the epilogues: [n_tokens, out].
inline void linear_expect_scratch(const LinearArgs& a, const char* op) {
  const int64_t n_tokens = a.x.dim(0), out_f = a.weight.dim(0);
  TANDEM_CHECK(
      a.scratch.raw() != nullptr && a.scratch.dim(0) == n_tokens && a.scratch.dim(1) == out_f,
      "{} (epilogue): scratch must be [n_tokens={}, out={}], got {}", op, n_tokens, out_f,
      a.scratch.describe());
}

// Folds an RMSNorm's weight into the matrix that reads its output: w[o, i] *= g_i (1 + g_i when
// zero_centred), in fp32, rounded once to w's dtype. With LinearArgs::input_rms the linear then
// reads the un-normed rows. weight: host tensor [out, in] (bf16|f32), norm: [in].
void fold_rms_norm(Tensor& weight, const Tensor& norm, bool zero_centred);

// kSwiGluPairs' shape rules, on every device: whole gate|up groups of rows, scratch [n_tokens,
// out].
inline void linear_expect_swiglu_pairs(const LinearArgs& a, const char* op) {
  const int64_t out_f = a.weight.dim(0);
  TANDEM_CHECK(out_f % (2 * kSwigluPairGroup) == 0,
               "{} (swiglu epilogue): weight {} must have a multiple of {} rows (gate|up pairs)",
               op, a.weight.describe(), 2 * kSwigluPairGroup);
  linear_expect_scratch(a, op);
}

void linear_ref(const LinearArgs& a, const ExecContext& ctx);
// Which kernel a linear's rows take on `device`, one line for the start-up log (DESIGN.md inv. 6).
std::string linear_paths(Device device);
#ifdef TANDEM_CUDA
void linear_cuda(const LinearArgs& a, const ExecContext& ctx);
std::string linear_cuda_paths();
// Benchmark-only: picks a decode-kernel variant (0 = production); returns the number of variants.
// Only the persistent kernel's variants take LinearEpilogue::kSwiGluPairs.
int linear_skinny_set_variant(int v);
// Benchmark-only: every bf16 wgmma decode call in item shape tile_m x n (one of
// linear_wgmma_shape.h's kWgmmaItemShapes) whatever production's rule picks; 0, 0: the rule's
// again. The same bits.
void linear_set_wgmma_shape(int tile_m, int n);
// Tests and benchmarks only: the bf16 decode order's specification (linear_order_spec_cuda.cu, one
// warp per 16 weight rows and 8 tokens, plain loads; slow): bf16 x [n, in] (in a multiple of 8) and
// weight, f32 out [n, out], no epilogue or input_rms. Every bf16 decode kernel gives its bits.
void linear_decode_order_spec(const LinearArgs& a, const ExecContext& ctx);
// Benchmark-only: FP8 decode rows of 1-4 tokens with the tokens staged once per block (true,
// production) or carried in every ring slot (linear_fp8_cuda.cu); the bits are the same.
void linear_fp8_set_staging(bool on);
// Benchmark-only: the FP8 plan with `splits` ranks per tile (1, 2, 4, 8) instead of plan_linear's,
// where clusters of that many fit and every rank has k (else plan_linear's); 0 restores it. Other
// bits: kernel_bench times it, nothing checks its rows.
void linear_fp8_set_plan_splits(int splits);
// Benchmark and test only: which FP8 decode rows the batched FP8 kernel takes, in groups of up to
// 32 rows: kOff none (launches of up to 8 rows of linear_fp8_cuda.cu, and no FP8 wgmma kernel),
// kProduction groups of more than 4 rows, kAll every group. The bits are the same.
enum class Fp8BatchMode { kOff, kProduction, kAll };
void linear_fp8_set_batch(Fp8BatchMode mode);
// Benchmark and test only: FP8 decode calls of at least min_rows rows go to the FP8 wgmma kernel
// (linear_fp8_wgmma_cuda.cu; negative: production's, 17 or 33 by the matrix's row tiles per SM,
// linear_cuda.cuh's fp8_wgmma_min_rows; more than a call has: never), in
// one launch per 2,048 rows, when the prefill scratch can hold their f16 tokens; `config` 0 lets it
// choose its item shape (linear_fp8_wgmma_shape.h), 1..5 forces one (128 x 64, 64 x 64, 128 x 32,
// 64 x 32, 192 x 32 rows x tokens; the 32-token ones in the quad form, 192 x 32 with three consumer
// warpgroups); `split` false keeps every item whole (no split mode). The bits are the same.
void linear_fp8_set_wgmma(int64_t min_rows, int config, bool split = true);
// Class halves in the FP8 wgmma kernel's quad form (32-token items): a unit of half an item's
// classes (pass 0: classes 0-3 of every rank, pass 1: classes 4-7), which posts its sums for
// fp8_finish_halves_kernel to add in the whole walk's order, so the bits are the same. kOff
// (production) whole items; kRemainder (opt-in fp8-quad-halves) the items of a call's last,
// partial wave of blocks where, two units each, they fit one wave, and the configuration estimate
// counts them (at up to 32 rows too; linear_fp8_wgmma_shape.h); kAll every item (tests). Measured
// (H100, 2026-12-07): gate|up at 32 rows 134 -> 138 TFLOP/s (its third wave, 16 items on 264
// slots, was not what bounds it), the 27B-FP8 step at 32 streams -1.4%; down at 32 rows in the
// 64 x 32 quads, every item halved, 74 -> 115. Returns the mode before.
enum class Fp8Halves { kOff, kRemainder, kAll };
Fp8Halves linear_fp8_set_quad_halves(Fp8Halves mode);
// Which kernels FP8 prefill rows take where the tensor-core path (below) does not: false
// (production) the matrix dequantised into the scratch and the bf16 prefill path, once per call,
// however few the rows; true the decode order's kernels (every row a decode row: the FP8 wgmma
// kernel from fp8_wgmma_min_rows), which read the codes once. Either rule is the same for every
// call, so prefill rows stay invariant; the bits differ between them. Production keeps the
// dequantisation: on the H200 (2026-12-05, 27B-FP8, one 8,192-token prompt) it prefilled 7,206
// tok/s against the decode order's 4,238 (docs/fp8.md).
void linear_fp8_set_prefill_decode_order(bool on);
// FP8 prefill rows on the tensor cores (production, default on): the tokens quantised to e4m3
// per 128-k block (the checkpoints' "dynamic" activation scheme) and cuBLASLt's block-scaled FP8
// GEMM, where it takes the matrix (128-row scale blocks, no SwiGLU pairs; else the rule above).
// Other bits than the dequantised path (FP8 activations); rows stay invariant. Faster than the
// dequantised path: an 8,192-token 27B-FP8 prefill 8,791 against 7,287 tok/s (H100, 2026-12-06,
// docs/fp8.md); false (`--fp8-prefill dequantize`) keeps every prefill row on bf16 activations,
// the CPU reference's numerics. Returns the previous value.
bool linear_fp8_set_prefill_tensor_cores(bool on);
// Production (default on; false for kernel_bench and tests): FP8 decode calls of 5..8 rows of a
// matrix whose rank range fits 5,120 k take the 1-8-row kernel with the tokens staged once per
// block (as 1-4 rows do) instead of the batched kernel, which converts them at every step of
// every tile (27B-FP8 at 8 streams: 13.23 -> 12.87 ms on an H100). The same bits. Returns the
// previous value.
bool linear_fp8_set_staged_rows(bool on);
// The deep ring (on by default): FP8 decode calls of 1 row of a matrix whose rank range fits
// 5,120 k stream through 5 ring slots instead of 4 (linear_fp8_cuda.cu, DeepCfg); off: the 4-slot
// staged form (kernel_bench, tests). The same bits. Returns the previous value.
bool linear_fp8_set_deep_ring(bool on);
int64_t linear_fp8_prefill_tensor_core_calls();  // calls that took it since start-up (tests)
#endif

inline void linear(const LinearArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return linear_cuda(a, ctx);
#endif
  linear_ref(a, ctx);
}

}  // namespace tandem::kernels
