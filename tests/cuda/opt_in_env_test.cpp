// TANDEM_OPT_IN=name,... in the environment turns those opt-in kernel paths (src/kernels/opt_in.h)
// on for the whole cuda_tests binary before any test runs, so that the GPU engine tests (batched
// against solo, MTP against plain, graphs against eager) also run on them:
//   TANDEM_OPT_IN=gdr-regs cuda_tests --gtest_filter='*EngineCuda*'
// (scripts/device/run_opt_in.sh PART=2). Tests that switch a path themselves restore this value.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/opt_in.h"

namespace tandem::test {
namespace {

// Before main (an unknown name throws there, naming the known ones).
const bool g_applied = [] {
  const char* env = std::getenv("TANDEM_OPT_IN");
  const std::vector<std::string> names = kernels::set_kernel_opt_ins(env != nullptr ? env : "");
  for (const std::string& n : names) std::fprintf(stderr, "kernel opt-in on: %s\n", n.c_str());
  return true;
}();

}  // namespace
}  // namespace tandem::test
