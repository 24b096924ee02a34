// Tensor maps (TMA) of 2D row-major matrices, shared by the kernels that move boxes of them with
// the bulk-copy engine: host-side encoding through the driver entry point, device-side box loads
// into shared memory (counted on an mbarrier). sm_90 only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/bulk_copy.cuh"

namespace tandem::kernels::cuda {

// A map of the matrix [rows, cols] at `base` (elements of elem_bytes of `type`, `stride` elements
// between rows) in boxes of [box_cols, box_rows]; elements outside the matrix read as zeros and
// are not written. False if the driver is too old or refuses the map (alignment, box size).
// `swizzle`: how a box's rows land in shared memory (CU_TENSOR_MAP_SWIZZLE_128B: the layout wgmma
// reads with a 128-byte-swizzle descriptor; the box's rows must then be 128 bytes and its shared
// memory 1024-byte aligned).
bool encode_tensor_map_2d(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes,
                          const void* base, int64_t rows, int64_t cols, int64_t stride,
                          int box_cols, int box_rows,
                          CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE);

// The box at element coordinates (col, row) into this block's shared memory (128-byte aligned),
// its bytes counted on `bar`.
__device__ __forceinline__ void tensor_load_2d(void* dst, const CUtensorMap* map, int64_t col,
                                               int64_t row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(static_cast<int32_t>(col)),
      "r"(static_cast<int32_t>(row)), "r"(smem_u32(bar))
      : "memory");
}

}  // namespace tandem::kernels::cuda
