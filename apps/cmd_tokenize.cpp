// `tandem tokenize`: text <-> token ids with the model's tokenizer, one JSON value per line
// (stdin: JSON strings -> stdout: JSON arrays of ids; with --decode the reverse).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "apps/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tandem::app {

namespace {

struct TokenizeOptions {
  std::string model_dir;
  bool decode = false;
  bool skip_special = false;
  std::string bench_file;
  int repeat = 5;
};

// --bench FILE: times encode() of the whole file `repeat` times (tokenizer load excluded) and
// prints {"bytes", "tokens", "ids_fnv1a", "seconds": [...]}; used by
// tools/tokenizer/bench_tokenizer.py.
void run_bench(const TokenizeOptions& o) {
  const tok::Tokenizer t = tok::Tokenizer::from_dir(o.model_dir);
  std::ifstream f(o.bench_file, std::ios::binary);
  TANDEM_CHECK(f.good(), "cannot read {}", o.bench_file);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  nlohmann::json seconds = nlohmann::json::array();
  std::vector<int32_t> ids;
  for (int r = 0; r < o.repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    ids = t.encode(text);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids as little-endian uint32
  for (int32_t id : ids) {
    for (int k = 0; k < 4; ++k)
      h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 0xFF)) * 1099511628211ull;
  }
  nlohmann::json out = {
      {"bytes", text.size()}, {"tokens", ids.size()}, {"ids_fnv1a", h}, {"seconds", seconds}};
  std::cout << out.dump() << '\n';
}

void run_tokenize(const TokenizeOptions& o) {
  const tok::Tokenizer t = tok::Tokenizer::from_dir(o.model_dir);
  std::string line;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json in;
    try {
      in = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("stdin line {}: not JSON ({})", n, e.what());
    }
    if (o.decode) {
      TANDEM_CHECK(in.is_array(), "stdin line {}: expected a JSON array of token ids", n);
      std::vector<int32_t> ids;
      for (const auto& x : in) {
        TANDEM_CHECK(x.is_number_integer(), "stdin line {}: token ids must be integers", n);
        ids.push_back(x.get<int32_t>());
      }
      std::cout << nlohmann::json(t.decode(ids, o.skip_special)).dump() << '\n';
    } else {
      TANDEM_CHECK(in.is_string(), "stdin line {}: expected a JSON string", n);
      std::cout << nlohmann::json(t.encode(in.get<std::string>())).dump() << '\n';
    }
    std::cout.flush();
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tokenize", "encode JSON strings (one per stdin line) to JSON arrays of ids, or --decode");
  auto o = std::make_shared<TokenizeOptions>();
  cmd->add_option("--model", o->model_dir, "model directory with tokenizer.json")->required();
  cmd->add_flag("--decode", o->decode, "read JSON arrays of ids, write JSON strings");
  cmd->add_flag("--skip-special", o->skip_special, "with --decode: drop special tokens");
  cmd->add_option("--bench", o->bench_file, "time encoding of this file instead (prints JSON)");
  cmd->add_option("--repeat", o->repeat, "with --bench: number of timed encodes");
  cmd->callback([o] { o->bench_file.empty() ? run_tokenize(*o) : run_bench(*o); });
}

}  // namespace tandem::app
