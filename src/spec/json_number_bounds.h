// Bounds on JSON numbers that may have a fraction (structured output: minimum / maximum /
// exclusiveMinimum / exclusiveMaximum on "number"), enforced on the text as it is written.
//
// A bounded number is written without an exponent and with at most kMaxDigits digits (a lone
// leading 0 not counted: "0.125" has 3). Every such text is an exact multiple of 10^-15, and the
// bounds are put on that grid exactly: a bound b (the double the schema's JSON holds) is read as
// its shortest round-trip decimal D and rounded inward (minimum: ceil(D 10^15), exclusive: the
// next grid point above D, ...). Comparing a text with D exactly gives a validator's answer, which
// compares double(text) with b: rounding to double is monotonic, and two different decimals of at
// most 15 significant digits never round to the same double, nor does such a decimal round to a b
// whose shortest decimal has more digits (DBL_DIG). So a text this module allows is one every
// validator allows; what it refuses beyond a validator is only exponents and longer digit strings.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::json_number {

inline constexpr int kMaxDigits = 15;
using Scaled = __int128;  // a value times 10^15
inline constexpr Scaled kScale = 1'000'000'000'000'000;
// Beyond every bounded text's value (|value| < 10^15).
inline constexpr Scaled kBeyond = kScale * kScale;

// Inclusive bounds on the grid (lo = -kBeyond / hi = kBeyond: none on that side).
struct Bounds {
  Scaled lo = -kBeyond, hi = kBeyond;
  bool empty() const { return lo > hi || lo >= kBeyond || hi <= -kBeyond; }  // no grid point
  bool operator==(const Bounds&) const = default;
};

// Which keyword a bound comes from.
enum class Side { kMinimum, kExclusiveMinimum, kMaximum, kExclusiveMaximum };

// Narrows b by one keyword whose value is the decimal text `number` (JSON number syntax, an
// exponent allowed: what nlohmann's dump of the schema's double or integer gives).
void narrow(Bounds& b, Side side, const std::string& number);

// A bounded number's text so far.
struct Text {
  bool negative = false;
  bool started = false;  // a digit of the integer part
  bool zero = false;     // the integer part is "0"
  bool point = false;
  int8_t int_digits = 0, frac_digits = 0;  // int_digits stays 0 for a "0" integer part
  uint64_t int_value = 0, frac_value = 0;
  bool operator==(const Text&) const = default;
};

// Takes the next byte of the text ('-' first, digits, '.'); false for an exponent or a digit past
// kMaxDigits. JSON's own syntax (no leading zeros, a digit after '.') is the automaton's.
bool add(Text& t, unsigned char c);
// Whether some completion of t (t itself, or more digits and a fraction) lies within b.
bool feasible(const Bounds& b, const Text& t);
// Whether some bounded-number text lies within b (grid points of more digits than a text may
// have do not count: [128.0000000000000001, 128.0000000000009] has none).
bool satisfiable(const Bounds& b);
// Whether t, as a whole value, lies within b.
bool within(const Bounds& b, const Text& t);

}  // namespace tandem::json_number
