// Routes, authentication, errors and the access log of `tandem serve` (http_server.h), on
// cpp-httplib 0.11's threaded server. The generation endpoints live in completions.cpp.
#include "server/http_server.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/handler_context.h"
#include "server/openai_render.h"
#include "server/responses_api.h"

namespace tandem::server {

namespace {

struct Route {
  const char* path;
  const char* method;
  bool auth;  // needs the API key when one is set
};
constexpr Route kRoutes[] = {
    {"/v1/chat/completions", "POST", true},
    {"/v1/completions", "POST", true},
    {"/v1/responses", "POST", true},
    {"/v1/models", "GET", true},
    {"/health", "GET", false},
    {"/metrics", "GET", false},
    {"/tokenize", "POST", true},
    {"/detokenize", "POST", true},
};

const Route* find_route(const std::string& path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return &r;
  return nullptr;
}

bool needs_auth(const std::string& path) {
  if (const Route* r = find_route(path)) return r->auth;
  return path.rfind("/v1/", 0) == 0;
}

// Compares without an early exit, so that the time taken does not reveal the key's prefix.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % std::max<size_t>(b.size(), 1)];
  return diff == 0 && !b.empty();
}

void write_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(dump(error_body(e)), "application/json");
}

}  // namespace

AccessRecord& access_record() {
  thread_local AccessRecord record;
  return record;
}

int64_t http_threads(const ServerOptions& o) {
  if (o.threads > 0) return o.threads;
  return std::max<int64_t>(600, o.max_num_seqs + o.max_queue + 64);
}

struct HttpServer::Impl {
  Impl(const TextCodec& codec, EngineLoop& loop, Metrics& metrics, ServerOptions o)
      : opt(std::move(o)),
        responses(opt.max_stored_responses),
        ctx{.codec = codec,
            .loop = loop,
            .metrics = metrics,
            .opt = opt,
            .responses = responses,
            .limits = {.served_model = opt.served_model_name,
                       .vocab_size = codec.vocab_size(),
                       .defaults = opt.sampling_defaults},
            .created = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()} {}

  void check_auth(const httplib::Request& req) const {
    if (opt.api_key.empty() || !needs_auth(req.path)) return;
    const std::string given = req.get_header_value("Authorization");
    if (!same_secret(given, "Bearer " + opt.api_key)) {
      throw ApiError(
          401,
          given.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "invalid API key",
          "authentication_error", {}, "invalid_api_key");
    }
  }

  // Every handler runs behind answer (errors as OpenAI JSON) after the authentication check.
  // answer runs a handler body, turning what it throws into the JSON error response: ApiError as it
  // says, a tandem::Error (a request the engine or the tokenizer refused) as a 400, anything else
  // as a 500. The server never lets an exception reach httplib.
  template <typename Body>
  void answer(httplib::Response& res, Body body) {
    try {
      body();
    } catch (const ApiError& e) {
      write_error(res, e);
    } catch (const Error& e) {
      write_error(res, bad_request({}, e.what()));
    } catch (const std::exception& e) {
      write_error(res,
                  ApiError(500, fmt::format("internal error: {}", e.what()), "internal_error"));
    }
  }

