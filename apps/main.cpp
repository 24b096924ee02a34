// tandem command line entry point: registers the sub-commands and maps errors to exit codes
// (user errors: message on stderr, exit 1; usage errors: CLI11's code).
#include <cstdio>

#include "apps/commands.h"
#include "core/error.h"

namespace tandem::app {
namespace {
std::string g_command_line;
}
const std::string& command_line() { return g_command_line; }
}  // namespace tandem::app

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i)
    tandem::app::g_command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"tandem: inference for hybrid linear-attention models with exact MTP speculation"};
  app.require_subcommand(1);
  tandem::app::add_score_command(app);
  tandem::app::add_generate_command(app);
  tandem::app::add_diverge_command(app);
  tandem::app::add_bench_command(app);
  tandem::app::add_tokenize_command(app);
  tandem::app::add_chat_template_command(app);
  tandem::app::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
