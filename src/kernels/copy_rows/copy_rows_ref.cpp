// CPU reference of the row gather/scatter.
#include <cstring>

#include "kernels/copy_rows/copy_rows.h"

namespace tandem::kernels {

void copy_rows_ref(const CopyRowsArgs& a, const ExecContext& ctx) {
  copy_rows_expect(a);
  const int64_t n = a.src.dim(0), width = a.in.dim(1), elem = dtype_size(a.in.dtype());
  const int32_t* src = a.src.data<const int32_t>();
  const int32_t* dst = a.dst.data<const int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    TANDEM_CHECK(src[i] >= 0 && src[i] < a.in.dim(0) && dst[i] >= 0 && dst[i] < a.out.dim(0),
                 "copy_rows: pair {} ({} -> {}) outside in {} / out {}", i, src[i], dst[i],
                 a.in.describe(), a.out.describe());
    std::memcpy(static_cast<char*>(a.out.raw()) + dst[i] * a.out.stride(0) * elem,
                static_cast<const char*>(a.in.raw()) + src[i] * a.in.stride(0) * elem,
                static_cast<size_t>(width * elem));
  }
}

}  // namespace tandem::kernels
