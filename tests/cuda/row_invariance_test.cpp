// Row invariance on the GPU (DESIGN.md inv. 2) of the row-wise ops (linear and its epilogues, in
// decode batches of up to 100 rows and mixed with prefill rows; RMSNorm with RoPE): a token row
// computed inside a launch of many rows must be bit-identical to the same row computed alone,
// wherever it sits. Attention and GDN state: the *_attention_ and
// *_gdn_ files beside this one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_wgmma_shape.h"
#include "kernels/rms_norm/rms_norm.h"
#include "kernels/rope/rope.h"

namespace tandem::test {
namespace {

using namespace tandem::kernels;

template <typename Bits>
bool same_bits(const Tensor& a, const Tensor& b) {
  return download_bits<Bits>(a) == download_bits<Bits>(b);
}

// A contiguous copy of row j (dim 0) of a device tensor.
Tensor row_copy(const Tensor& dev, int64_t j) {
  Shape s = dev.shape();
  s[0] = 1;
  Tensor r = Tensor::zeros(s, dev.dtype(), Device::kCuda);
  device_copy(r.raw(), Device::kCuda,
              static_cast<const char*>(dev.raw()) + j * dev.stride(0) * dtype_size(dev.dtype()),
              Device::kCuda, static_cast<size_t>(r.nbytes()));
  return r;
}

TEST(CudaRowInvariance, Linear) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(21);
  // 4104 -> 100 runs the decode kernels with a k-split of 8 uneven ranges. A single row and n = 2
  // run the persistent kernel's 5-slot ring (calls up to 4 tokens), n = 6, 9 and 16 the batched
  // kernel (LinearConfigurations runs every configuration of both against production).
  for (const auto& [in, out_f] :
       {std::pair<int64_t, int64_t>{1003, 1000}, {5120, 1000}, {4104, 100}}) {
    Mirror w = random_mirror({out_f, in}, rng, DType::kBF16, 0.01f, 0.1f);
    for (int64_t n : {2, 6, 9, 16}) {
      for (DType dt : {DType::kBF16, DType::kF32}) {
        Mirror x = random_mirror({n, in}, rng);
        Tensor out = poisoned({n, out_f}, dt);
        linear_cuda({x.dev, w.dev, out}, cs.ctx());
        for (int64_t j : {int64_t{0}, n / 2, n - 1}) {
          Tensor one = poisoned({1, out_f}, dt);
          linear_cuda({row_copy(x.dev, j), w.dev, one}, cs.ctx());
          cs.sync();
          const std::string p = fmt::format("n_tokens={},row={},in={},out={},out_dtype={}", n, j,
                                            in, out_f, dtype_name(dt));
          check_bits("linear.rows", p,
                     dt == DType::kF32 ? same_bits<uint32_t>(row_copy(out, j), one)
                                       : same_bits<uint16_t>(row_copy(out, j), one));
        }
      }
    }
  }
}

// The swiglu epilogue of the decode linear (LinearEpilogue::kSwiGluPairs) is elementwise on the
// same sums, so its rows are as invariant as the plain linear's.
TEST(CudaRowInvariance, LinearSwiglu) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(27);
  const int64_t in = 5120, inter = 1000;
  Mirror w = random_mirror({2 * inter, in}, rng, DType::kBF16, 0.01f, 0.1f);
  for (int64_t n : {2, 9, 16}) {
    Mirror x = random_mirror({n, in}, rng);
    Tensor out = poisoned({n, inter}, DType::kBF16);
    linear_cuda(
        {x.dev, w.dev, out, LinearEpilogue::kSwiGluPairs, poisoned({n, 2 * inter}, DType::kBF16)},
        cs.ctx());
    for (int64_t j : {int64_t{0}, n / 2, n - 1}) {
      Tensor one = poisoned({1, inter}, DType::kBF16);
      linear_cuda({row_copy(x.dev, j), w.dev, one, LinearEpilogue::kSwiGluPairs,
                   poisoned({1, 2 * inter}, DType::kBF16)},
                  cs.ctx());
      cs.sync();
      check_bits("linear.swiglu_rows",
                 fmt::format("n_tokens={},row={},in={},inter={}", n, j, in, inter),
                 same_bits<uint16_t>(row_copy(out, j), one));
    }
  }
}

