// What every request handler shares (internal to src/server): the codec, the engine loop, the
// metrics, the options, the stored responses, and the access-log record of the request being
// served on this thread.
#pragma once

#include <httplib.h>

#include <functional>
#include <string>
#include <string_view>

#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/response_store.h"
#include "server/text_codec.h"

namespace tandem::server {

struct HandlerContext {
  const TextCodec& codec;
  EngineLoop& loop;
  Metrics& metrics;
  const ServerOptions& opt;
  ResponseStore& responses;  // POST /v1/responses with store (--max-stored-responses)
  ProtocolLimits limits;
  int64_t created;  // server start, Unix seconds (/v1/models)
};

// Filled while a request is served; httplib calls the logger on the same thread once the
// response (a whole stream included) has been written.
struct AccessRecord {
  double started = 0;
  std::string id;
  int64_t prompt_tokens = -1, completion_tokens = -1;
  std::string finish_reason;
};
AccessRecord& access_record();  // this thread's

// Rewrites a stream's SSE frames into another protocol's (the Responses API's events,
// responses_api.h): called with each frame as the endpoint would send it ("data: {json}\n\n",
// kSseDone last), it returns what to send instead (empty: nothing).
using FrameRewriter = std::function<std::string(const std::string& frame)>;

// POST /v1/chat/completions and /v1/completions: validation, submission, then one JSON response
// or an SSE stream (its frames through `rewrite` when given). Throws ApiError for the handler's
// error path (before anything is sent).
void handle_generation(const HandlerContext& ctx, Endpoint endpoint, std::string_view body,
                       httplib::Response& res, FrameRewriter rewrite = {});

}  // namespace tandem::server
