// `tandem serve`: the OpenAI-compatible HTTP server (docs/server.md) over the batched engine.
// Loads the tokenizer and the model, builds the BatchEngine from the same flags as `generate`,
// starts the engine loop and the HTTP server, prints `tandem serve: listening on http://HOST:PORT`
// and serves until SIGINT/SIGTERM: then it stops accepting, aborts what is in flight (streams end
// with finish_reason "abort" and [DONE]) and returns, so the process exits 0.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <thread>

#include "apps/cli_common.h"
#include "apps/commands.h"
#include "apps/generate_options.h"
#include "apps/serve_codec.h"
#include "core/exec_context.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/tool_calls.h"

namespace tandem::app {

namespace {

struct ServeOptions : EngineFlags {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  std::string api_key;
  int64_t max_queue = 1024;
  int64_t max_body_bytes = 8 << 20;
  int64_t max_stored_responses = 1024;
  std::string tool_call_parser, reasoning_parser;
  std::string generation_config = "auto";
  std::string chat_template;
  bool enable_auto_tool_choice = false;
};

void on_stop_signal(int) {}

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// --chat-template: a file, or the template itself (vLLM's two forms); none: the checkpoint's.
std::optional<std::string> load_chat_template(const std::string& arg) {
  if (arg.empty()) return std::nullopt;
  if (std::filesystem::is_regular_file(arg)) {
    std::ifstream in(arg, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "serve: chat template from %s\n", arg.c_str());
    return text;
  }
  TANDEM_CHECK(arg.find("{{") != std::string::npos || arg.find("{%") != std::string::npos,
               "--chat-template {}: no such file (and not a template: no {{{{ or {{%)", arg);
  std::fprintf(stderr, "serve: chat template from the command line\n");
  return arg;
}

// --generation-config: "auto" the model directory's generation_config.json when there is one,
// "vllm" none (OpenAI's defaults), else a directory that must hold one (vLLM's three forms).
server::SamplingDefaults load_sampling_defaults(const ServeOptions& o) {
  namespace fs = std::filesystem;
  server::SamplingDefaults d;
  std::string from = "OpenAI's";
  if (o.generation_config != "vllm") {
    const bool automatic = o.generation_config == "auto";
    const fs::path file =
        fs::path(automatic ? o.model_dir : o.generation_config) / "generation_config.json";
    if (fs::exists(file)) {
      d = server::sampling_defaults_from(read_json_file(file.string()), file.string());
      from = file.string();
    } else {
      TANDEM_CHECK(automatic, "--generation-config {}: there is no generation_config.json there",
                   o.generation_config);
    }
  }
  std::fprintf(stderr,
               "serve: sampling defaults for fields a request leaves out: %s (from %s; "
               "--generation-config vllm keeps OpenAI's)\n",
               server::describe(d).c_str(), from.c_str());
  return d;
}

void serve(ServeOptions& o) {
  // Every thread started from here on (OpenMP's, the engine loop's, httplib's) inherits a mask
  // that blocks the stop signals, so they reach the sigwait below and nothing else.
  // A shell starts background jobs with SIGINT ignored, and an ignored signal never reaches
  // sigwait: give both a handler of their own first (it never runs while they are blocked).
  const sigset_t stops = stop_signals();
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);
  signal(SIGINT, on_stop_signal);
  signal(SIGTERM, on_stop_signal);
  signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a signal

  TANDEM_CHECK(o.speculative == "mtp" || o.speculative == "none",
               "--speculative must be mtp or none for serve, got '{}'", o.speculative);
  TANDEM_CHECK(o.port >= 0 && o.port <= 65535, "--port must be in [0, 65535], got {}", o.port);
  TANDEM_CHECK(o.max_queue >= 0, "--max-queue must be >= 0, got {}", o.max_queue);
  TANDEM_CHECK(o.max_body_bytes >= 1, "--max-body-bytes must be >= 1, got {}", o.max_body_bytes);
  TANDEM_CHECK(o.max_stored_responses >= 0, "--max-stored-responses must be >= 0, got {}",
               o.max_stored_responses);
  TANDEM_CHECK(o.max_num_seqs >= 0, "--max-num-seqs must be >= 1 (0: the default 8), got {}",
               o.max_num_seqs);
  if (o.api_key.empty()) {
    if (const char* env = std::getenv("TANDEM_API_KEY")) o.api_key = env;
  }
  if (o.served_model_name.empty()) o.served_model_name = o.model_dir;  // as vLLM does
  const server::ToolCallFormat tool_format =
      o.tool_call_parser.empty() ? server::ToolCallFormat::kNone
                                 : server::parse_tool_call_format(o.tool_call_parser);
  const server::SamplingDefaults sampling_defaults = load_sampling_defaults(o);
  const server::ReasoningFormat reasoning_format =
      o.reasoning_parser.empty() ? server::ReasoningFormat::kNone
                                 : server::parse_reasoning_format(o.reasoning_parser);
  TANDEM_CHECK(!o.enable_auto_tool_choice || !o.tool_call_parser.empty(),
               "--enable-auto-tool-choice needs --tool-call-parser (qwen3_coder or hermes)");

