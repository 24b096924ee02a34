// NumPy .npy files (format 1.0, little-endian float32 / int32, C order): written by
// `tandem score`, read by the tests that compare against goldens made with NumPy.
#pragma once

#include <string>

#include "core/tensor.h"

namespace tandem {

void write_npy(const std::string& path, const Tensor& t);  // f32 or i32, host, contiguous
Tensor read_npy(const std::string& path);                  // '<f4' or '<i4' only

}  // namespace tandem
