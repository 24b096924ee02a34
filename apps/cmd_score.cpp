// `tandem score`: teacher-forced logits of a prompt, written as float32 .npy [n_tokens, vocab].
#include "apps/cli_common.h"
#include "apps/commands.h"
#include "core/npy.h"
#include "engine/generator.h"

namespace tandem::app {

void add_score_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("score", "write the logits of every prompt position to a .npy file");
  auto o = std::make_shared<CommonOptions>();
  auto ids = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  add_common_options(cmd, *o);
  cmd->add_option("--prompt-ids", *ids, "comma-separated token ids")->required();
  cmd->add_option("--out", *out, "output .npy file (float32 [n_tokens, vocab])")->required();
  cmd->callback([o, ids, out] {
    const std::vector<int32_t> prompt = parse_ids(*ids);
    o->max_context = std::max<int64_t>(o->max_context, static_cast<int64_t>(prompt.size()) + 1);
    auto model = open_model(*o, false);
    Generator gen(*model, nullptr, GeneratorOptions{.max_context = o->max_context});
    write_npy(*out, gen.score(prompt));
  });
}

}  // namespace tandem::app