// input_rms scales a token's sums by that token's own inverse RMS, and kAddToOut adds into that
// token's own row, so both keep the decode linear's rows invariant.
TEST(CudaRowInvariance, LinearInputRmsAndAdd) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(29);
  for (const auto& [in, out_f] : {std::pair<int64_t, int64_t>{5120, 1000}, {4104, 100}}) {
    Mirror w = random_mirror({out_f, in}, rng, DType::kBF16, 0.01f, 0.1f);
    const auto scaled = [&](const Tensor& x, const Tensor& out) {
      linear_cuda({.x = x,
                   .weight = w.dev,
                   .out = out,
                   .input_rms = true,
                   .input_scratch = poisoned(x.shape(), DType::kBF16)},
                  cs.ctx());
    };
    const auto added = [&](const Tensor& x, const Tensor& out) {
      linear_cuda({.x = x,
                   .weight = w.dev,
                   .out = out,
                   .epilogue = LinearEpilogue::kAddToOut,
                   .scratch = poisoned({x.dim(0), out_f}, DType::kBF16)},
                  cs.ctx());
    };
    for (int64_t n : {2, 9, 16}) {
      Mirror x = random_mirror({n, in}, rng, DType::kBF16, -2.f, 2.f);
      Mirror res = random_mirror({n, out_f}, rng, DType::kBF16, -4.f, 4.f);
      Tensor out = poisoned({n, out_f}, DType::kBF16), sum = res.dev.to(Device::kCuda);
      scaled(x.dev, out);
      added(x.dev, sum);
      for (int64_t j : {int64_t{0}, n / 2, n - 1}) {
        Tensor one = poisoned({1, out_f}, DType::kBF16), one_sum = row_copy(res.dev, j);
        scaled(row_copy(x.dev, j), one);
        added(row_copy(x.dev, j), one_sum);
        cs.sync();
        const std::string p = fmt::format("n_tokens={},row={},in={},out={}", n, j, in, out_f);
        check_bits("linear.input_rms_rows", p, same_bits<uint16_t>(row_copy(out, j), one));
        check_bits("linear.add_rows", p, same_bits<uint16_t>(row_copy(sum, j), one_sum));
      }
    }
  }
}

// ---- decode batches: groups [0, 32), [32, 64), ... (the wide configuration for 17..32 rows) ----

constexpr float kRmsEps = 1e-6f;

// One form of the linear: out dtype, epilogue, input_rms.
struct LinearForm {
  const char* name;
  DType out_dtype;
  LinearEpilogue epilogue;
  bool input_rms;
};
const LinearForm kLinearForms[] = {
    {"plain", DType::kBF16, LinearEpilogue::kNone, false},
    {"plain_f32", DType::kF32, LinearEpilogue::kNone, false},
    {"input_rms", DType::kBF16, LinearEpilogue::kNone, true},
    {"add", DType::kBF16, LinearEpilogue::kAddToOut, false},
    {"input_rms+add", DType::kBF16, LinearEpilogue::kAddToOut, true},
    {"swiglu", DType::kBF16, LinearEpilogue::kSwiGluPairs, false},
    {"input_rms+swiglu", DType::kBF16, LinearEpilogue::kSwiGluPairs, true}};

bool form_fits(const LinearForm& f, int64_t out_f) {
  return f.epilogue != LinearEpilogue::kSwiGluPairs || out_f % 16 == 0;
}
int64_t form_cols(const LinearForm& f, int64_t out_f) {
  return f.epilogue == LinearEpilogue::kSwiGluPairs ? out_f / 2 : out_f;
}

// A form's device tensors over `rows` rows: out (poisoned; kAddToOut: the residual's rows) and the
// scratch tensors it needs.
struct LinearBuffers {
  Tensor out, scratch, x_scratch;
};
LinearBuffers linear_buffers(const LinearForm& f, int64_t rows, int64_t in, int64_t out_f,
                             const Tensor& residual) {
  LinearBuffers b;
  b.out = poisoned({rows, form_cols(f, out_f)}, f.out_dtype);
  if (f.epilogue == LinearEpilogue::kAddToOut) copy_dim0(b.out, 0, residual, 0, rows);
  if (f.epilogue != LinearEpilogue::kNone) b.scratch = poisoned({rows, out_f}, DType::kBF16);
  if (f.input_rms) b.x_scratch = poisoned({rows, in}, DType::kBF16);
  return b;
}

