// Bounds on numbers with fractions (spec/json_number_bounds.h) against what a validator does
// (the text parsed to a double, compared with the schema's double), and random walks over digits
// that never reach a prefix without a completion within the bounds.
#include "spec/json_number_bounds.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace tandem::json_number {
namespace {

// The bound's text as the schema compiler hands it over (nlohmann's shortest round-trip dump).
std::string dumped(double v) { return nlohmann::json(v).dump(); }

// A random bound: decimals of a few digits (most are no double: 0.1), 17-digit doubles,
// integers, and magnitudes beyond every 15-digit text or below its last digit.
double random_bound(std::mt19937& rng) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  switch (pick(5)) {
    case 0:
      return (pick(20001) - 10000) / std::pow(10.0, pick(5));
    case 1:
      return std::ldexp(static_cast<double>(rng()) - 2147483648.0, -pick(40));
    case 2:
      return pick(401) - 200;
    case 3:
      return (pick(2) ? 1 : -1) * std::pow(10.0, pick(40) - 20);
    default:
      return (pick(2001) - 1000) / 1000.0 + pick(2) * 1e-16;
  }
}

// A random bounded-number text: a sign, up to 15 digits with a fraction or not, near `around`
// half of the time (so that the bound's neighbourhood is well covered).
std::string random_text(std::mt19937& rng, double around) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  if (pick(2) && std::abs(around) < 1e14 && std::abs(around) > 1e-14) {
    const int digits = 1 + pick(15);  // the bound's value to `digits` significant digits, nudged
    std::string t = fmt::format(
        "{:.{}f}", around,
        std::max(0, digits - 1 - static_cast<int>(std::floor(std::log10(std::abs(around))))));
    if (pick(2) && t.back() != '.') {
      char& last = t.back();
      if (last >= '1' && last <= '8') last = static_cast<char>(last + (pick(2) ? 1 : -1));
    }
    return t;
  }
  std::string t = pick(3) == 0 ? "-" : "";
  const int int_digits = pick(6), frac_digits = pick(2) ? pick(15 - std::max(int_digits, 0)) : 0;
  if (int_digits == 0) {
    t += "0";
  } else {
    t += static_cast<char>('1' + pick(9));
    for (int i = 1; i < int_digits; ++i) t += static_cast<char>('0' + pick(10));
  }
  if (frac_digits > 0) {
    t += '.';
    for (int i = 0; i < frac_digits; ++i) t += static_cast<char>('0' + pick(10));
  }
  return t;
}

int digits_of(const std::string& t) {  // a lone leading 0 not counted
  int n = 0;
  for (size_t i = 0; i < t.size(); ++i) n += t[i] >= '0' && t[i] <= '9' ? 1 : 0;
  const size_t first = t.find_first_of("0123456789");
  if (first != std::string::npos && t[first] == '0') --n;
  return n;
}

// Whole texts: within() agrees with a validator's double comparison for every side.
TEST(JsonNumberBounds, WholeTextsAgreeWithAValidatorsDoubles) {
  std::mt19937 rng(5);
  int compared = 0, inside = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const double bound = random_bound(rng);
    for (int side = 0; side < 4; ++side) {
      Bounds b;
      narrow(b, static_cast<Side>(side), dumped(bound));
      for (int k = 0; k < 10; ++k) {
        const std::string text = random_text(rng, bound);
        if (digits_of(text) > kMaxDigits) continue;
        Text t;
        bool ok = true;
        for (char c : text) ok = ok && add(t, static_cast<unsigned char>(c));
        ASSERT_TRUE(ok) << text;
        const double x = std::strtod(text.c_str(), nullptr);
        const bool theirs = side == 0   ? x >= bound
                            : side == 1 ? x > bound
                            : side == 2 ? x <= bound
                                        : x < bound;
        ASSERT_EQ(within(b, t), theirs) << text << " side " << side << " bound " << dumped(bound);
        ++compared;
        inside += theirs;
      }
    }
  }
  EXPECT_GT(compared, 100000);
  EXPECT_GT(inside, compared / 4);
  EXPECT_LT(inside, compared * 3 / 4);
}

