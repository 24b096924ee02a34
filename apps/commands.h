// Sub-commands of the `tandem` binary. Each lives in apps/cmd_<name>.cpp and registers itself on
// the CLI11 app; apps/ is the only layer that reads the environment or the terminal.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tandem::app {

// The command line as typed (recorded by main, written into benchmark JSON).
const std::string& command_line();

void add_score_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_diverge_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_chat_template_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace tandem::app
