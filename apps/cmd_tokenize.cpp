// `tandem tokenize`: text <-> token ids with the model's tokenizer, one JSON value per line
// (stdin: JSON strings -> stdout: JSON arrays of ids; with --decode the reverse).
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
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
};

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
  cmd->callback([o] { run_tokenize(*o); });
}

}  // namespace tandem::app
