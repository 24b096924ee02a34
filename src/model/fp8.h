// Block-scaled FP8 weights (docs/fp8.md) on the host: dequantisation, and the row-scale layout
// that lets the loader stack and interleave FP8 matrices by rows without touching a weight byte.
// Element (o, i) of an FP8 matrix is f32(w[o, i]) * scale[o / block_rows, i / kFp8BlockCols], one
// fp32 multiply; scales are f32 [ceil(out / block_rows), ceil(in / kFp8BlockCols)].
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tandem {

// Rows of a released checkpoint's scale block (its columns: kernels::kFp8BlockCols).
constexpr int64_t kFp8BlockRows = 128;

// An FP8 matrix and its scales, f8_e4m3 [rows, cols] and f32 [ceil(rows / 128), ceil(cols / 128)].
struct Fp8Matrix {
  Tensor w, scale;
};

// The released recipe (tools/make_fp8_checkpoint.py does the same): per 128 x 128 block,
// scale = max(amax, 1e-12) / 448 and w = e4m3(v / scale), round to nearest even, saturating. f is
// a host f32 matrix. (Synthetic FP8 weights for the bench.)
Fp8Matrix fp8_quantize(const Tensor& f);

// f32 [rows, cols]: the FP8 matrix w (f8_e4m3 [rows, cols]) dequantised with its scales.
Tensor fp8_dequantize(const Tensor& w, const Tensor& scale, int64_t block_rows);

// The scales of a [rows, cols] matrix regrouped from block_rows-row blocks to `r`-row groups (r
// divides block_rows): group g (rows [g r, g r + r)) takes the scales of block g r / block_rows.
// The dequantised matrix is unchanged; what changes is only that rows can now be moved in whole
// groups of r. f32 [ceil(rows / r), scale.dim(1)].
Tensor fp8_scale_rows(const Tensor& scale, int64_t rows, int64_t block_rows, int64_t r);

}  // namespace tandem