// One call of form f over rows [r0, r1) of x into the same rows of b, its first decode_rows rows
// decode rows (LinearArgs::decode_rows).
void run_rows(const LinearForm& f, const Tensor& x, const Tensor& w, const LinearBuffers& b,
              int64_t r0, int64_t r1, int64_t decode_rows, const ExecContext& ctx) {
  const auto cut = [&](const Tensor& t) {
    return t.raw() != nullptr ? t.slice(0, r0, r1) : Tensor();
  };
  linear_cuda({.x = x.slice(0, r0, r1),
               .weight = w,
               .out = cut(b.out),
               .epilogue = f.epilogue,
               .scratch = cut(b.scratch),
               .input_rms = f.input_rms,
               .input_rms_eps = kRmsEps,
               .input_scratch = cut(b.x_scratch),
               .decode_rows = decode_rows},
              ctx);
}

// out's elements as bits (bf16 or f32), for comparing rows.
std::vector<uint32_t> out_bits(const Tensor& out) {
  if (dtype_size(out.dtype()) == 4) return download_bits<uint32_t>(out);
  const std::vector<uint16_t> h = download_bits<uint16_t>(out);
  return {h.begin(), h.end()};
}

// "" if rows [r0, r1) of got and want have the same bits, else how many differ and the first.
std::string bad_rows(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
                     int64_t r0, int64_t r1, int64_t cols) {
  int64_t bad = 0, first = -1;
  for (int64_t j = r0; j < r1; ++j) {
    if (rows_equal(got, j, want, j, 1, cols)) continue;
    if (bad++ == 0) first = j;
  }
  return bad == 0 ? std::string() : fmt::format(",{} rows differ (first: row {})", bad, first);
}

