// `tandem diverge`: run a prompt with and without speculation and report "identical" or the first
// step, layer and state whose bits differ (exit code 0 when identical, 3 when not).
#include <cstdio>

#include "apps/commands.h"
#include "apps/generate_options.h"
#include "engine/divergence.h"
#include "spec/mtp_drafter.h"

namespace tandem::app {

void add_diverge_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("diverge", "find the first state that differs with speculation");
  auto g = std::make_shared<GenerateOptions>();
  add_generate_options(cmd, *g);
  cmd->callback([g] {
    GenerateRequest req = build_request(*g);
    TANDEM_CHECK(g->speculative == "mtp",
                 "diverge compares --speculative mtp against plain decoding");
    auto model = open_model(*g, false);
    DivergenceOptions opt{.prompt = req.prompt,
                          .max_tokens = g->max_tokens,
                          .num_speculative_tokens = g->num_speculative_tokens,
                          .max_context = g->max_context};
    Qwen35Model& m = *model;
    const DivergenceReport r = find_divergence(
        m, [&m] { return std::make_unique<MtpDrafter>(m); }, opt);
    std::printf("%s\n", r.describe().c_str());
    if (!r.identical) throw CLI::RuntimeError(3);
  });
}

}  // namespace tandem::app
