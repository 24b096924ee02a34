// Which configuration the FP8 wgmma decode linear (linear_fp8_wgmma_cuda.cu) runs a call in. The
// configuration never changes a bit (every output is its row's decode-order sum whatever item
// holds it; Fp8Linear.WgmmaKernelRowsAreTheDecodeKernelRows checks each one), only the time.
//
// Above 32 rows the calls are bound by the items' serial chains, not by the weights' bytes, and
// a call's time steps with the waves of items its persistent grid deals: the busiest block runs
// ceil(items / slots) items, each in a time linear in the call's k. So the estimate is
// waves x (alpha x in + beta), alpha and beta fitted per configuration to kernel_bench
// linear_fp8_batch on the five Qwen3.5-27B shapes at 64..256 rows (H100, 2026-12-07,
// bench/results/h100-2026-12-07.tar.xz; the H200 has the same 132 SMs and clock, and these calls
// are not bound by HBM). On those 40 calls from 65 rows the estimate's pick ran within 1.3% of the
// fastest configuration each time, and on 40 calls measured after the fit (40..56 and 320..1,024
// rows) too (tests/kernels/linear_fp8_wgmma_shape_test.cpp keeps both tables); up to 1.57x faster
// than the 64 x 64 items that production took for every call from 65 rows before (down at 80 and 96
// rows: 127 -> 81 us). In the 27B-FP8 step (H100): 64 streams 31.66 -> 30.26 ms, verify k = 2 /
// decode at 32 streams 1.920 -> 1.539.
// At 33..64 rows the estimate misjudges the configurations that split their items (fewer items
// than slots), so there it only chooses between the quads of 64 and of 192 rows (gate|up at 64
// rows: 122.7 -> 101.9 us); up to 32 rows it is the 64-row quads.
// Host code, tested on the CPU.
#pragma once

#include <cstdint>

namespace tandem::kernels {

// A configuration of the FP8 wgmma kernel: its number (linear_fp8_wgmma_set_config's), item
// shape, blocks per SM, and the fitted per-wave time alpha_us_per_k x in + beta_us.
struct Fp8WgmmaConfig {
  int id, tile_m, n, blocks_per_sm;
  double alpha_us_per_k, beta_us;
};

inline constexpr Fp8WgmmaConfig kFp8WgmmaConfigs[] = {
    {1, 128, 64, 1, 7.15e-3, 6.0},  // 128 x 64 items, 64-k stages
    {2, 64, 64, 2, 6.87e-3, 5.8},   // 64 x 64, 64-k stages (production from 65 rows before)
    {3, 128, 32, 1, 4.23e-3, 2.5},  // 128 x 32 in quads
    {4, 64, 32, 2, 4.16e-3, 3.0},   // 64 x 32 in quads
    {5, 192, 32, 1, 5.50e-3, 3.6},  // 192 x 32 in quads, three consumer warpgroups
};

// Whether a call in configuration c deals its last, partial wave of items as class halves (the
// opt-in fp8-quad-halves, linear_fp8_wgmma_cuda.cu): the quad configurations only, where the
// partial wave's items, two units each, fit one wave of slots. The whole waves before it stay
// whole items.
constexpr bool fp8_wgmma_halves(const Fp8WgmmaConfig& c, int64_t items, int64_t slots) {
  const int64_t rest = items % slots;
  return c.n == 32 && rest > 0 && 2 * rest <= slots;
}

// Estimated microseconds of a call of out_f rows of `in` k and n tokens in configuration c on
// sms SMs; halves: with the opt-in's class halves (a partial wave of halves counted as half a
// wave's time; at 32 rows on gate|up it ran ~3% faster, not the 1.2x this says: docs/cuda.md gap
// 8).
constexpr double fp8_wgmma_call_us(const Fp8WgmmaConfig& c, int64_t out_f, int64_t in, int64_t n,
                                   int sms, bool halves = false) {
  const int64_t items = (out_f + c.tile_m - 1) / c.tile_m * ((n + c.n - 1) / c.n);
  const int64_t slots = int64_t{sms} * c.blocks_per_sm;
  const int64_t waves = (items + slots - 1) / slots;
  const double wave_us = c.alpha_us_per_k * static_cast<double>(in) + c.beta_us;
  if (halves && fp8_wgmma_halves(c, items, slots)) {
    return (static_cast<double>(waves) - 0.5) * wave_us;
  }
  return static_cast<double>(waves) * wave_us;
}

// The configuration a call takes (linear_fp8_wgmma_cuda.cu's launch_store): 4 up to 32 rows; the
// faster of 4 and 5 by the estimate at 33..64 rows; from 65 rows the fastest of all five (ties:
// the first in kFp8WgmmaConfigs' order). With halves (the opt-in fp8-quad-halves) the estimate
// counts them, and up to 32 rows picks between 4 and 5 too.
constexpr int fp8_wgmma_pick(int64_t out_f, int64_t in, int64_t n, int sms, bool halves = false) {
  if (n <= 32 && !halves) return 4;
  int best = 0;
  double best_us = 0;
  for (const Fp8WgmmaConfig& c : kFp8WgmmaConfigs) {
    if (n <= 64 && c.id != 4 && c.id != 5) continue;
    const double us = fp8_wgmma_call_us(c, out_f, in, n, sms, halves);
    if (best == 0 || us < best_us) best = c.id, best_us = us;
  }
  return best;
}

}  // namespace tandem::kernels
