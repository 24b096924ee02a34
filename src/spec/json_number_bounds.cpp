// Bounds on JSON numbers with fractions (json_number_bounds.h).
#include "spec/json_number_bounds.h"

#include <algorithm>
#include <array>

namespace tandem::json_number {

namespace {

constexpr std::array<Scaled, 39> kPow10 = [] {
  std::array<Scaled, 39> p{};
  p[0] = 1;
  for (size_t i = 1; i < p.size(); ++i) p[i] = p[i - 1] * 10;
  return p;
}();

// A decimal text's value times 10^15, rounded down and up, clamped to [-kBeyond, kBeyond].
void scaled(const std::string& number, Scaled& floor_v, Scaled& ceil_v) {
  size_t i = 0;
  const bool negative = !number.empty() && number[0] == '-';
  i += negative ? 1 : 0;
  std::string digits;
  int64_t exp10 = 0;
  bool fraction = false;
  for (; i < number.size(); ++i) {
    const char c = number[i];
    if (c >= '0' && c <= '9') {
      digits += c;
      exp10 -= fraction ? 1 : 0;
    } else if (c == '.') {
      fraction = true;
    } else if (c == 'e' || c == 'E') {
      exp10 += std::stoll(number.substr(i + 1));
      break;
    }
  }
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  Scaled lo = 0, hi = 0;  // the magnitude's floor and ceiling
  if (!digits.empty()) {
    bool rest = false;  // nonzero digits dropped past 36 (a longer text than any schema's)
    if (digits.size() > 36) {
      rest = digits.find_first_not_of('0', 36) != std::string::npos;
      exp10 += static_cast<int64_t>(digits.size()) - 36;
      digits.resize(36);
    }
    Scaled m = 0;
    for (char c : digits) m = m * 10 + (c - '0');
    const int64_t e = exp10 + 15;
    if (e >= 0) {
      if (static_cast<int64_t>(digits.size()) + e > 31) {
        lo = hi = kBeyond;
      } else {
        lo = m * kPow10[static_cast<size_t>(e)];
        hi = lo + (rest ? 1 : 0);
      }
    } else if (-e > 38) {
      lo = 0;
      hi = 1;
    } else {
      const Scaled d = kPow10[static_cast<size_t>(-e)];
      lo = m / d;
      hi = lo + (m % d != 0 || rest ? 1 : 0);
    }
    lo = std::min(lo, kBeyond);
    hi = std::min(hi, kBeyond);
  }
  floor_v = negative ? -hi : lo;
  ceil_v = negative ? -lo : hi;
}

Scaled magnitude(const Text& t) {
  return static_cast<Scaled>(t.int_value) * kScale +
         static_cast<Scaled>(t.frac_value) * kPow10[static_cast<size_t>(15 - t.frac_digits)];
}

// Whether the grid points a, a + step, ... up to `last` reach [plo, phi].
bool meets(Scaled a, Scaled last, Scaled step, Scaled plo, Scaled phi) {
  Scaled x = a;
  if (plo > a) x = a + (plo - a + step - 1) / step * step;
  return x <= std::min(last, phi);
}

}  // namespace

void narrow(Bounds& b, Side side, const std::string& number) {
  Scaled fl = 0, ce = 0;
  scaled(number, fl, ce);
  switch (side) {
    case Side::kMinimum:
      b.lo = std::max(b.lo, ce);
      break;
    case Side::kExclusiveMinimum:
      b.lo = std::max(b.lo, fl + 1);
      break;
    case Side::kMaximum:
      b.hi = std::min(b.hi, fl);
      break;
    case Side::kExclusiveMaximum:
      b.hi = std::min(b.hi, ce - 1);
      break;
  }
}

bool add(Text& t, unsigned char c) {
  if (c == '-') {
    t.negative = true;
    return true;
  }
  if (c == '.') {
    t.point = true;
    return t.int_digits < kMaxDigits;  // room for the fraction's first digit
  }
  if (c < '0' || c > '9') return false;  // an exponent
  const auto d = static_cast<uint64_t>(c - '0');
  if (t.point) {
    if (t.int_digits + t.frac_digits >= kMaxDigits) return false;
    ++t.frac_digits;
    t.frac_value = t.frac_value * 10 + d;
    return true;
  }
  if (!t.started) {
    t.started = true;
    t.zero = d == 0;
    t.int_digits = t.zero ? 0 : 1;
    t.int_value = d;
    return true;
  }
  if (t.zero || t.int_digits >= kMaxDigits) return false;
  ++t.int_digits;
  t.int_value = t.int_value * 10 + d;
  return true;
}

bool feasible(const Bounds& b, const Text& t) {
  if (b.empty()) return false;
  // On magnitudes: the text's value is -x when negative.
  const Scaled plo = t.negative ? -b.hi : b.lo, phi = t.negative ? -b.lo : b.hi;
  if (!t.started) {  // "" or "-": some first digit
    for (unsigned char c = '0'; c <= '9'; ++c) {
      Text u = t;
      if (add(u, c) && feasible(b, u)) return true;
    }
    return false;
  }
  const int k = t.int_digits, f = t.frac_digits, r = kMaxDigits - k - f;
  if (t.point) {  // [x, x + 10^-f) on the grid of the digits left
    if (f == 0 && r == 0) return false;
    const Scaled x = magnitude(t), unit = kPow10[static_cast<size_t>(15 - f)];
    const Scaled step = kPow10[static_cast<size_t>(15 - f - r)];
    return meets(x, x + unit - step, step, plo, phi);
  }
  if (t.zero) return meets(0, kScale - 1, 1, plo, phi);  // "0" or "0." and up to 15 digits
  // j more integer digits, then up to r - j fraction digits.
  for (int j = 0; j <= r; ++j) {
    const Scaled i_lo = static_cast<Scaled>(t.int_value) * kPow10[static_cast<size_t>(j)];
    const Scaled step = kPow10[static_cast<size_t>(15 - (r - j))];
    if (meets(i_lo * kScale, (i_lo + kPow10[static_cast<size_t>(j)]) * kScale - step, step, plo,
              phi)) {
      return true;
    }
  }
  return false;
}

bool satisfiable(const Bounds& b) {
  Text negative;
  add(negative, '-');
  return feasible(b, Text{}) || feasible(b, negative);
}

bool within(const Bounds& b, const Text& t) {
  const Scaled x = magnitude(t), v = t.negative ? -x : x;
  return b.lo <= v && v <= b.hi;
}

}  // namespace tandem::json_number
