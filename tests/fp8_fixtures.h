// The FP8 checkpoints the FP8 tests run (CPU: tests/model/fp8_test.cpp, CUDA:
// tests/cuda/fp8_engine_cuda_test.cpp): tools/make_fp8_checkpoint.py run once on the shipped model
// into <build>/fp8-fixtures/{fp8, f32, bf16} (the released FP8 layout, and the same model
// dequantised to f32 and to bf16). A lock file serialises the tests that ctest runs in parallel.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_support.h"

namespace tandem::testing {

inline std::filesystem::path fp8_fixtures() {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const fs::path d = fs::path(TANDEM_BINARY).parent_path() / "fp8-fixtures";
    fs::create_directories(d);
    const int fd = ::open((d / "lock").c_str(), O_CREAT | O_RDWR, 0644);
    TANDEM_CHECK(fd >= 0 && ::flock(fd, LOCK_EX) == 0, "cannot lock {}", (d / "lock").string());
    if (!fs::exists(d / "done")) {
      const std::string cmd = "python3 " + source_path("tools/make_fp8_checkpoint.py") + " " +
                              fixture_dir(kTrainedModel) + " " + (d / "fp8").string() +
                              " --dequantized-f32 " + (d / "f32").string() +
                              " --dequantized-bf16 " + (d / "bf16").string() + " > /dev/null";
      TANDEM_CHECK(std::system(cmd.c_str()) == 0, "failed: {}", cmd);
      std::ofstream(d / "done") << "ok\n";
    }
    ::flock(fd, LOCK_UN);
    ::close(fd);
    return d;
  }();
  return dir;
}

// The token ids of the shipped model's golden prompts.
inline std::vector<std::vector<int32_t>> golden_prompts() {
  std::vector<std::vector<int32_t>> out;
  const nlohmann::json g = goldens(kTrainedModel);
  for (const auto& p : g["prompts"]) out.push_back(p["ids"].get<std::vector<int32_t>>());
  return out;
}

}  // namespace tandem::testing
