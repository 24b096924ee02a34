// Helpers shared by the test folders: fixture locations, model loading, golden reading.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model_loader.h"

namespace tandem::testing {

inline std::string source_path(const std::string& rel) {
  return std::string(TANDEM_SOURCE_DIR) + "/" + rel;
}
// The shipped trained model lives in models/, its goldens under tests/fixtures/models/.
inline const std::string kTrainedModel = "tandem-tiny-qwen35";

inline std::string fixture_dir(const std::string& name) {
  return name == kTrainedModel ? source_path("models/" + name)
                               : source_path("tests/fixtures/models/" + name);
}
inline std::string golden_dir(const std::string& name) {
  return name == kTrainedModel ? source_path("tests/fixtures/models/" + name + "-golden")
                               : fixture_dir(name) + "/golden";
}
// Random-weight fixtures (tools/goldens/make_fixtures.py).
inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names{"tiny-text", "tiny-vl", "small"};
  return names;
}
// Every model with HF goldens: the fixtures and the trained model.
inline const std::vector<std::string>& golden_model_names() {
  static const std::vector<std::string> names{"tiny-text", "tiny-vl", "small", kTrainedModel};
  return names;
}

inline std::unique_ptr<Qwen35Model> load_fixture(const std::string& name, int64_t max_step = 256) {
  EngineOptions o;
  o.model_dir = fixture_dir(name);
  o.n_threads = 1;  // ctest runs tests in parallel; one thread each avoids oversubscription
  o.max_step_tokens = max_step;
  return load_model(o);
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline nlohmann::json goldens(const std::string& name) {
  return read_json(golden_dir(name) + "/goldens.json");
}

// Test-name suffix for a model-parameterised suite ("tiny-text" -> "tiny_text").
inline std::string model_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

}  // namespace tandem::testing