// Every row of a decode call of 5..256 rows (LinearArgs::decode_rows = n: the wgmma kernel, in
// 16-, 32-, 64- and 128-token items, split mode where the row tiles are few) equals the same row
// computed alone (the persistent kernel) and in a 16-row call, bit for bit, with every epilogue and
// input_rms, on the five Qwen3.5-27B decode shapes (k-splits 1 and 2), a k-split of 8 with ~8
// tiles per cluster, and awkward shapes (in not a multiple of 64: a last 16-k step with 8 real k;
// out_f not a multiple of 16 or of 128). Rows past n are left alone. Up to 16 rows the input_rms
// forms also run bench variant 14 (the wgmma kernel's sums of squares in the kernel); at 8, 33, 64,
// 129 and 256 rows every form also runs variants 15 and 16 (the wgmma kernel's other split rules)
// and 18 (the item shapes by the cost rule at every row count: on the 27B shapes 128 x 64 items at
// 64 rows for out_f = 5120) and 19 (by the rows rule at every row count; production takes the cost
// rule's shapes from 65 rows: 128 x 64 at 129 rows for all five, 128 x 128 at 256 for out_f =
// 5120); at 33 and 129 rows each of the seven item shapes, forced (linear_set_wgmma_shape).
TEST(CudaRowInvariance, LinearDecodeBatch) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(31);
  constexpr int64_t kRows = 256;
  linear_reserve_decode_workspace(Device::kCuda);  // split mode
  struct ProductionAfter {  // leaves the production variant and shapes selected, whatever fails
    ~ProductionAfter() {
      linear_skinny_set_variant(0);
      linear_set_wgmma_shape(0, 0);
    }
  } production_after;
  struct Shape2 {
    const char* name;
    int64_t out_f, in;
  };
  for (const Shape2 s : {Shape2{"gate|up", 34816, 5120}, Shape2{"in_proj", 16480, 5120},
                         Shape2{"q|k|v", 14336, 5120}, Shape2{"down", 5120, 17408},
                         Shape2{"out/o_proj", 5120, 6144}, Shape2{"splits8", 2176, 5120},
                         Shape2{"awkward", 1000, 4104}, Shape2{"awkward_pairs", 1008, 3080}}) {
    const Tensor w = random_bf16_device({s.out_f, s.in}, static_cast<uint64_t>(s.out_f + s.in));
    const Mirror x = random_mirror({kRows, s.in}, rng, DType::kBF16, 0.05f, 2.f);
    const Mirror res = random_mirror({kRows, s.out_f}, rng, DType::kBF16, 0.05f, 4.f);
    const std::vector<uint32_t> res_bits = out_bits(res.dev);
    for (const LinearForm& f : kLinearForms) {
      if (!form_fits(f, s.out_f)) continue;
      const int64_t cols = form_cols(f, s.out_f);
      const auto buffers = [&] { return linear_buffers(f, kRows, s.in, s.out_f, res.dev); };
      const LinearBuffers alone = buffers(), sixteen = buffers();
      for (int64_t j = 0; j < kRows; ++j) run_rows(f, x.dev, w, alone, j, j + 1, 1, cs.ctx());
      for (int64_t j = 0; j < kRows; j += 16) {
        const int64_t end = std::min(kRows, j + 16);
        run_rows(f, x.dev, w, sixteen, j, end, end - j, cs.ctx());
      }
      cs.sync();
      const std::vector<uint32_t> alone_bits = out_bits(alone.out),
                                  sixteen_bits = out_bits(sixteen.out);
      for (const int64_t n : {5, 8, 17, 24, 32, 33, 48, 64, 65, 100, 128, 129, 200, 256}) {
        const LinearBuffers batch = buffers();
        run_rows(f, x.dev, w, batch, 0, n, n, cs.ctx());
        cs.sync();
        const std::vector<uint32_t> bits = out_bits(batch.out);
        const std::string p = fmt::format("shape={},in={},out={},form={},n_tokens={}", s.name, s.in,
                                          s.out_f, f.name, n);
        const std::string vs1 = bad_rows(bits, alone_bits, 0, n, cols);
        const std::string vs16 = bad_rows(bits, sixteen_bits, 0, n, cols);
        check_bits("linear.decode_batch_vs_1", p + vs1, vs1.empty());
        check_bits("linear.decode_batch_vs_16", p + vs16, vs16.empty());
        // Rows past n: still the poison (all bits set), or the residual for kAddToOut.
        bool untouched = true;
        const uint32_t poison = dtype_size(f.out_dtype) == 4 ? 0xffffffffu : 0xffffu;
        for (int64_t e = n * cols; e < kRows * cols; ++e) {
          untouched &= bits[e] == (f.epilogue == LinearEpilogue::kAddToOut ? res_bits[e] : poison);
        }
        check_bits("linear.decode_batch_bounds", p, untouched);
        for (const int variant : {15, 16, 18, 19}) {
          if (n != 8 && n != 33 && n != 64 && n != 129 && n != 256) break;
          // Bench variants 15 and 16: the wgmma kernel's other split rules; 18, 19: its item
          // shapes by one rule. The same bits.
          linear_skinny_set_variant(variant);
          const LinearBuffers other = buffers();
          run_rows(f, x.dev, w, other, 0, n, n, cs.ctx());
          cs.sync();
          linear_skinny_set_variant(0);
          const std::string vs1_v = bad_rows(out_bits(other.out), alone_bits, 0, n, cols);
          check_bits("linear.decode_batch_split_rule_vs_1",
                     p + fmt::format(",variant={}", variant) + vs1_v, vs1_v.empty());
        }
        for (const WgmmaItemShape& shape : kWgmmaItemShapes) {
          if (n != 33 && n != 129) break;
          // Every item shape, whatever the rule would pick (kernel_bench linear_shapes): the
          // same bits.
          linear_set_wgmma_shape(shape.tile_m, shape.n);
          const LinearBuffers other = buffers();
          run_rows(f, x.dev, w, other, 0, n, n, cs.ctx());
          cs.sync();
          linear_set_wgmma_shape(0, 0);
          const std::string vs1_s = bad_rows(out_bits(other.out), alone_bits, 0, n, cols);
          check_bits("linear.decode_batch_forced_shape_vs_1",
                     p + fmt::format(",shape={}x{}", shape.tile_m, shape.n) + vs1_s, vs1_s.empty());
        }
        if (!f.input_rms || n > 16) continue;
        // Bench variant 14: the wgmma kernel's sums of squares in the kernel (no
        // sum_squares_kernel): the same bits.
        linear_skinny_set_variant(14);
        const LinearBuffers in_kernel = buffers();
        run_rows(f, x.dev, w, in_kernel, 0, n, n, cs.ctx());
        cs.sync();
        linear_skinny_set_variant(0);
        const std::string vs1_ik = bad_rows(out_bits(in_kernel.out), alone_bits, 0, n, cols);
        check_bits("linear.decode_batch_inkernel_sums_vs_1", p + vs1_ik, vs1_ik.empty());
      }
    }
  }
}

