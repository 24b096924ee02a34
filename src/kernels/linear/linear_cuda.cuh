// Internal interface between the two CUDA linear paths (skinny weight streaming, tensor-core GEMM).
// Not part of the op interface: model code includes linear.h only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "kernels/linear/linear.h"
#include "kernels/linear/linear_plan.h"

namespace tandem::kernels {

#ifdef __CUDACC__
// D += A B for one m16n8k16 tile, bf16 in, fp32 accumulate (shared by both decode kernels).
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The four 8 x 8 b16 matrices at the rows lanes 8i..8i+7 point at (matrix i into r[i]): lane
// (g, t) receives row g, elements 2t and 2t + 1 of each, the mma fragment layout.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))));
}
#endif

// Decode/verify rows per launch of the narrow configurations (one or two B tiles; the other
// decode kernels: linear_mma_cuda.cu, linear_stream_cuda.cu) and of the persistent kernel's wide
// one (four B tiles, one pass over the weights for 32 rows).
constexpr int64_t kSkinnyMaxTokens = kLinearDecodeMaxTokens;  // linear.h
constexpr int64_t kWideMaxTokens = 32;
// The wgmma kernel (linear_wgmma_cuda.cu): any number of rows up to this in one launch (256
// sequences verifying k = 7 drafts: 2,048 rows); production: linear_decode_takes_wgmma.
constexpr int64_t kWgmmaMaxTokens = 2048;
// Production's choice between the two kernels of the decode order (the same bits, so it may
// follow speed alone): the persistent kernel up to 3 rows, and up to kPersistentMaxTokens rows of
// matrices with few 128-row tiles (fewer than half the SMs: out_f = 5120), the wgmma kernel
// otherwise. Measured on the 27B step (cec5795 against f2accc9, docs/benchmarks-history.md): verify
// of 2 and 3 rows at batch 1 3% faster on the persistent kernel, of 4 rows 3% faster with the large
// matrices on the wgmma kernel, 8 streams 1% faster with out_f = 5120 on the wgmma kernel.
constexpr int64_t kPersistentMaxTokens = 4;
inline bool linear_decode_takes_wgmma(int64_t n, int64_t out_f, int sms) {
  const bool few_row_tiles = (out_f + 127) / 128 * 2 < sms;
  return n > (few_row_tiles ? kPersistentMaxTokens : 3);
}
// The fallback switch: false forms decode groups of kSkinnyMaxTokens rows (the narrow
// configurations only) instead of kWgmmaMaxTokens. A row's bits are the same either way.
constexpr bool kWideDecodeGroups = true;
// Rows per decode group (linear_cuda forms groups [0, G), [G, 2G), ...): kWgmmaMaxTokens, or
// fewer under kWideDecodeGroups = false or a bench variant that runs an older rule
// (linear_skinny_set_variant; linear_mma_cuda.cu).
int64_t linear_decode_group_rows();

struct LinearShape {
  const void* x = nullptr;  // bf16 [n, in], row stride x_stride
  const void* w = nullptr;  // bf16 [out_f, in], contiguous
  void* out = nullptr;      // bf16|f32 [n, out_f] (kSwiGluPairs: bf16 [n, out_f / 2]), out_stride
  int64_t n = 0, in = 0, out_f = 0, x_stride = 0, out_stride = 0;
  bool vec_ok = false;  // 16-byte loads are legal (in, x_stride multiples of 8; aligned bases)
  // kSwiGluPairs (out_f a multiple of 16, bf16 out) and kAddToOut (bf16 out): only the persistent
  // kernel fuses them; the other paths are given kNone and y's tensor by linear_cuda.
  LinearEpilogue epilogue = LinearEpilogue::kNone;
  // LinearArgs::input_rms: only the persistent kernel takes it (the others are given false and
  // linear_cuda scales their y).
  bool input_rms = false;
  float input_rms_eps = 0.f;
  // FP8 weights (linear_fp8_cuda.cu only; w is then f8_e4m3 [out_f, in]): the block scales f32
  // [ceil(out_f / scale_block_rows), ceil(in / 128)] and the folded norm's g (bf16 [in], or null).
  const float* w_scale = nullptr;
  int64_t scale_block_rows = 128;
  const void* fold = nullptr;
};

