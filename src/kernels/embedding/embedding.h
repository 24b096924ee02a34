// Embedding lookup: out[t, :] = table[ids[t], :] converted to out's dtype.
#pragma once

#include "core/exec_context.h"
#include "core/tensor.h"

namespace tandem::kernels {

struct EmbeddingArgs {
  Tensor ids;    // i32 [n_tokens]
  Tensor table;  // bf16|f16|f32 [vocab, hidden]
  Tensor out;    // act [n_tokens, hidden] (row stride may exceed hidden)
};

void embedding_ref(const EmbeddingArgs& a, const ExecContext& ctx);
#ifdef TANDEM_CUDA
void embedding_cuda(const EmbeddingArgs& a, const ExecContext& ctx);
#endif

inline void embedding(const EmbeddingArgs& a, const ExecContext& ctx) {
#ifdef TANDEM_CUDA
  if (ctx.device == Device::kCuda) return embedding_cuda(a, ctx);
#endif
  embedding_ref(a, ctx);
}

}  // namespace tandem::kernels
