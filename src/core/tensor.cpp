// Tensor views and copies.
#include "core/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace tandem {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  return st;
}

int64_t Tensor::numel() const {
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<>());
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = std::move(shape);
  for (int64_t d : t.shape_)
    TANDEM_CHECK(d >= 0, "negative dimension in shape {}", shape_str(t.shape_));
  t.strides_ = contiguous_strides(t.shape_);
  t.dtype_ = dtype;
  t.device_ = device;
  const size_t bytes = static_cast<size_t>(t.nbytes());
  void* p = device_alloc(device, bytes);
  device_memset_zero(device, p, bytes);
  t.data_ = p;
  t.owner_ = std::shared_ptr<void>(p, [device](void* q) { device_free(device, q); });
  return t;
}

Tensor Tensor::wrap(void* data, Shape shape, DType dtype, Device device,
                    std::shared_ptr<void> owner) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  t.dtype_ = dtype;
  t.device_ = device;
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::slice(int d, int64_t begin, int64_t end) const {
  if (d < 0) d += ndim();
  TANDEM_CHECK(d >= 0 && d < ndim(), "slice: dim {} out of range for {}", d, describe());
  TANDEM_CHECK(0 <= begin && begin <= end && end <= shape_[d],
               "slice [{}, {}) out of range for dim {} of {}", begin, end, d, describe());
  Tensor t = *this;
  t.shape_[d] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[d] * dtype_size(dtype_);
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  if (d < 0) d += ndim();
  Tensor t = slice(d, index, index + 1);
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  TANDEM_CHECK(is_contiguous(), "reshape of a non-contiguous tensor {}", describe());
  int64_t n = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      infer = static_cast<int>(i);
    } else {
      n *= shape[i];
    }
  }
  if (infer >= 0) shape[infer] = n == 0 ? 0 : numel() / n;
  Tensor t = *this;
  t.shape_ = std::move(shape);
  TANDEM_CHECK(t.numel() == numel(), "reshape {} to {}: element counts differ", describe(),
               shape_str(t.shape_));
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::split_heads(int64_t heads) const {
  TANDEM_CHECK(ndim() == 2 && strides_[1] == 1 && heads > 0 && shape_[1] % heads == 0,
               "split_heads({}) of {} (strides {})", heads, describe(), shape_str(strides_));
  Tensor t = *this;
  const int64_t d = shape_[1] / heads;
  t.shape_ = {shape_[0], heads, d};
  t.strides_ = {strides_[0], d, 1};
  return t;
}

Tensor Tensor::to(Device device) const {
  TANDEM_CHECK(is_contiguous(), "to(): tensor {} is not contiguous", describe());
  Tensor t = zeros(shape_, dtype_, device);
  device_copy(t.data_, device, data_, device_, static_cast<size_t>(nbytes()));
  return t;
}

Tensor Tensor::host() const { return device_ == Device::kCpu ? *this : to(Device::kCpu); }

Tensor Tensor::to_f32() const {
  const Tensor host = this->host();
  TANDEM_CHECK(host.is_contiguous(), "to_f32(): tensor {} is not contiguous", describe());
  Tensor out = zeros(shape_, DType::kF32);
  float* o = out.data<float>();
  const int64_t n = numel();
  switch (dtype_) {
    case DType::kF32:
      std::copy_n(host.data<float>(), n, o);
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(host.data<bf16>()[i]);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) o[i] = f16_to_f32(host.data<f16>()[i]);
      break;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(host.data<int32_t>()[i]);
      break;
    case DType::kF8E4M3:  // the raw e4m3 values; block scales are the caller's (model/fp8.h)
      for (int64_t i = 0; i < n; ++i) o[i] = f8e4m3_to_f32(host.data<f8e4m3>()[i]);
      break;
  }
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  TANDEM_CHECK(
      src.shape_ == shape_ && src.dtype_ == dtype_ && is_contiguous() && src.is_contiguous(),
      "copy_from: {} <- {}", describe(), src.describe());
  device_copy(data_, device_, src.data_, src.device_, static_cast<size_t>(nbytes()));
}

void Tensor::zero_() {
  TANDEM_CHECK(is_contiguous(), "zero_ of a non-contiguous tensor {}", describe());
  device_memset_zero(device_, data_, static_cast<size_t>(nbytes()));
}

std::string Tensor::describe() const {
  return fmt::format("{}{} on {}", dtype_name(dtype_), shape_str(shape_), device_name(device_));
}

void expect_shape(const Tensor& t, const Shape& expected, const char* what) {
  TANDEM_CHECK(t.shape() == expected, "{}: expected shape {}, got {}", what, shape_str(expected),
               t.describe());
}

void expect_dtype(const Tensor& t, DType expected, const char* what) {
  TANDEM_CHECK(t.dtype() == expected, "{}: expected dtype {}, got {}", what, dtype_name(expected),
               t.describe());
}

}  // namespace tandem