// Tensor-core decode/verify path (n <= linear_decode_group_rows(), vec_ok): linear_mma_cuda.cu.
void linear_skinny_mma_bf16(const LinearShape& s, cudaStream_t stream);
void linear_skinny_mma_f32(const LinearShape& s, cudaStream_t stream);
// Bulk-copy (TMA engine) streaming variant of the same path: linear_stream_cuda.cu. `max_splits`
// caps the k-split across a thread-block cluster (1, 2, 4 or 8).
void linear_skinny_stream(const LinearShape& s, bool f32_out, int max_splits, cudaStream_t stream);
// Persistent bulk-copy variant: one launch of 1..kWideMaxTokens tokens walks every tile and
// k-range with a producer warp (linear_persistent_cuda.cu); `config` 0 is production, 1-4
// bench-only alternatives of the narrow configurations (the wide one runs production's),
// kLinearPersistentWide512 the bench-only alternative of the wide one (the narrow ones run
// production's). Every configuration computes the same bits.
// kLinearPersistentWide: 17..32 rows in the persistent kernel's wide configuration (the rule
// before the wgmma kernel). Above kWideMaxTokens rows the persistent kernel runs groups of 32
// unless the wgmma kernel takes the call (production: linear_decode_takes_wgmma).
constexpr int kLinearPersistentWide512 = 6;
constexpr int kLinearPersistentWide = 7;
void linear_skinny_persistent(const LinearShape& s, bool f32_out, int config, cudaStream_t stream);
// The wgmma kernel (linear_wgmma_cuda.cu), 1..kWgmmaMaxTokens rows, every epilogue and input_rms,
// the persistent kernel's bits; false (nothing launched) for rows that are not 16-byte loadable.
// Split mode (few row tiles: one k rank per block) needs linear_reserve_decode_workspace.
bool linear_decode_wgmma(const LinearShape& s, bool f32_out, cudaStream_t stream);
// input_rms calls of up to max_rows rows sum their tokens' squares inside the wgmma kernel (the
// producer warpgroup's spare warps, every item again: no extra launch) instead of in a kernel
// launched before it, unless the call splits items. Production: kInKernelSumsRows; bench variant
// 14 sets 16. The bits are the same.
constexpr int64_t kInKernelSumsRows = 8;
// Bench only: the wgmma kernel's item shape rule (linear_wgmma_shape.h): 0 production (rows rule
// up to 64 rows, cost rule above), 1 the cost rule at every row count (variant 18), 2 the rows
// rule at every row count (variant 19, production before 2026-12-05). The bits are the same.
void linear_wgmma_set_shape_rule(int rule);
// Bench only: every wgmma call in one item shape (tile_m x n, one of kWgmmaItemShapes), whatever
// the rule would pick; 0, 0: the rule's again (kernel_bench linear_shapes). The bits are the same.
void linear_wgmma_force_shape(int tile_m, int n);
void linear_wgmma_set_inkernel_sums(int64_t max_rows);
// Bench only: the wgmma kernel's split mode (linear_split.h): 0 production; 1 one rank per unit
// only when the items are fewer than the block slots (the rule before); 2 with class groups too.
// The bits are the same.
void linear_wgmma_set_split_rule(int rule);
// A tensor map of the bf16 matrix [rows, cols] (row stride `stride` elements) in boxes of
// [box_k, box_rows] (linear_fp8_batch_cuda.cu; elements out of bounds read as zeros). False if the
// driver refuses it.
bool linear_encode_rows(CUtensorMap* map, const void* base, int64_t rows, int64_t cols,
                        int64_t stride, int box_k, int box_rows);
// The same for the bytes of an FP8 matrix [rows, cols] (contiguous, cols even), in boxes of
// [box_k <= 512 (even), box_rows] (the map counts pairs of codes; box coordinates are k / 2).
bool linear_encode_fp8_rows(CUtensorMap* map, const void* base, int64_t rows, int64_t cols,
                            int box_k, int box_rows);
