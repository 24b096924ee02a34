// Helpers of the end-to-end GPU tests (engine_cuda_test.cpp, fp8_engine_cuda_test.cpp): a model
// directory loaded on a device, one generation with or without a drafter, and the CPU agreement
// rule of GPU greedy output (equal tokens up to the first near-tie of the CPU's logits).
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "test_support.h"

namespace tandem::testing {

// 8 threads for the CPU reference beside the GPU; 512-row steps (a whole golden prompt per step).
inline std::unique_ptr<Qwen35Model> load_dir_on(const std::string& dir, Device d) {
  EngineOptions o;
  o.model_dir = dir;
  o.device = d;
  o.n_threads = 8;
  o.max_step_rows = 512;
  return load_model(o);
}

inline std::vector<int32_t> generate(Qwen35Model& m, std::unique_ptr<Drafter> d, int k,
                                     const std::vector<int32_t>& prompt, int n) {
  Generator gen(m, std::move(d), GeneratorOptions{.num_speculative_tokens = k, .max_context = 512});
  return gen.generate(GenerateRequest{.prompt = prompt, .max_tokens = n}).tokens;
}

// A CPU top-2 logit margin below this is a near-tie, which the GPU's bf16 activations may flip.
constexpr float kNearTieMargin = 0.05f;

struct CpuAgreement {
  size_t agree;     // leading GPU tokens equal to the CPU's
  size_t near_tie;  // first CPU token whose top-2 margin is below kNearTieMargin (or the count)
};

// GPU greedy tokens against the CPU model's greedy tokens for the same prompt, the margins read
// along the CPU's greedy path.
inline CpuAgreement cpu_agreement(Qwen35Model& cpu, const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& cpu_tokens,
                                  const std::vector<int32_t>& gpu_tokens) {
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), cpu_tokens.begin(), cpu_tokens.end() - 1);
  Generator scorer(cpu, nullptr, GeneratorOptions{.max_context = 512});
  const Tensor logits = scorer.score(seq);
  const int64_t vocab = logits.dim(1);
  CpuAgreement a{0, cpu_tokens.size()};
  for (size_t i = 0; i < cpu_tokens.size(); ++i) {
    const float* r = logits.data<float>() + (prompt.size() - 1 + i) * vocab;
    float best = -INFINITY, second = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      if (r[v] > best)
        second = best, best = r[v];
      else if (r[v] > second)
        second = r[v];
    }
    if (best - second < kNearTieMargin) {
      a.near_tie = i;
      break;
    }
  }
  while (a.agree < gpu_tokens.size() && a.agree < cpu_tokens.size() &&
         gpu_tokens[a.agree] == cpu_tokens[a.agree])
    ++a.agree;
  return a;
}

}  // namespace tandem::testing
