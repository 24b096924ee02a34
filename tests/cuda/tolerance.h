// The one tolerance table of the CUDA conformance suite, keyed by the output dtype: the relative
// L2 error ||out - ref|| / ||ref|| a CUDA op may show against its CPU reference when both read the
// same (bf16-representable) inputs. bf16 outputs carry one bf16 rounding (2^-9) plus fp32
// reassociation; f32 outputs only reassociation; integer outputs must match exactly.
// Do not widen an entry to make a test pass: find out why the kernel differs.
#pragma once

#include "core/dtype.h"

namespace tandem::test {

inline double tolerance(DType out) {
  switch (out) {
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    case DType::kF32:
      return 1e-4;
    case DType::kI32:
    case DType::kF8E4M3:  // never an output dtype
      return 0.0;
  }
  return 0.0;
}

}  // namespace tandem::test