// A call of decode and prefill rows (decode_rows = 20 of n = 90): its decode rows equal a pure
// decode call's bit for bit, its prefill rows a prefill call's of the same rows, and every row is
// within tolerance of the reference; in = 1003 takes the CUDA-core kernel for both families.
TEST(CudaRowInvariance, LinearMixedRows) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(33);
  constexpr int64_t kN = 90, kDecode = 20;
  for (const auto& [out_f, in] :
       {std::pair<int64_t, int64_t>{2176, 5120}, {1000, 4104}, {129, 1003}, {320, 17408}}) {
    const Mirror w = random_mirror({out_f, in}, rng, DType::kBF16, 0.01f, 0.1f);
    const Mirror x = random_mirror({kN, in}, rng, DType::kBF16, 0.05f, 2.f);
    const Mirror res = random_mirror({kN, out_f}, rng, DType::kBF16, 0.05f, 4.f);
    for (const LinearForm& f : kLinearForms) {
      if (!form_fits(f, out_f)) continue;
      const int64_t cols = form_cols(f, out_f);
      const auto buffers = [&] { return linear_buffers(f, kN, in, out_f, res.dev); };
      const LinearBuffers mixed = buffers(), decode = buffers(), prefill = buffers();
      run_rows(f, x.dev, w.dev, mixed, 0, kN, kDecode, cs.ctx());
      run_rows(f, x.dev, w.dev, decode, 0, kDecode, kDecode, cs.ctx());
      run_rows(f, x.dev, w.dev, prefill, kDecode, kN, 0, cs.ctx());
      cs.sync();
      const std::string p = fmt::format("in={},out={},form={},n_tokens={},decode_rows={}", in,
                                        out_f, f.name, kN, kDecode);
      const std::vector<uint32_t> bits = out_bits(mixed.out);
      const std::string vs_decode = bad_rows(bits, out_bits(decode.out), 0, kDecode, cols);
      const std::string vs_prefill = bad_rows(bits, out_bits(prefill.out), kDecode, kN, cols);
      check_bits("linear.mixed_decode_rows", p + vs_decode, vs_decode.empty());
      check_bits("linear.mixed_prefill_rows", p + vs_prefill, vs_prefill.empty());
      Tensor ref = f.epilogue == LinearEpilogue::kAddToOut ? res.host.to(Device::kCpu)
                                                           : Tensor::zeros({kN, cols}, DType::kF32);
      linear_ref(
          {.x = x.host,
           .weight = w.host,
           .out = ref,
           .epilogue = f.epilogue,
           .scratch = f.epilogue != LinearEpilogue::kNone ? Tensor::zeros({kN, out_f}, DType::kF32)
                                                          : Tensor(),
           .input_rms = f.input_rms,
           .input_rms_eps = kRmsEps},
          ref_ctx());
      const std::vector<int32_t> each_row = row_starts(std::vector<int64_t>(kN, 1));
      check_case("linear.mixed", p,
                 max_rel_l2(download(mixed.out), gather(ref), seq_ranges(each_row, cols)),
                 f.out_dtype);
    }
  }
}

