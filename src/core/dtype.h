// Element types and the scalar conversions between them (bf16/f16 <-> f32, round to nearest even;
// f8_e4m3 (OCP float8_e4m3fn: no infinities, 0x7f/0xff NaN, max 448) <-> f32, saturating).
// No device code here; CUDA kernels use their own intrinsics for the same formats.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

namespace tandem {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kF8E4M3 };

constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kF8E4M3:
      return "f8_e4m3";
  }
  return "?";
}

// Storage types: plain 16-bit payloads so that host code never does arithmetic on them directly.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};
struct f8e4m3 {
  uint8_t bits;
};

inline float bf16_to_f32(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return bf16{static_cast<uint16_t>(u >> 16)};
}

float f16_to_f32(f16 v);
f16 f32_to_f16(float f);

// e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal (m 2^-9). Exact.
inline float f8e4m3_to_f32(f8e4m3 v) {
  const uint32_t e = (v.bits >> 3) & 0xfu, m = v.bits & 7u;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = e == 0 ? static_cast<float>(m) * 0x1p-9f
                           : static_cast<float>(8 + m) * static_cast<float>(1 << e) * 0x1p-10f;
  return (v.bits & 0x80u) ? -mag : mag;
}
// Round to nearest even, saturating to +-448 (the OCP "satfinite" conversion that FP8 checkpoint
// tools use); NaN stays NaN.
f8e4m3 f32_to_f8e4m3(float f);

inline float to_f32(float v) { return v; }
inline float to_f32(bf16 v) { return bf16_to_f32(v); }
inline float to_f32(f16 v) { return f16_to_f32(v); }
inline float to_f32(f8e4m3 v) { return f8e4m3_to_f32(v); }

}  // namespace tandem
