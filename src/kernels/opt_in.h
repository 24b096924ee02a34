// Kernel paths written and tested bit for bit against production but not yet measured on a GPU:
// off by default, turned on by name (`tandem bench --opt-in NAME,...`), so that one build times
// both sides of an A/B. A path that wins is made the default and leaves this list.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tandem::kernels {

// The names of a comma-separated list, empty ones dropped (the opt-ins', the diagnostic skips').
std::vector<std::string> comma_names(const std::string& csv);

// The names this build knows, each with one line on what it turns on (empty without CUDA).
std::vector<std::pair<std::string, std::string>> kernel_opt_ins();
// Turns on the paths named in a comma-separated list (the rest off; empty: all off) and returns
// the names. An unknown name is an error that lists the known ones.
std::vector<std::string> set_kernel_opt_ins(const std::string& csv);

}  // namespace tandem::kernels
