#include "kernels/diag_skip.h"

#include <utility>

#include "core/error.h"
#include "kernels/opt_in.h"

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
  const std::vector<std::string> names = comma_names(csv);
  std::array<bool, kClasses.size()> want{};
  for (const std::string& name : names) {
    bool known = false;
    for (const auto& [n, c] : kClasses) {
      if (name == n) {
        want[static_cast<size_t>(c)] = true;
        known = true;
      }
    }
    TANDEM_CHECK(known, "unknown kernel class '{}' to skip (known: gdr, conv, attention)", name);
  }
  for (size_t i = 0; i < want.size(); ++i) g_diag_skipped[i].store(want[i]);
  return names;
}

}  // namespace tandem::kernels
