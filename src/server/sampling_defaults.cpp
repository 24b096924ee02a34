// The sampling defaults a model's generation_config.json recommends (protocol.h,
// sampling_defaults_from), and their one-line description for the start-up log.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "server/protocol.h"

namespace tandem::server {

SamplingDefaults sampling_defaults_from(const Json& g, const std::string& source) {
  SamplingDefaults d;
  if (!g.is_object()) fail("{}: expected a JSON object", source);
  const auto number = [&](const char* key, double lo, double hi, bool lo_open, double& out) {
    if (!g.contains(key) || g[key].is_null()) return;
    const Json& v = g[key];
    TANDEM_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", source, key, v.dump());
    const double x = v.get<double>();
    TANDEM_CHECK(std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi,
                 "{}: '{}' must be in {}{}, {}], got {}", source, key, lo_open ? "(" : "[", lo, hi,
                 x);
    out = x;
  };
  number("temperature", 0, 2, false, d.temperature);
  number("top_p", 0, 1, true, d.top_p);
  number("min_p", 0, 1, false, d.min_p);
  number("repetition_penalty", 0, 2, true, d.repetition_penalty);
  for (const char* key : {"top_k", "max_new_tokens"}) {
    if (!g.contains(key) || g[key].is_null()) continue;
    const Json& v = g[key];
    TANDEM_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, got {}", source, key,
                 v.dump());
    const int64_t x = v.get<int64_t>();
    if (std::string(key) == "top_k") {
      TANDEM_CHECK(x >= -1, "{}: 'top_k' must be -1, 0 (off) or >= 1, got {}", source, x);
      d.top_k = std::max<int64_t>(x, 0);
    } else {
      TANDEM_CHECK(x >= 1, "{}: 'max_new_tokens' must be >= 1, got {}", source, x);
      d.max_tokens = x;
    }
  }
  return d;
}

std::string describe(const SamplingDefaults& d) {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  const SamplingDefaults openai;
  if (d.temperature != openai.temperature) add(fmt::format("temperature {}", d.temperature));
  if (d.top_k != openai.top_k) add(fmt::format("top_k {}", d.top_k));
  if (d.top_p != openai.top_p) add(fmt::format("top_p {}", d.top_p));
  if (d.min_p != openai.min_p) add(fmt::format("min_p {}", d.min_p));
  if (d.repetition_penalty != openai.repetition_penalty) {
    add(fmt::format("repetition_penalty {}", d.repetition_penalty));
  }
  if (d.max_tokens) add(fmt::format("max_tokens {}", *d.max_tokens));
  return out.empty() ? "none" : out;
}

}  // namespace tandem::server