// The decode kernels against the decode order's specification (linear_order_spec_cuda.cu: one
// warp per 16 weight rows and 8 tokens, plain loads, no ring and no split of the work), bit for
// bit, f32 outputs: the five Qwen3.5-27B decode shapes and two awkward ones (in not a multiple of
// 64, out_f not of 16) at 1..256 rows, so that both kernels (persistent; wgmma in every item size,
// with and without split mode) compute exactly the order linear_plan.h defines, not only the same
// bits as each other.
TEST(CudaRowInvariance, LinearDecodeOrderSpec) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(41);
  linear_reserve_decode_workspace(Device::kCuda);  // split mode
  constexpr int64_t kRows = 256;
  for (const auto& [out_f, in] : {std::pair<int64_t, int64_t>{34816, 5120},
                                  {16480, 5120},
                                  {14336, 5120},
                                  {5120, 17408},
                                  {5120, 6144},
                                  {1000, 4104},
                                  {136, 3000}}) {
    const Tensor w = random_bf16_device({out_f, in}, static_cast<uint64_t>(3 * out_f + in));
    const Mirror x = random_mirror({kRows, in}, rng, DType::kBF16, 0.05f, 2.f);
    for (const int64_t n : {1, 3, 4, 5, 9, 70, 130, 256}) {
      const Tensor xs = x.dev.slice(0, 0, n);
      Tensor kernel = Tensor::zeros({n, out_f}, DType::kF32, Device::kCuda);
      Tensor spec = Tensor::zeros({n, out_f}, DType::kF32, Device::kCuda);
      linear({.x = xs, .weight = w, .out = kernel, .decode_rows = n}, cs.ctx());
      linear_decode_order_spec({.x = xs, .weight = w, .out = spec}, cs.ctx());
      cs.sync();
      const std::vector<uint32_t> a = out_bits(kernel), b = out_bits(spec);
      int64_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i] ? 1 : 0;
      check_bits("linear.decode_order_spec",
                 fmt::format("out={},in={},n_tokens={}: {} of {} outputs differ", out_f, in, n,
                             differ, a.size()),
                 differ == 0);
    }
  }
}

// Every configuration of the decode kernels computes production's bits (they share its plan and
// the decode order): bench variants 6-9 (other rings and chunks of the narrow configurations), 10
// (decode groups of 16 rows), 11 and 12 (groups of 32 in the persistent kernel's wide
// configuration, 512-k and 1024-k rings), 13 (the wgmma kernel at every row count, 1-4 rows too),
// 14 (production with in-kernel sums of squares; its input_rms forms: LinearDecodeBatch), 15 and 16
// (the wgmma kernel's split rule before; with class groups), at 1..64
// decode rows, with and without epilogues, on shapes whose ranges end inside a chunk
// (k-splits of 2, 4 and 8) and inside a 16-k step.
TEST(CudaRowInvariance, LinearConfigurations) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(35);
  struct ProductionAfter {  // leaves the production variant and shapes selected, whatever fails
    ~ProductionAfter() {
      linear_skinny_set_variant(0);
      linear_set_wgmma_shape(0, 0);
    }
  } production_after;
  constexpr int64_t kRows = 64;
  linear_reserve_decode_workspace(Device::kCuda);  // split mode
  const std::vector<int64_t> ns = {1, 3, 4, 6, 8, 9, 16, 17, 32, 33, 40, 64};
  for (const auto& [out_f, in] : {std::pair<int64_t, int64_t>{1008, 3080},
                                  {320, 17408},
                                  {100, 4104},
                                  {2176, 5120},
                                  {1000, 4104}}) {
    const Tensor w = random_bf16_device({out_f, in}, static_cast<uint64_t>(7 * out_f + in));
    const Mirror x = random_mirror({kRows, in}, rng, DType::kBF16, 0.05f, 2.f);
    const Mirror res = random_mirror({kRows, out_f}, rng, DType::kBF16, 0.05f, 4.f);
    for (const LinearForm& f : kLinearForms) {
      if (!form_fits(f, out_f) || std::string(f.name) == "input_rms" ||
          std::string(f.name) == "swiglu")
        continue;
      const int64_t cols = form_cols(f, out_f);
      std::vector<std::vector<uint32_t>> production;
      linear_skinny_set_variant(0);
      for (const int64_t n : ns) {
        const LinearBuffers b = linear_buffers(f, kRows, in, out_f, res.dev);
        run_rows(f, x.dev, w, b, 0, n, n, cs.ctx());
        cs.sync();
        production.push_back(out_bits(b.out));
      }
      for (const int variant : {6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) {
        linear_skinny_set_variant(variant);
        for (size_t i = 0; i < ns.size(); ++i) {
          const LinearBuffers b = linear_buffers(f, kRows, in, out_f, res.dev);
          run_rows(f, x.dev, w, b, 0, ns[i], ns[i], cs.ctx());
          cs.sync();
          const std::string bad = bad_rows(out_bits(b.out), production[i], 0, ns[i], cols);
          check_bits("linear.configurations",
                     fmt::format("variant={},in={},out={},form={},n_tokens={}{}", variant, in,
                                 out_f, f.name, ns[i], bad),
                     bad.empty());
        }
      }
      linear_skinny_set_variant(0);
    }
  }
}

