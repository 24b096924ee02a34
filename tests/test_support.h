// Helpers shared by the test folders: fixture locations, model loading, golden reading.
#pragma once

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model_loader.h"

namespace tandem::testing {

inline std::string source_path(const std::string& rel) { return std::string(TANDEM_SOURCE_DIR) + "/" + rel; }
inline std::string fixture_dir(const std::string& name) {
  return source_path("tests/fixtures/models/" + name);
}
inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names{"tiny-text", "tiny-vl", "small"};
  return names;
}

inline std::unique_ptr<Qwen35Model> load_fixture(const std::string& name, int64_t max_step = 256) {
  EngineOptions o;
  o.model_dir = fixture_dir(name);
  o.n_threads = 2;
  o.max_step_tokens = max_step;
  return load_model(o);
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline nlohmann::json goldens(const std::string& name) {
  return read_json(fixture_dir(name) + "/golden/goldens.json");
}

}  // namespace tandem::testing
