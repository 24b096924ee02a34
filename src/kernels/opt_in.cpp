#include "kernels/opt_in.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "kernels/conv1d/conv1d.h"
#include "kernels/gated_delta_rule/gated_delta_rule.h"
#include "kernels/linear/linear.h"

namespace tandem::kernels {

namespace {

struct OptIn {
  const char* name;
  const char* what;
  std::function<void(bool)> set;
};

std::vector<OptIn> registry() {
  std::vector<OptIn> r;
#ifdef TANDEM_CUDA
  r.push_back({"gdr-regs",
               "GDN streaming kernel, calls of 2+ rows a sequence (verify): the state in "
               "registers between one load and one write-back, 4 rows loaded together",
               [](bool on) { gated_delta_rule_set_stream_registers(on); }});
  r.push_back(
      {"fp8-quad-halves",
       "FP8 wgmma kernel's 32-token quads: the items of a call's last, partial wave as "
       "two class halves each, and the configuration picked counting them",
       [](bool on) { linear_fp8_set_quad_halves(on ? Fp8Halves::kRemainder : Fp8Halves::kOff); }});
#endif
  return r;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> kernel_opt_ins() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const OptIn& o : registry()) out.emplace_back(o.name, o.what);
  return out;
}

std::vector<std::string> comma_names(const std::string& csv) {
  std::vector<std::string> names;
  std::string name;
  for (std::istringstream in(csv); std::getline(in, name, ',');) {
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

std::vector<std::string> set_kernel_opt_ins(const std::string& csv) {
  const std::vector<std::string> names = comma_names(csv);
  const std::vector<OptIn> r = registry();
  std::vector<std::string> known;
  for (const OptIn& o : r) known.emplace_back(o.name);
  for (const std::string& n : names) {
    TANDEM_CHECK(std::find(known.begin(), known.end(), n) != known.end(),
                 "unknown kernel opt-in '{}' (this build knows: {})", n,
                 known.empty() ? "none" : fmt::format("{}", fmt::join(known, ", ")));
  }
  for (const OptIn& o : r) o.set(std::find(names.begin(), names.end(), o.name) != names.end());
  return names;
}

}  // namespace tandem::kernels
