// Errors: one exception type that names what was expected, plus check macros.
// User-caused problems (bad path, bad config, malformed input) throw tandem::Error with a message
// a user can act on; the command line turns it into a non-zero exit, the server into a 4xx.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tandem

// TANDEM_CHECK(cond, "expected {} but got {}", a, b): throws tandem::Error when cond is false.
#define TANDEM_CHECK(cond, ...)               \
  do {                                        \
    if (!(cond)) ::tandem::fail(__VA_ARGS__); \
  } while (0)
