// The conv1d kernel of 8 channels a thread (conv1d_set_vector_min_seqs) against the scalar kernel
// (production): the same outputs and the same history pool, bit for bit, over history lengths
// 4..12 (k = 0..8 drafts), random window offsets, rows past what the history keeps, a padding
// sequence (no rows, offset 0), a slot outside the pool, non-contiguous slots, 1..256 sequences;
// and calls the vector kernel does not take (history 13, channels or x rows not 16-byte aligned)
// still agree, through the scalar kernel.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/conv1d/conv1d.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

struct ConvVector {  // on: every call the vector kernel fits; off: none
  int64_t prev;
  explicit ConvVector(bool on) : prev(conv1d_set_vector_min_seqs(on ? 1 : kConvVectorNever)) {}
  ~ConvVector() { conv1d_set_vector_min_seqs(prev); }
};

// x_pad: extra elements per x row (the row stride is channels + x_pad).
// `taken`: whether the vector kernel must have run the second call.
void vector_matches_scalar(int64_t channels, int64_t hist_len, int64_t n_seqs, int64_t x_pad,
                           bool taken, Rng& rng, const CudaStream& cs) {
  const int64_t kernel = 4, n_slots = n_seqs + 3, max_o = hist_len - (kernel - 1);
  const Tensor w = random_mirror({channels, 1, kernel}, rng, DType::kBF16, 0.05f, 1.f).dev;
  const std::vector<int32_t> slot_ids = distinct_slots(n_seqs, n_slots, rng);
  std::vector<int64_t> rows;
  std::vector<int32_t> slot, n_acc;
  for (int64_t i = 0; i < n_seqs; ++i) {
    rows.push_back(rng.index(static_cast<int32_t>(max_o + 3)));  // up to 2 past the history
    slot.push_back(slot_ids[i]);
    n_acc.push_back(rng.index(static_cast<int32_t>(max_o + 1)));
  }
  const auto pick = [&] { return rng.index(static_cast<int32_t>(n_seqs)); };
  const int32_t padding = pick();
  rows[padding] = 0, n_acc[padding] = 0;
  if (n_seqs > 2) slot[pick()] = static_cast<int32_t>(n_slots);  // outside the pool: skipped
  const std::vector<int32_t> rs = row_starts(rows, 3);
  const int64_t n_rows = rs.back() + 2;
  const SeqArrays d = seq_arrays(rs, slot, n_acc, n_acc, n_acc, Device::kCuda);
  const Tensor x = random_mirror({n_rows, channels + x_pad}, rng, DType::kBF16, 0.05f, 2.f).dev;
  const Tensor hist0 =
      random_mirror({n_slots, channels, hist_len}, rng, DType::kBF16, 0.05f, 2.f).dev;
  std::vector<Tensor> outs, hists;
  const int64_t vector_calls = conv1d_vector_calls();
  for (const bool vec : {false, true}) {
    const Tensor hist = Tensor::zeros(hist0.shape(), DType::kBF16, Device::kCuda);
    copy_dim0(hist, 0, hist0, 0, n_slots);
    const Tensor out = poisoned({n_rows, channels}, DType::kBF16);
    {
      const ConvVector mode(vec);
      conv1d_cuda({.x = x.slice(1, 0, channels),
                   .weight = w,
                   .history = hist,
                   .out = out,
                   .seqs = SeqLayout{n_seqs, max_o + 2, d.row_start},
                   .slot = d.slot,
                   .n_acc = d.n_acc,
                   .mode = ConvHistoryMode::kSpec},
                  cs.ctx());
    }
    outs.push_back(out);
    hists.push_back(hist);
  }
  cs.sync();
  const std::string p =
      fmt::format("channels={},hist_len={},n_seqs={},x_pad={}", channels, hist_len, n_seqs, x_pad);
  check_bits("conv1d.vector_rows", p, bytes_of(outs[0]) == bytes_of(outs[1]));
  check_bits("conv1d.vector_history", p, bytes_of(hists[0]) == bytes_of(hists[1]));
  EXPECT_EQ(conv1d_vector_calls() - vector_calls, taken ? 1 : 0) << p;
}

TEST(CudaRowInvariance, ConvVectorMatchesScalar) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(41);
  const int64_t model = 2 * 16 * 128 + 48 * 128;  // Qwen3.5-27B's q | k | v channels
  for (const int64_t hist_len : {4, 5, 7, 12}) {
    vector_matches_scalar(model, hist_len, 8, 8, true, rng, cs);
    vector_matches_scalar(model, hist_len, 256, 8, true, rng, cs);
  }
  for (int64_t hist_len = 4; hist_len <= 12; ++hist_len)
    vector_matches_scalar(72, hist_len, 1 + rng.index(40), 8, true, rng, cs);
  vector_matches_scalar(1000, 7, 33, 0, true, rng, cs);  // 125 groups: a partial block
  // Not taken by the vector kernel: both calls run the scalar one.
  vector_matches_scalar(72, 13, 9, 8, false, rng, cs);
  vector_matches_scalar(76, 7, 9, 8, false, rng, cs);
  vector_matches_scalar(72, 7, 9, 4, false, rng, cs);
}

}  // namespace
}  // namespace tandem::test
