// Shared helpers for the tokenizer tests: fixture paths and one lazily loaded Qwen3 tokenizer.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tandem::tok::testing {

inline std::string fixture(const std::string& rel) {
  return std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + rel;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::from_dir(fixture("qwen3"));
  return t;
}

}  // namespace tandem::tok::testing