  template <typename Fn>
  httplib::Server::Handler wrap(Fn fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      answer(res, [&] {
        check_auth(req);
        fn(req, res);
      });
    };
  }

  // POST bodies are read here, through httplib's content reader, so that the size limit holds for
  // chunked bodies too (httplib 0.11 checks it only against Content-Length).
  template <typename Fn>
  httplib::Server::HandlerWithContentReader wrap_post(Fn fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader& reader) {
      answer(res, [&] {
        check_auth(req);
        if (req.is_multipart_form_data()) {
          throw bad_request({},
                            "the body must be JSON (application/json), not multipart form data");
        }
        // Past the limit the rest is read and dropped (up to kMaxDrained), so that the
        // connection stays in step for its next request; httplib 0.11 cannot close it here.
        constexpr size_t kMaxDrained = size_t{64} << 20;
        const auto limit = static_cast<size_t>(opt.max_body_bytes);
        std::string body;
        size_t seen = 0;
        const bool ok = reader([&](const char* data, size_t n) {
          seen += n;
          if (seen <= limit) body.append(data, n);
          return seen <= limit + kMaxDrained;
        });
        if (seen > limit || res.status == 413) throw body_too_large();
        if (!ok) throw bad_request({}, "the request body could not be read");
        res.status = -1;
        fn(req, body, res);
      });
    };
  }

  void tokenize(std::string_view raw, httplib::Response& res) const {
    const TokenizeRequest t = parse_tokenize_request(parse_body(raw));
    std::vector<int32_t> ids;
    try {
      ids =
          t.prompt
              ? ctx.codec.encode(*t.prompt)
              : ctx.codec.encode(render_chat_prompt(ctx.codec, t.messages, t.add_generation_prompt,
                                                    t.continue_final_message, Json::object()));
    } catch (const Error& e) {
      throw bad_request(t.prompt ? "prompt" : "messages", e.what());
    }
    const Json out = {{"count", ids.size()}, {"max_model_len", opt.max_model_len}, {"tokens", ids}};
    res.set_content(dump(out), "application/json");
  }

  void detokenize(std::string_view raw, httplib::Response& res) const {
    const std::vector<int32_t> ids = parse_detokenize_request(parse_body(raw), ctx.limits);
    res.set_content(dump(Json{{"prompt", ctx.codec.decode(ids, false)}}), "application/json");
  }

  ApiError body_too_large() const {
    return ApiError(
        413,
        fmt::format("the request body exceeds {} bytes (--max-body-bytes)", opt.max_body_bytes),
        "invalid_request_error", {}, 413);
  }

  // A request no route takes: 405 (with Allow) on a known path, else 404.
  static ApiError no_route(const httplib::Request& req, httplib::Response& res) {
    if (const Route* r = find_route(req.path)) {
      res.set_header("Allow", r->method);
      return ApiError(
          405,
          fmt::format("method {} is not allowed on {}; use {}", req.method, req.path, r->method),
          "invalid_request_error", {}, 405);
    }
    return ApiError(404, fmt::format("no such endpoint: {} {}", req.method, req.path),
                    "not_found_error", {}, 404);
  }

  // Errors httplib produced itself (no route, body too large, bad request line), as JSON; an
  // unknown method on a known path is a 405.
  httplib::Server::HandlerResponse on_error(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    answer(res, [&] {
      if (res.status == 404) {
        check_auth(req);
        throw no_route(req, res);
      }
      if (res.status == 413) throw body_too_large();
      throw ApiError(res.status,
                     fmt::format("the HTTP request was not understood (status {})", res.status),
                     "invalid_request_error", {}, res.status);
    });
    return httplib::Server::HandlerResponse::Handled;
  }

  void log(const httplib::Request& req, const httplib::Response& res) {
    AccessRecord& rec = access_record();
    if (opt.access_log) {
      auto count = [](int64_t n) { return n >= 0 ? Json(n) : Json(); };
      const Json line = {
          {"id", rec.id.empty() ? Json() : Json(rec.id)},
          {"method", req.method},
          {"path", req.path},
          {"status", res.status},
          {"prompt_tokens", count(rec.prompt_tokens)},
          {"completion_tokens", count(rec.completion_tokens)},
          {"finish_reason", rec.finish_reason.empty() ? Json() : Json(rec.finish_reason)},
          {"seconds", rec.started > 0 ? monotonic_seconds() - rec.started : 0.0}};
      const std::string text = dump(line) + "\n";
      static std::mutex mu;
      std::lock_guard lock(mu);
      std::fwrite(text.data(), 1, text.size(), stderr);
    }
    rec = AccessRecord{};
  }

  void install() {
    const size_t threads = static_cast<size_t>(http_threads(opt));
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    svr.set_payload_max_length(static_cast<size_t>(opt.max_body_bytes));
    svr.set_keep_alive_max_count(100000);
    svr.set_keep_alive_timeout(5);
    svr.set_tcp_nodelay(true);  // stream chunks go out as they are written
    svr.set_socket_options([this](socket_t s) {
      const int yes = 1;
      setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));  // no SO_REUSEPORT: a
      if (listen_fd < 0) listen_fd = s;  // second server on the port must fail to bind
    });
    svr.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
      access_record() = AccessRecord{.started = monotonic_seconds()};
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          return on_error(req, res);
        }));
    svr.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          write_error(res, ApiError(500, "internal error", "internal_error"));
        });
    svr.set_logger(
        [this](const httplib::Request& req, const httplib::Response& res) { log(req, res); });

    auto generation = [this](Endpoint e) {
      return wrap_post([this, e](const httplib::Request&, std::string_view body,
                                 httplib::Response& res) { handle_generation(ctx, e, body, res); });
    };
    svr.Post("/v1/chat/completions", generation(Endpoint::kChat));
    svr.Post("/v1/completions", generation(Endpoint::kCompletion));
    svr.Post("/v1/responses",
             wrap_post([this](const httplib::Request&, std::string_view body,
                              httplib::Response& res) { handle_responses(ctx, body, res); }));
    // The stored responses (response_store.h); ids are resp_ and hex digits.
    const std::string stored = R"(/v1/responses/([A-Za-z0-9_\-]+))";
    auto json = [](httplib::Response& res, const Json& body) {
      res.set_content(dump(body), "application/json");
    };
    svr.Get(stored, wrap([this, json](const httplib::Request& req, httplib::Response& res) {
              json(res, retrieve_response(responses, req.matches[1]));
            }));
    svr.Get(stored + "/input_items",
            wrap([this, json](const httplib::Request& req, httplib::Response& res) {
              const std::string order =
                  req.has_param("order") ? req.get_param_value("order") : "desc";
              json(res, response_input_items(responses, req.matches[1], order));
            }));
    svr.Delete(stored, wrap_post([this, json](const httplib::Request& req, std::string_view,
                                              httplib::Response& res) {
                 json(res, delete_response(responses, req.matches[1]));
               }));
    svr.Get("/v1/models", wrap([this](const httplib::Request&, httplib::Response& res) {
              res.set_content(
                  dump(models_json(opt.served_model_name, ctx.created, opt.max_model_len)),
                  "application/json");
            }));
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    svr.Get("/metrics", wrap([this](const httplib::Request&, httplib::Response& res) {
              res.set_content(ctx.metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
            }));
    svr.Post("/tokenize", wrap_post([this](const httplib::Request&, std::string_view body,
                                           httplib::Response& res) { tokenize(body, res); }));
    svr.Post("/detokenize", wrap_post([this](const httplib::Request&, std::string_view body,
                                             httplib::Response& res) { detokenize(body, res); }));
    // Any other body-carrying request: its body is read under the same limit, then 404 or 405.
    auto unrouted = wrap_post([](const httplib::Request& req, std::string_view,
                                 httplib::Response& res) { throw no_route(req, res); });
    svr.Post(".*", unrouted);
    svr.Put(".*", unrouted);
    svr.Patch(".*", unrouted);
    svr.Delete(".*", unrouted);
  }

  ServerOptions opt;
  ResponseStore responses;
  HandlerContext ctx;
  httplib::Server svr;
  socket_t listen_fd = -1;
  std::atomic<bool> serving{false};         // serve() was called and has not returned
  std::atomic<bool> stop_requested{false};  // stop() was called
};

