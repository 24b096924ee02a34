// CPU reference attention: for each query row and head, a plain fp32 softmax over the causal
// prefix, read through the block table. Each row is computed alone, so results do not depend on
// how many rows share the call (row invariance).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void attention_ref(const AttentionArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.q, "attention.q");
  ref::expect_f32_act(a.out, "attention.out");
  const int64_t n = a.q.dim(0), hq = a.q.dim(1), d = a.q.dim(2);
  const int64_t block_size = a.k_cache.dim(1), hkv = a.k_cache.dim(2);
  TANDEM_CHECK(hq % hkv == 0 && a.k_cache.dim(3) == d, "attention: q {} vs cache {}",
               a.q.describe(), a.k_cache.describe());
  const int64_t group = hq / hkv;
  const int32_t kv_len = a.kv_len.data<const int32_t>()[0];
  TANDEM_CHECK(kv_len >= n && kv_len <= a.block_table.dim(0) * block_size,
               "attention: kv_len {} inconsistent with {} query rows / block table", kv_len, n);
  const float scale = a.scale > 0.f ? a.scale : 1.f / std::sqrt(static_cast<float>(d));
  const int32_t* table = a.block_table.data<const int32_t>();
  const bool gated = a.gate.raw() != nullptr;
  auto slot = [&](int64_t pos, int64_t h) {
    return ((table[pos / block_size] * block_size + pos % block_size) * hkv + h) * d;
  };
#pragma omp parallel for num_threads(ref::threads_for(ctx, n* hq* kv_len* d)) schedule(static) \
    collapse(2)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t last = kv_len - n + i;  // causal: this row sees positions [0, last]
      const int64_t hk = h / group;
      const float* q = a.q.data<const float>() + i * a.q.stride(0) + h * a.q.stride(1);
      std::vector<float> p(last + 1);
      float m = -INFINITY;
      for (int64_t j = 0; j <= last; ++j) {
        p[j] = ref::dot(q, a.k_cache.data<const float>() + slot(j, hk), d) * scale;
        m = std::max(m, p[j]);
      }
      float sum = 0.f;
      for (int64_t j = 0; j <= last; ++j) {
        p[j] = std::exp(p[j] - m);
        sum += p[j];
      }
      float* o = a.out.data<float>() + i * a.out.stride(0) + h * a.out.stride(1);
      std::fill(o, o + d, 0.f);
      for (int64_t j = 0; j <= last; ++j) {
        const float* v = a.v_cache.data<const float>() + slot(j, hk);
        for (int64_t e = 0; e < d; ++e) o[e] += p[j] * v[e];
      }
      const float inv = 1.f / sum;
      const float* g =
          gated ? a.gate.data<const float>() + i * a.gate.stride(0) + h * a.gate.stride(1)
                : nullptr;
      for (int64_t e = 0; e < d; ++e) {
        o[e] *= inv;
        if (gated) o[e] *= ref::sigmoid(g[e]);
      }
    }
  }
}

}  // namespace tandem::kernels