TEST(CudaRowInvariance, RmsNorm) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(22);
  const int64_t n = 9, dim = 5120;
  Mirror x = random_mirror({n, dim}, rng);
  Mirror w = random_mirror({dim}, rng);
  Tensor out = poisoned({n, dim}, DType::kBF16);
  rms_norm_cuda({x.dev, w.dev, out, Tensor(), 1e-6f, true}, cs.ctx());
  for (int64_t j : {0, 4, 8}) {
    Tensor one = poisoned({1, dim}, DType::kBF16);
    rms_norm_cuda({row_copy(x.dev, j), w.dev, one, Tensor(), 1e-6f, true}, cs.ctx());
    cs.sync();
    check_bits("rms_norm.rows", fmt::format("n_tokens={},row={},dim={}", n, j, dim),
               same_bits<uint16_t>(row_copy(out, j), one));
  }
}

// RMSNorm with RoPE in one launch equals RMSNorm then rope() (two launches) bit for bit, and a
// row of a 9-row call equals the row alone.
TEST(CudaRowInvariance, RmsNormRope) {
  SKIP_WITHOUT_CUDA();
  CudaStream cs;
  Rng rng(26);
  const int64_t n = 9, heads = 4, d = 256;
  for (int rotary : {64, 256}) {
    Mirror x = random_mirror({n, heads, d}, rng);
    Mirror w = random_mirror({d}, rng);
    std::vector<int32_t> pos(n);
    for (auto& p : pos) p = rng.index(40000);
    const Tensor positions = device_i32(pos);
    Tensor fused = poisoned({n, heads, d}, DType::kBF16);
    rms_norm_cuda({x.dev, w.dev, fused, Tensor(), 1e-6f, true, positions, rotary, 1e7f}, cs.ctx());
    Tensor twice = poisoned({n, heads, d}, DType::kBF16);
    rms_norm_cuda({x.dev, w.dev, twice, Tensor(), 1e-6f, true}, cs.ctx());
    rope_cuda({twice, positions, rotary, 1e7f}, cs.ctx());
    cs.sync();
    check_bits("rms_norm.rope_fused",
               fmt::format("n_tokens={},heads={},rotary_dim={}", n, heads, rotary),
               same_bits<uint16_t>(fused, twice));
    for (int64_t j : {0, 4, 8}) {
      Tensor one = poisoned({1, heads, d}, DType::kBF16);
      rms_norm_cuda({row_copy(x.dev, j), w.dev, one, Tensor(), 1e-6f, true,
                     device_i32({pos[static_cast<size_t>(j)]}), rotary, 1e7f},
                    cs.ctx());
      cs.sync();
      check_bits("rms_norm.rope_rows",
                 fmt::format("n_tokens={},row={},rotary_dim={}", n, j, rotary),
                 same_bits<uint16_t>(row_copy(fused, j), one));
    }
  }
}

// Random paged-attention inputs for n query rows: q and K over a wider range (so that softmax is
// not flat), gate, V, and n_blocks cache blocks of bs positions behind a shuffled table.
}  // namespace
}  // namespace tandem::test