HttpServer::HttpServer(const TextCodec& codec, EngineLoop& loop, Metrics& metrics,
                       ServerOptions opt)
    : impl_(std::make_unique<Impl>(codec, loop, metrics, std::move(opt))) {
  impl_->install();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  Impl& m = *impl_;
  int port = m.opt.port;
  if (port == 0) {
    port = m.svr.bind_to_any_port(m.opt.host);
  } else if (!m.svr.bind_to_port(m.opt.host, port)) {
    port = -1;
  }
  TANDEM_CHECK(port > 0, "cannot listen on {}:{} (address in use or not available)", m.opt.host,
               m.opt.port);
  // httplib listens with a backlog of 5: hundreds of clients connecting at once would see
  // refused or retried connections. Listening again only raises the backlog.
  if (m.listen_fd >= 0) ::listen(m.listen_fd, 4096);
  return port;
}

// httplib's stop() does nothing before its accept loop runs, so the two meet through atomics:
// either serve() sees the request to stop, or stop() sees serve() and waits for the loop.
bool HttpServer::serve() {
  impl_->serving = true;
  const bool ok = impl_->stop_requested || impl_->svr.listen_after_bind();
  impl_->serving = false;
  return ok;
}

void HttpServer::stop() {
  impl_->stop_requested = true;
  while (impl_->serving && !impl_->svr.is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->svr.stop();
}

}  // namespace tandem::server
