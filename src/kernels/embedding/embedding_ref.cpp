// CPU reference for embedding lookup.
#include "kernels/embedding/embedding.h"
#include "kernels/ref_common.h"

namespace tandem::kernels {

void embedding_ref(const EmbeddingArgs& a, const ExecContext& ctx) {
  ref::expect_f32_act(a.out, "embedding.out");
  const int64_t n = a.ids.dim(0), hidden = a.table.dim(1), vocab = a.table.dim(0);
  const int32_t* ids = a.ids.data<const int32_t>();
  for (int64_t t = 0; t < n; ++t) {
    TANDEM_CHECK(ids[t] >= 0 && ids[t] < vocab, "token id {} out of range [0, {})", ids[t], vocab);
    float* o = a.out.data<float>() + t * a.out.stride(0);
    ref::with_weight_type(a.table, [&](const auto* w) {
      for (int64_t i = 0; i < hidden; ++i) o[i] = to_f32(w[ids[t] * hidden + i]);
    });
  }
}

}  // namespace tandem::kernels
