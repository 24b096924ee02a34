// The FP8 wgmma kernel's walks of an item's units (src/kernels/linear/linear_fp8_walk.h), on the
// CPU: the quad walk (the 32-token items' four classes a pass) gives every class the loop's units
// in the loop's order and the loop's class and rank ends in order, and the loop's units cover each
// rank's range once; over lengths with partial units and empty classes, range lengths of 64..in,
// whole items and single ranks. The quad kernel's bits rest on this (the folds and ends are the
// sums' order).
#include "kernels/linear/linear_fp8_walk.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::kernels {
namespace {

// An event of the walk: a unit at k (kind 0), the end of class c (1) or of rank r (2).
struct Event {
  int kind;
  int64_t value;
  bool operator==(const Event&) const = default;
};

std::vector<Event> loop_events(int64_t in, int64_t range_k, int r0, int r1) {
  std::vector<Event> e;
  fp8_walk_units(
      in, range_k, r0, r1,
      [&](int64_t k) {
        e.push_back({0, k});
      },
      [&](int c) {
        e.push_back({1, c});
      },
      [&](int r) {
        e.push_back({2, r});
      });
  return e;
}

// fn(in, range_k, ranks) over lengths with partial units and empty classes and range lengths of
// 64..in (at most 64 ranks); returns how many.
template <class Fn>
int for_walk_shapes(Fn&& fn) {
  int shapes = 0;
  for (int64_t in = 16; in <= 20480; in += in < 1200 ? 16 : 1040) {
    for (const int64_t range_k : {int64_t{64}, int64_t{128}, int64_t{512}, int64_t{576},
                                  int64_t{1536}, int64_t{2560}, int64_t{3072}, int64_t{8704}, in}) {
      const int ranks = static_cast<int>((in + range_k - 1) / range_k);
      if (ranks > 64) continue;
      fn(in, range_k, ranks);
      ++shapes;
    }
  }
  return shapes;
}

// The quad walk (four classes a pass) against the loop: every class's units in the same order,
// the same class and rank ends in the same order, each unit before its class's end and after the
// class's previous end; a stage's valid units are exactly those inside the range.
TEST(LinearFp8Walk, QuadsGiveEachClassTheLoopsUnits) {
  const int cases = for_walk_shapes([&](int64_t in, int64_t range_k, int ranks) {
    const std::vector<Event> loop = loop_events(in, range_k, 0, ranks);
    // Per class (and rank), the loop's units; and its ends in order.
    std::vector<std::vector<int64_t>> want_units, got_units;
    std::vector<Event> want_ends, got_ends;
    int cls = 0;
    want_units.emplace_back();
    for (const Event& e : loop) {
      if (e.kind == 0) want_units.back().push_back(e.value);
      if (e.kind != 0) want_ends.push_back(e);
      if (e.kind == 1) {
        ++cls;
        want_units.emplace_back();
      }
    }
    // The quad walk: units go to their class's list (class = 4q + i, counted from the rank's
    // first end), checked to lie inside the range.
    std::vector<std::vector<int64_t>> open(kFp8WalkQuad);
    int ended = 0;
    bool inside = true;
    fp8_walk_quads(
        in, range_k, 0, ranks,
        [&](int64_t k, int valid) {
          const int64_t r = k / range_k, end = std::min(in, (r + 1) * range_k);
          inside &= valid >= 1 && valid <= kFp8WalkQuad && k + (valid - 1) * 64 < end &&
                    (valid == kFp8WalkQuad || k + valid * 64 >= end);
          for (int i = 0; i < valid; ++i) open[static_cast<size_t>(i)].push_back(k + 64 * i);
        },
        [&](int c) {
          got_ends.push_back({1, c});
          got_units.push_back(open[static_cast<size_t>(c % kFp8WalkQuad)]);
          open[static_cast<size_t>(c % kFp8WalkQuad)].clear();
          ++ended;
        },
        [&](int r) {
          got_ends.push_back({2, r});
        });
    got_units.emplace_back();  // the loop's list after its last class end (empty)
    const std::string what = fmt::format("in={} range_k={}", in, range_k);
    ASSERT_TRUE(inside) << what;
    ASSERT_EQ(got_ends, want_ends) << what;
    ASSERT_EQ(got_units, want_units) << what;
    EXPECT_EQ(cls, ended) << what;
  });
  EXPECT_GT(cases, 100);
}

// The quad walk's events (a stage at k: kind 0; class end: 1; rank end: 2), passes [q0, q1).
std::vector<Event> quad_events(int64_t in, int64_t range_k, int ranks, int q0, int q1) {
  std::vector<Event> e;
  fp8_walk_quads(
      in, range_k, 0, ranks,
      [&](int64_t k, int) {
        e.push_back({0, k});
      },
      [&](int c) {
        e.push_back({1, c});
      },
      [&](int r) {
        e.push_back({2, r});
      },
      q0, q1);
  return e;
}

// Events split at each rank end (the end itself left out).
std::vector<std::vector<Event>> per_rank(const std::vector<Event>& events) {
  std::vector<std::vector<Event>> ranks(1);
  for (const Event& e : events) {
    if (e.kind == 2) {
      ranks.emplace_back();
    } else {
      ranks.back().push_back(e);
    }
  }
  ranks.pop_back();  // after the last rank's end: nothing
  return ranks;
}

// The quad kernel's class halves (passes [0, 1) and [1, 2)): per rank, the first half's stages and
// class ends followed by the second's are the whole walk's, in its order (so a half's class sums
// are the whole walk's), classes 0-3 end in the first and 4-7 in the second, and each half ends
// every rank. Fails if a half took a stage of the other pass or left a rank end out.
TEST(LinearFp8Walk, ClassHalvesSplitEachRanksPasses) {
  const int cases = for_walk_shapes([&](int64_t in, int64_t range_k, int ranks) {
    const std::string what = fmt::format("in={} range_k={}", in, range_k);
    const std::vector<Event> whole = quad_events(in, range_k, ranks, 0, kFp8WalkPasses);
    const std::vector<Event> h0 = quad_events(in, range_k, ranks, 0, 1);
    const std::vector<Event> h1 = quad_events(in, range_k, ranks, 1, 2);
    const auto w = per_rank(whole), a = per_rank(h0), b = per_rank(h1);
    ASSERT_EQ(w.size(), static_cast<size_t>(ranks)) << what;
    ASSERT_EQ(a.size(), w.size()) << what;
    ASSERT_EQ(b.size(), w.size()) << what;
    for (size_t r = 0; r < w.size(); ++r) {
      std::vector<Event> joined = a[r];
      joined.insert(joined.end(), b[r].begin(), b[r].end());
      ASSERT_EQ(joined, w[r]) << what << " rank " << r;
      for (const Event& e : a[r]) {
        if (e.kind == 1) {
          EXPECT_LT(e.value, kFp8WalkQuad) << what;
        }
      }
      for (const Event& e : b[r]) {
        if (e.kind == 1) {
          EXPECT_GE(e.value, kFp8WalkQuad) << what;
        }
      }
    }
  });
  EXPECT_GT(cases, 100);
}

// The walk of the 27B shapes' ranks covers each 64-k unit of the row once, in class order.
TEST(LinearFp8Walk, UnitsCoverTheRowOnce) {
  for (const int64_t in : {int64_t{5120}, int64_t{6144}, int64_t{17408}, int64_t{1040}}) {
    for (const int64_t range_k : {int64_t{512}, int64_t{2560}, int64_t{3072}, in}) {
      const int ranks = static_cast<int>((in + range_k - 1) / range_k);
      std::vector<int> seen(static_cast<size_t>((in + 63) / 64), 0);
      int ends = 0;
      fp8_walk_units(
          in, range_k, 0, ranks, [&](int64_t k) { ++seen[static_cast<size_t>(k / 64)]; },
          [&](int) { ++ends; }, [](int) {});
      for (size_t i = 0; i < seen.size(); ++i)
        EXPECT_EQ(seen[i], 1) << in << " " << range_k << " " << i;
      EXPECT_EQ(ends, ranks * kFp8WalkClasses);
    }
  }
}

}  // namespace
}  // namespace tandem::kernels
