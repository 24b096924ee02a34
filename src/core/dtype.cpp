// IEEE half <-> float conversions (the only non-trivial scalar conversions in core).
#include "core/dtype.h"

#include <algorithm>
#include <cmath>

namespace tandem {

float f16_to_f32(f16 v) {
  const uint32_t sign = (v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t mant = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};
  if (abs >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return f16{sign};
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp)
    uint32_t half = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return f16{static_cast<uint16_t>(sign | half)};
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return f16{static_cast<uint16_t>(sign | (r >> 13))};
}

f8e4m3 f32_to_f8e4m3(float f) {
  if (std::isnan(f)) return f8e4m3{0x7f};
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.f) return f8e4m3{static_cast<uint8_t>(sign | 0x7e)};
  // The quantum of a's binade (2^(E-3), or 2^-9 below the normal range); a / quantum is exact, and
  // nearbyint rounds it to nearest even in the default rounding mode.
  int ex = 0;
  std::frexp(a, &ex);  // a = fr 2^ex, fr in [0.5, 1): binade E = ex - 1
  const float quantum = std::ldexp(1.f, std::max(ex - 1, -6) - 3);
  const float v = std::nearbyint(a / quantum) * quantum;
  if (v < 0x1p-6f) return f8e4m3{static_cast<uint8_t>(sign | static_cast<uint8_t>(v * 0x1p9f))};
  const float fr = std::frexp(v, &ex);  // v = (2 fr) 2^(ex - 1)
  const int mant = static_cast<int>((2.f * fr - 1.f) * 8.f);
  return f8e4m3{static_cast<uint8_t>(sign | ((ex - 1 + 7) << 3) | mant)};
}

}  // namespace tandem
