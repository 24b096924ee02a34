// A hook that sees every named activation of a forward pass (llama.cpp's `cb(cur, name, il)`),
// so that a divergence can be bisected to a layer and a state. Null by default: costs nothing.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/tensor.h"

namespace tandem {

class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // layer is -1 for model-level tensors. The tensor is only valid during the call.
  virtual void observe(std::string_view name, int64_t layer, const Tensor& t) = 0;
};

}  // namespace tandem
