// CPU reference attention: for each query row and head, a plain fp32 softmax over the causal
// prefix of its sequence, read through that sequence's block table. Each row is computed alone,
// so results do not depend on how many rows or sequences share the call (row invariance).
#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "kernels/attention/attention.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

namespace {

struct RowTask {
  int64_t row, seq, last;  // last: the row's position (it attends to [0, last])
};

}  // namespace

void attention_ref(const AttentionArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.q, "attention.q");
  ref::expect_f32_act(a.out, "attention.out");
  expect_seq_layout(a.seqs, "attention");
  expect_per_seq(a.kv_len, a.seqs, "attention", "kv_len");
  expect_per_seq(a.block_tables, a.seqs, "attention", "block_tables");
  const int64_t hq = a.q.dim(1), d = a.q.dim(2);
  const int64_t block_size = a.k_cache.dim(1), hkv = a.k_cache.dim(2);
  const int64_t n_blocks = a.k_cache.dim(0);
  TANDEM_CHECK(hq % hkv == 0 && a.k_cache.dim(3) == d && a.block_tables.ndim() == 2,
               "attention: q {} vs cache {} / block tables {}", a.q.describe(),
               a.k_cache.describe(), a.block_tables.describe());
  const int64_t group = hq / hkv, max_blocks = a.block_tables.dim(1);
  const float scale = a.scale > 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(d));
  const bool gated = a.gate.raw() != nullptr;
  const int32_t* row_start = a.seqs.row_start.data<const int32_t>();
  std::vector<RowTask> tasks;
  int64_t work = 0;
  for (int64_t s = 0; s < a.seqs.n_seqs; ++s) {
    const int64_t n = row_start[s + 1] - row_start[s];
    const int32_t kv_len = a.kv_len.data<const int32_t>()[s];
    TANDEM_CHECK(kv_len >= n && kv_len <= max_blocks * block_size,
                 "attention: sequence {} kv_len {} inconsistent with {} rows / {} table entries", s,
                 kv_len, n, max_blocks);
    const int32_t* table = a.block_tables.data<const int32_t>() + s * a.block_tables.stride(0);
    for (int64_t b = 0; b < (kv_len + block_size - 1) / block_size; ++b)
      TANDEM_CHECK(table[b] >= 0 && table[b] < n_blocks,
                   "attention: sequence {} block {} is {}, outside [0, {})", s, b, table[b],
                   n_blocks);
    for (int64_t i = 0; i < n; ++i) tasks.push_back({row_start[s] + i, s, kv_len - n + i});
    work += n * kv_len;
  }
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  const int64_t kv_stride = hkv * d;  // between consecutive positions of one block
#pragma omp parallel for num_threads(ref::threads_for(ctx, work* hq* d)) schedule(dynamic) \
    collapse(2)
  for (int64_t ti = 0; ti < n_tasks; ++ti) {
    for (int64_t h = 0; h < hq; ++h) {
      const RowTask& task = tasks[ti];
      const int32_t* table =
          a.block_tables.data<const int32_t>() + task.seq * a.block_tables.stride(0);
      auto slot = [&](int64_t pos, int64_t head) {  // table entries checked above
        const int64_t block = table[pos / block_size];
        return ((block * block_size + pos % block_size) * hkv + head) * d;
      };
      const int64_t i = task.row, last = task.last, hk = h / group;
      const float* q = a.q.data<const float>() + i * a.q.stride(0) + h * a.q.stride(1);
      const float* kc = a.k_cache.data<const float>();
      const float* vc = a.v_cache.data<const float>();
      thread_local ref::ScratchBuffer scratch;
      float* p = scratch.get(last + 1 + 8);
      // Scores p_j = (q . k_j) scale, each dot ref::dot's (8 keys at a time, the same bits).
      int64_t j = 0;
      for (; j + 8 <= last + 1; j += 8) {
        const float* keys[8];
        for (int r = 0; r < 8; ++r) keys[r] = kc + slot(j + r, hk);
        ref::dot8_f32(q, keys, d, p + j);
      }
      for (; j <= last; ++j) p[j] = ref::dot_f32(q, kc + slot(j, hk), d);
      float m = -INFINITY;
      for (j = 0; j <= last; ++j) {
        p[j] *= scale;
        m = std::max(m, p[j]);
      }
      // p_j = e^(p_j - m), then their sum in order.
      j = 0;
#if defined(__AVX2__) && defined(__FMA__)
      for (; j + 8 <= last + 1; j += 8)
        _mm256_storeu_ps(p + j,
                         ref::exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), _mm256_set1_ps(m))));
#endif
      for (; j <= last; ++j) p[j] = ref::exp(p[j] - m);
      float sum = 0.f;
      for (j = 0; j <= last; ++j) sum += p[j];
      // o = sum_j p_j v_j: one FMA chain per element over j in order, fed a block of positions
      // at a time (positions of one block are kv_stride apart).
      float* o = a.out.data<float>() + i * a.out.stride(0) + h * a.out.stride(1);
      std::fill(o, o + d, 0.f);
      for (int64_t j0 = 0; j0 <= last;) {
        const int64_t len = std::min(block_size - j0 % block_size, last + 1 - j0);
        ref::fma_rank_update(o, d, p + j0, 0, 1, vc + slot(j0, hk), kv_stride, 1, len, d);
        j0 += len;
      }
      const float inv = 1.f / sum;
      const float* g =
          gated ? a.gate.data<const float>() + i * a.gate.stride(0) + h * a.gate.stride(1)
                : nullptr;
      int64_t e = 0;
#if defined(__AVX2__) && defined(__FMA__)
      for (; e + 8 <= d; e += 8) {  // the loop below, 8 elements at a time (the same bits)
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(o + e), _mm256_set1_ps(inv));
        if (gated) v = _mm256_mul_ps(v, ref::sigmoid8(_mm256_loadu_ps(g + e)));
        _mm256_storeu_ps(o + e, v);
      }
#endif
      for (; e < d; ++e) {
        o[e] *= inv;
        if (gated) o[e] *= ref::sigmoid(g[e]);
      }
    }
  }
}

}  // namespace tandem::kernels
