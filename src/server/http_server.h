// `tandem serve`'s HTTP side (docs/server.md): cpp-httplib's threaded server, the routes, API
// key checks, OpenAI-style JSON errors for every failure (404, 405, 413, ...), one JSON access-log
// line per request on stderr, and the Prometheus endpoint. Handlers never touch the engine: they
// talk to the EngineLoop. httplib stays behind this interface (pimpl).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/reasoning.h"
#include "server/text_codec.h"
#include "server/tool_calls.h"

namespace tandem::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: a free port
  std::string served_model_name;
  std::string api_key;  // empty: no authentication
  int64_t max_queue = 1024;
  int64_t max_body_bytes = 8 << 20;
  int64_t max_model_len = 4096;
  int64_t max_num_seqs = 8;
  std::vector<int32_t> eos_ids;  // generation stops at these unless ignore_eos
  bool access_log = true;
  int64_t threads = 0;  // HTTP threads; 0: http_threads() (tests take fewer)
  // Chat answers to requests with tools (and tool_choice not "none") read as tool calls.
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;
  // Chat answers split into reasoning_content and content (reasoning.h).
  ReasoningFormat reasoning_format = ReasoningFormat::kNone;
  // Sampling fields a request leaves out (--generation-config).
  SamplingDefaults sampling_defaults;
  // Responses kept for previous_response_id and GET /v1/responses/{id}; 0: none.
  int64_t max_stored_responses = 1024;
};

// Threads serving connections: every open connection holds one (streams included), so enough for
// every resident and waiting request plus headroom, and never fewer than 600.
int64_t http_threads(const ServerOptions& o);

class HttpServer {
 public:
  HttpServer(const TextCodec& codec, EngineLoop& loop, Metrics& metrics, ServerOptions opt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0: any free port) and returns the port; throws Error when it cannot.
  int bind();
  // Accepts connections until stop(); blocks. false when listening failed.
  bool serve();
  // Stops accepting; returns at once (serve() returns once open connections have ended).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::server
