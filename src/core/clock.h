// The one clock the engine, the server and the tools time themselves by.
#pragma once

#include <chrono>

namespace tandem {

// Seconds on the monotonic clock (steady_clock): differences are elapsed time.
inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tandem