// Random walks over the bytes JSON and the bounds allow: every prefix taken has a completion
// within the bounds (the walk always reaches one), and every finished text is within them.
TEST(JsonNumberBounds, WalksNeverReachADeadEnd) {
  std::mt19937 rng(7);
  int walks = 0, empty = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    Bounds b;
    // Two random bounds, or a narrow range (down to a few grid steps) around one.
    const double x = random_bound(rng);
    const double y =
        rng() % 3 == 0 ? x + std::pow(10.0, -static_cast<int>(rng() % 15)) : random_bound(rng);
    narrow(b, static_cast<Side>(rng() % 2), dumped(std::min(x, y)));
    if (rng() % 4 != 0) narrow(b, static_cast<Side>(2 + rng() % 2), dumped(std::max(x, y)));
    Text t;
    if (!satisfiable(b)) {
      ++empty;
      for (unsigned char c : std::string("-0123456789")) {
        Text u;
        EXPECT_FALSE(add(u, c) && feasible(b, u)) << "an empty range takes " << c;
      }
      continue;
    }
    ++walks;
    std::string text;
    for (int step = 0; step < 40; ++step) {
      std::vector<unsigned char> next;
      for (unsigned char c : std::string("-0123456789.")) {
        const bool syntax = c == '-'   ? text.empty()
                            : c == '.' ? t.started && !t.point
                                       : !(t.zero && !t.point);  // no digit after a leading 0
        Text u = t;
        if (syntax && add(u, c) && feasible(b, u)) next.push_back(c);
      }
      const bool can_end = t.started && !(t.point && t.frac_digits == 0) && within(b, t);
      ASSERT_TRUE(!next.empty() || can_end)
          << "dead end after '" << text << "' in [" << static_cast<double>(b.lo) << ", "
          << static_cast<double>(b.hi) << "]";
      if (next.empty() || (can_end && rng() % 4 == 0)) break;
      const unsigned char c = next[rng() % next.size()];
      ASSERT_TRUE(add(t, c));
      text += static_cast<char>(c);
    }
    if (!(t.started && !(t.point && t.frac_digits == 0) && within(b, t))) {
      // Cut at the step limit: it must still have a completion.
      EXPECT_TRUE(feasible(b, t)) << text;
    }
  }
  EXPECT_GT(walks, 15000);
  EXPECT_GT(empty, 20);
}

TEST(JsonNumberBounds, Grid) {
  Bounds b;
  narrow(b, Side::kMinimum, "0.1");
  narrow(b, Side::kExclusiveMaximum, "1e-07");  // below the minimum: nothing left
  EXPECT_TRUE(b.empty());
  EXPECT_FALSE(satisfiable(b));
  Bounds narrow_range;  // grid points, but none a 15-digit text reaches (128.000000000000 next)
  narrow(narrow_range, Side::kExclusiveMinimum, "128.0");
  narrow(narrow_range, Side::kMaximum, "128.0000000000009");
  EXPECT_FALSE(narrow_range.empty());
  EXPECT_FALSE(satisfiable(narrow_range));
  narrow(narrow_range, Side::kMaximum, "1e300");  // (no wider)
  Bounds wide = narrow_range;
  wide.hi = 128'000'000'000'001'000;
  EXPECT_TRUE(satisfiable(wide));  // 128.000000000001
  Bounds c;
  narrow(c, Side::kExclusiveMinimum, "-2.5e-16");  // between -1e-15 and 0: 0 and up
  EXPECT_EQ(c.lo, 0);
  narrow(c, Side::kMaximum, "123456789012345678");  // beyond every 15-digit text: no bound
  EXPECT_EQ(c.hi, kBeyond);
  Text t;
  for (char ch : std::string("-0.0")) ASSERT_TRUE(add(t, static_cast<unsigned char>(ch)));
  EXPECT_TRUE(within(c, t));  // -0 is 0
  EXPECT_FALSE(add(t, 'e'));
}

}  // namespace
}  // namespace tandem::json_number
