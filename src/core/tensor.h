// Tensor: a strided view (shape, strides in elements, dtype, device) over memory kept alive by a
// shared owner. Views (slice, reshape, index) share the owner. Kernels take Tensors or raw
// pointers; a Tensor never allocates behind the caller's back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace tandem {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[2, 3, 4]"

class Tensor {
 public:
  Tensor() = default;

  // Fresh contiguous memory, zero-filled.
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::kCpu);
  // Non-owning or externally owned memory (e.g. an mmap'd checkpoint); `owner` keeps it alive.
  static Tensor wrap(void* data, Shape shape, DType dtype, Device device,
                     std::shared_ptr<void> owner);

  bool defined() const { return data_ != nullptr || numel() == 0; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
  int64_t stride(int i) const { return strides_.at(i < 0 ? i + ndim() : i); }
  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }

  // Views.
  Tensor slice(int dim, int64_t begin, int64_t end) const;  // [begin, end) along dim
  Tensor select(int dim, int64_t index) const;              // drops dim
  Tensor reshape(Shape shape) const;                        // contiguous tensors only
  // Splits a 2-D [rows, heads * d] view (last dim contiguous) into [rows, heads, d].
  Tensor split_heads(int64_t heads) const;

  // Copies.
  Tensor to(Device device) const;     // contiguous copy on `device`
  Tensor host() const;                // this tensor if it is on the host, else a host copy
  Tensor to_f32() const;              // host f32 copy of any float tensor
  void copy_from(const Tensor& src);  // same shape and dtype, both contiguous
  void zero_();

  std::string describe() const;  // "bf16[64, 128] on cpu"

 private:
  void* data_ = nullptr;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  std::shared_ptr<void> owner_;
};

Shape contiguous_strides(const Shape& shape);

// Programming-error check for kernel arguments: names the argument, expected and actual.
void expect_shape(const Tensor& t, const Shape& expected, const char* what);
void expect_dtype(const Tensor& t, DType expected, const char* what);

}  // namespace tandem