  TokenizerCodec codec(tok::Tokenizer::from_dir(o.model_dir), load_chat_template(o.chat_template));
  auto model = open_model(o, true);
  const int k = o.speculative == "none" ? 0 : o.num_speculative_tokens;
  apply_kernel_flags(o);  // before the graphs are captured
  std::unique_ptr<Drafter> drafter = make_drafter(o, *model);
  const int64_t max_seqs = o.max_num_seqs > 0 ? o.max_num_seqs : 8;
  BatchEngineOptions eo = engine_options(o, k, max_seqs);
  eo.token_bytes = token_texts(codec.tokenizer(), model->config().vocab_size);  // JSON mode
  eo.keep_finished = false;  // a final output carries the statistics; nothing piles up
  BatchEngine engine(*model, std::move(drafter), eo);
  std::fprintf(stderr, "%s\n", engine.describe().c_str());

  server::ServerOptions so{.host = o.host,
                           .port = o.port,
                           .served_model_name = o.served_model_name,
                           .api_key = o.api_key,
                           .max_queue = o.max_queue,
                           .max_body_bytes = o.max_body_bytes,
                           .max_model_len = o.max_context,
                           .max_num_seqs = max_seqs,
                           .eos_ids = model->config().eos_token_ids,
                           .tool_call_format = tool_format,
                           .reasoning_format = reasoning_format,
                           .sampling_defaults = sampling_defaults,
                           .max_stored_responses = o.max_stored_responses};
  std::fprintf(
      stderr,
      "serve: model name '%s', max queue %lld, max body %lld bytes, %lld HTTP threads, "
      "%lld stored responses at most, API key %s\n",
      so.served_model_name.c_str(), static_cast<long long>(so.max_queue),
      static_cast<long long>(so.max_body_bytes), static_cast<long long>(server::http_threads(so)),
      static_cast<long long>(so.max_stored_responses), so.api_key.empty() ? "off" : "required");
  server::Metrics metrics;
  server::EngineLoop loop(engine, metrics, so.max_queue);
  server::HttpServer http(codec, loop, metrics, so);
  const int port = http.bind();
  std::fprintf(stderr, "tandem serve: listening on http://%s:%d\n", so.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> stopping{false};
  std::thread listener([&] {
    const bool ok = http.serve();
    if (!stopping) {  // it ended on its own: wake the signal wait below
      std::fprintf(stderr, "tandem serve: the HTTP server stopped (%s)\n", ok ? "ok" : "failed");
      kill(getpid(), SIGTERM);
    }
  });
  int sig = 0;
  sigwait(&stops, &sig);
  stopping = true;
  std::fprintf(stderr, "tandem serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  http.stop();      // no new connections
  loop.shutdown();  // in-flight requests end with "abort"; their handlers finish the responses
  listener.join();  // every connection has ended
  std::fprintf(stderr, "tandem serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (docs/server.md)");
  auto o = std::make_shared<ServeOptions>();
  add_engine_flags(cmd, *o, "sequences resident at once (default 8)", /*oracle=*/false);
  cmd->add_option("--host", o->host, "address to bind")->capture_default_str();
  cmd->add_option("--port", o->port, "port to bind (0: a free one, printed)")
      ->capture_default_str();
  cmd->add_option("--served-model-name", o->served_model_name,
                  "the model name clients send (default: --model as given)");
  cmd->add_option("--api-key", o->api_key,
                  "require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize "
                  "(default: $TANDEM_API_KEY)");
  cmd->add_option("--max-queue", o->max_queue,
                  "requests that may wait for a slot; more get 503 with Retry-After")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "largest request body; larger get 413")
      ->capture_default_str();
  cmd->add_option("--max-stored-responses", o->max_stored_responses,
                  "responses of POST /v1/responses kept in memory (store: true) for "
                  "previous_response_id and GET /v1/responses/{id}, the least recently used "
                  "evicted first; 0: none")
      ->capture_default_str();
  cmd->add_option("--tool-call-parser", o->tool_call_parser,
                  "read tool calls out of chat answers to requests with tools: qwen3_coder "
                  "(Qwen3.5, Qwen3-Next) or hermes (Qwen2.5, Qwen3); they come back as "
                  "message.tool_calls with finish_reason tool_calls");
  cmd->add_option("--chat-template", o->chat_template,
                  "the chat template to render messages with instead of the checkpoint's: a file "
                  "or the template itself (vLLM's option)");
  cmd->add_option("--generation-config", o->generation_config,
                  "sampling defaults for fields a request leaves out: auto (the model's "
                  "generation_config.json: temperature, top_p, top_k, min_p, repetition_penalty, "
                  "max_new_tokens), vllm (OpenAI's), or a directory holding a "
                  "generation_config.json (vLLM's option)")
      ->capture_default_str();
  cmd->add_option("--reasoning-parser", o->reasoning_parser,
                  "split chat answers at <think> ... </think>: qwen3 (Qwen3, Qwen3.5, "
                  "Qwen3-Next) or deepseek_r1; the thinking comes back as "
                  "message.reasoning_content (stream deltas too), the rest as the content");
  cmd->add_flag("--enable-auto-tool-choice", o->enable_auto_tool_choice,
                "accepted for vLLM's command lines: --tool-call-parser alone turns it on");
  cmd->callback([o] { serve(*o); });
}

}  // namespace tandem::app
