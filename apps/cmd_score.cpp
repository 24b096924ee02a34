#include "apps/commands.h"
namespace tandem::app {
void add_score_command(CLI::App& app) { app.add_subcommand("score", "score a prompt (todo)"); }
void add_generate_command(CLI::App& app) { app.add_subcommand("generate", "generate (todo)"); }
}  // namespace tandem::app
