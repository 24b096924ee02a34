// Kernel paths written and tested bit for bit against production but not yet measured on a GPU:
// off by default, turned on by name (`tandem bench --opt-in NAME,...`), so that one build times
// both sides of an A/B. A path that wins is made the default and leaves this list.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tandem::kernels {

// The names this build knows, each with one line on what it turns on (empty without CUDA).
std::vector<std::pair<std::string, std::string>> kernel_opt_ins();
// Turns on the named paths (the rest off). An unknown name is an error that lists the known ones.
void set_kernel_opt_ins(const std::vector<std::string>& names);

}  // namespace tandem::kernels