// The cluster occupancy every decode configuration plans with (production's 1..4-token one).
const std::array<int64_t, 4>& linear_plan_resident();
// FP8 decode/verify rows (linear_fp8_cuda.cu): 1..kFp8DecodeMaxTokens rows of block-scaled
// f8_e4m3 weights, every epilogue, input_rms and the folded norm (LinearShape::fold).
constexpr int64_t kFp8DecodeMaxTokens = 8;
void linear_fp8_decode(const LinearShape& s, bool f32_out, cudaStream_t stream);
// Whether linear_fp8_decode takes this call's 5..8 rows in its staged form (production where the
// plan's range fits 5120 k; linear_fp8_set_staged_rows): then the batched kernel does not.
bool linear_fp8_decode_stages_rows(const LinearShape& s);
// The plan every FP8 decode kernel runs for a weight shape (ranges multiples of 128 k; the
// occupancy of linear_fp8_cuda.cu's 1-2 row configuration): a row's bits depend on it.
LinearPlan linear_fp8_plan(int64_t out_f, int64_t in);
// The batched FP8 kernel (linear_fp8_batch_cuda.cu): 1..kFp8BatchMaxTokens rows in one pass over
// the weights, the bits of linear_fp8_decode, every epilogue, input_rms and the fold. Returns
// false without launching when it cannot take the call (scale blocks of fewer than 8 rows, a
// tensor map the driver refuses). Production takes it for decode groups of kFp8BatchMinTokens or
// more rows (at 8 rows it streams 2.0-3.0 TB/s on the 27B shapes where linear_fp8_cuda.cu's
// 8-row configuration streams 2.1-2.8, faster on 4 of the 5; at 1-4 rows linear_fp8_cuda.cu is
// faster on all: 2.5-3.8 against 1.9-3.0; kernel-bench-h200-linear-fp8-b3f9187.json).
constexpr int64_t kFp8BatchMinTokens = 5;
constexpr int64_t kFp8BatchMaxTokens = 32;
bool linear_fp8_decode_batch(const LinearShape& s, bool f32_out, cudaStream_t stream);
// The FP8 wgmma kernel (linear_fp8_wgmma_cuda.cu): 1..kFp8WgmmaMaxTokens decode rows in one
// launch (plus one of fp8_tokens_kernel before it), the bits of linear_fp8_decode, every epilogue,
// input_rms and the fold. `scratch` (128-byte aligned, scratch_bytes long) receives the tokens' f16
// operand rows and sums of squares: linear_fp8_wgmma_scratch_bytes(n, in) bytes. Returns false
// without launching when it cannot take the call (too many rows, too small a scratch, f32 out with
// an epilogue). Production takes it for decode calls of fp8_wgmma_min_rows or more rows
// (linear_fp8_set_wgmma forces another count); smaller ones read the weights once per 32 rows.
constexpr int64_t kFp8WgmmaMaxTokens = 2048;
// From 17 rows where the matrix has at least one 64-row tile per SM (gate|up, in_proj, q|k|v on
// the 27B shape: at 32 rows the wgmma kernel's 32-token quads ran 131-139 TFLOP/s against the
// groups' 80-109, H100, 2026-12-06, bench/results/h100-2026-12-06j/; at 17-31 rows the batched
// kernel's 3-slot configuration is as slow as at 32 rows, and with the quads from 17 rows the
// 27B-FP8 step at 24 streams went 21.58 -> 18.88 ms and the 8-stream verify with k = 2 (24 rows)
// 1.516 -> 1.298x decode, H100, 2026-12-07, bench/results/h100-2026-12-07b.tar.xz), from 33 where
// it has fewer (out_f = 5120, down and out/o_proj: at 32 rows the groups of 32 ran 126 / 103
// TFLOP/s against the quads' 74 / 77, at 64 rows 126 / 103 against 147 / 128).
inline constexpr int64_t kFp8WgmmaWideMinRows = 17;
constexpr int64_t fp8_wgmma_min_rows(int64_t out_f, int sms) {
  return out_f / 64 >= sms ? kFp8WgmmaWideMinRows : kFp8BatchMaxTokens + 1;
}
int64_t linear_fp8_wgmma_scratch_bytes(int64_t n, int64_t in);
bool linear_fp8_decode_wgmma(const LinearShape& s, bool f32_out, void* scratch,
                             int64_t scratch_bytes, cudaStream_t stream);
void linear_fp8_wgmma_set_config(int config, bool split);  // linear_fp8_set_wgmma's
Fp8Halves linear_fp8_wgmma_set_halves(Fp8Halves mode);     // linear_fp8_set_quad_halves'
// Create the prefill GEMMs' cuBLASLt handles and workspaces now (linear_reserve_prefill_gemms):
// linear_fp8_prefill_tc's (linear_fp8_prefill_cuda.cu) and the bf16 one's (linear_gemm_cuda.cu).
void linear_fp8_reserve_prefill_gemm();
void linear_reserve_prefill_gemm();
// FP8 prefill rows on the tensor cores (linear_fp8_prefill_cuda.cu; production, default on):
// false where it is off or does not take the matrix (then the dequantised path runs); scratch
// holds the token codes, their scales and the GEMM's bf16 output (passes of fewer rows if short).
bool linear_fp8_prefill_tc(const LinearShape& s, void* scratch, int64_t scratch_bytes,
                           cudaStream_t stream);
// The FP8 matrix dequantised to bf16, out[o, i] = bf16(f32(w[o, i]) scale (1 + g_i)) (g_i = 0
// without a fold), the load-time formula of a folded bf16 matrix: the prefill path's weights.
void linear_fp8_dequantize(const LinearShape& s, void* out, cudaStream_t stream);
void linear_gemm_bf16(const LinearShape& s, cudaStream_t stream);
void linear_gemm_f32(const LinearShape& s, cudaStream_t stream);

}  // namespace tandem::kernels
