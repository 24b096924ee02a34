#include "kernels/diag_skip.h"

#include <sstream>
#include <utility>

#include "core/error.h"

namespace tandem::kernels {

namespace {

constexpr std::array<std::pair<const char*, DiagClass>, 3> kClasses{{
    {"gdr", DiagClass::kGdr},
    {"conv", DiagClass::kConv},
    {"attention", DiagClass::kAttention},
}};

static_assert(kClasses.size() == g_diag_skipped.size());

}  // namespace

std::vector<std::string> set_diag_skips(const std::string& csv) {
  std::vector<std::string> names;
  std::array<bool, kClasses.size()> want{};
  std::string name;
  for (std::istringstream in(csv); std::getline(in, name, ',');) {
    if (name.empty()) continue;
    bool known = false;
    for (const auto& [n, c] : kClasses) {
      if (name == n) {
        want[static_cast<size_t>(c)] = true;
        known = true;
      }
    }
    TANDEM_CHECK(known, "unknown kernel class '{}' to skip (known: gdr, conv, attention)", name);
    names.push_back(name);
  }
  for (size_t i = 0; i < want.size(); ++i) g_diag_skipped[i].store(want[i]);
  return names;
}

}  // namespace tandem::kernels
