// The HTTP server in process (server/http_server.h) with the shipped model and its tokenizer,
// through httplib's client: statuses and JSON errors of docs/server.md, authentication, SSE
// framing, stop strings, the same greedy text streamed or not, and a client that goes away
// mid-stream having its request cancelled.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <thread>

#include "apps/serve_codec.h"
#include "server/http_server.h"
#include "server/protocol.h"
#include "test_support.h"

namespace tandem::server {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::ordered_json;

const char* kKey = "sekret";

// One server on a free port, with its own engine over the shared model.
struct Served {
  Served(Qwen35Model& model, const app::TokenizerCodec& codec, ServerOptions o)
      : engine(model, nullptr,
               BatchEngineOptions{.max_num_seqs = 4, .max_model_len = 256, .keep_finished = false}),
        loop(engine, metrics, o.max_queue),
        http(codec, loop, metrics, o) {
    port = http.bind();
    thread = std::thread([this] { http.serve(); });
  }
  ~Served() {
    http.stop();
    loop.shutdown();
    thread.join();
  }
  httplib::Client client(bool with_key = true) const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    if (with_key) c.set_default_headers({{"Authorization", std::string("Bearer ") + kKey}});
    return c;
  }

  BatchEngine engine;
  Metrics metrics;
  EngineLoop loop;
  HttpServer http;
  int port = 0;
  std::thread thread;
};

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::load_fixture(testing::kTrainedModel).release();
    codec_ = new app::TokenizerCodec(
        tok::Tokenizer::from_dir(testing::fixture_dir(testing::kTrainedModel)));
    ServerOptions o{.port = 0,
                    .served_model_name = "tiny",
                    .api_key = kKey,
                    .max_queue = 64,
                    .max_body_bytes = 64 << 10,
                    .max_model_len = 256,
                    .max_num_seqs = 4,
                    .eos_ids = model_->config().eos_token_ids,
                    .access_log = false,
                    .threads = 32};
    server_ = new Served(*model_, *codec_, o);
  }
  static void TearDownTestSuite() {
    delete server_;
    delete codec_;
    delete model_;
  }

  static Json post(const std::string& path, const Json& body, int want_status) {
    auto res = server_->client().Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << path;
    if (!res) return {};
    EXPECT_EQ(res->status, want_status) << path << " " << res->body;
    return Json::parse(res->body);
  }

  // The events of an SSE body: each "data: ...\n\n"; the JSON ones parsed, [DONE] last.
  static std::vector<Json> events(const std::string& body) {
    std::vector<Json> out;
    size_t pos = 0;
    bool done = false;
    while (pos < body.size()) {
      const size_t end = body.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos) << "unterminated event";
      if (end == std::string::npos) break;
      const std::string ev = body.substr(pos, end - pos);
      EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
      EXPECT_EQ(ev.find('\n'), std::string::npos) << ev;
      EXPECT_FALSE(done) << "event after [DONE]";
      if (ev == "data: [DONE]") {
        done = true;
      } else {
        out.push_back(Json::parse(ev.substr(6)));
      }
      pos = end + 2;
    }
    EXPECT_TRUE(done) << "no [DONE]";
    return out;
  }

  static Qwen35Model* model_;
  static app::TokenizerCodec* codec_;
  static Served* server_;
};
Qwen35Model* HttpTest::model_ = nullptr;
app::TokenizerCodec* HttpTest::codec_ = nullptr;
Served* HttpTest::server_ = nullptr;

const Json kChat = {{"model", "tiny"},
                    {"messages", Json::array({{{"role", "user"}, {"content", "Tell a story"}}})},
                    {"max_tokens", 24},
                    {"temperature", 0}};

TEST_F(HttpTest, HealthModelsAndMetrics) {
  auto c = server_->client(false);  // neither needs the key
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_TRUE(health->body.empty());
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  EXPECT_NE(metrics->body.find("tandem:num_requests_running"), std::string::npos);
  auto models = server_->client().Get("/v1/models");
  ASSERT_TRUE(models);
  const Json m = Json::parse(models->body);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
}

TEST_F(HttpTest, ErrorStatusesAreOpenAIJson) {
  auto check = [](const httplib::Result& res, int status, const char* type) {
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, status) << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    const Json e = Json::parse(res->body);
    ASSERT_TRUE(e["error"].is_object()) << res->body;
    EXPECT_EQ(e["error"]["type"], type) << res->body;
    EXPECT_TRUE(e["error"]["message"].is_string());
  };
  auto c = server_->client();
  check(c.Get("/v1/nothing"), 404, "not_found_error");
  auto wrong_method = c.Get("/v1/chat/completions");
  check(wrong_method, 405, "invalid_request_error");
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST");
  check(c.Delete("/health"), 405, "invalid_request_error");
  check(c.Post("/v1/completions", "{\"prompt\": ", "application/json"), 400,
        "invalid_request_error");
  check(c.Post("/v1/completions", std::string(100 << 10, ' '), "application/json"), 413,
        "invalid_request_error");
  check(c.Post("/v1/completions", R"({"prompt": "x", "model": "nope"})", "application/json"), 404,
        "invalid_request_error");
  check(c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 300})", "application/json"), 400,
        "invalid_request_error");
  check(server_->client(false).Post("/v1/completions", R"({"prompt": "x"})", "application/json"),
        401, "authentication_error");
  httplib::Client wrong("127.0.0.1", server_->port);
  wrong.set_default_headers({{"Authorization", "Bearer nope"}});
  check(wrong.Get("/v1/models"), 401, "authentication_error");
  check(wrong.Post("/tokenize", R"({"prompt": "x"})", "application/json"), 401,
        "authentication_error");
  // The server still serves.
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST_F(HttpTest, TheContextLimitNamesBothNumbers) {
  const Json e = post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 255}}, 400);
  const std::string msg = e["error"]["message"];
  const size_t prompt = codec_->encode("hello").size();
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(255 + prompt)), std::string::npos) << msg;
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
}

TEST_F(HttpTest, GreedyTextIsTheSameStreamedOrNot) {
  const Json whole = post("/v1/chat/completions", kChat, 200);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const std::string text = whole["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(whole["usage"]["completion_tokens"], 24);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(whole["speculation"].is_object());

  Json req = kChat;
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  auto res = server_->client().Post("/v1/chat/completions", req.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<Json> ev = events(res->body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  std::string streamed;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(ev[i]["id"], ev[0]["id"]);
    const Json& d = ev[i]["choices"][0]["delta"];
    if (d.contains("content")) streamed += d["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "length");
  const Json& usage = ev.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 24);
  EXPECT_TRUE(usage["speculation"].is_object());
}

TEST_F(HttpTest, StopStringsCutTheTextStreamedOrNot) {
  const Json plain =
      post("/v1/completions",
           {{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"temperature", 0}}, 200);
  const std::string text = plain["choices"][0]["text"];
  ASSERT_GE(text.size(), 12u);
  const std::string stop = text.substr(text.size() / 2, 3);
  const std::string want = text.substr(0, text.find(stop));
  Json req = {{"prompt", "Once upon a time"},
              {"max_tokens", 30},
              {"temperature", 0},
              {"stop", Json::array({stop})}};
  const Json cut = post("/v1/completions", req, 200);
  EXPECT_EQ(cut["choices"][0]["text"], want) << "stop '" << stop << "'";
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(cut["usage"]["completion_tokens"].get<int>(), 30);

  req["stream"] = true;
  auto res = server_->client().Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(res);
  std::string streamed;
  const std::vector<Json> ev = events(res->body);
  for (const Json& e : ev) streamed += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, want);
  EXPECT_EQ(ev.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(ev.back()["speculation"].is_object());  // no usage chunk: on the final chunk
}

TEST_F(HttpTest, LogprobsAndTokenizeRoundTrip) {
  Json req = kChat;
  req["logprobs"] = true;
  req["top_logprobs"] = 3;
  req["max_tokens"] = 5;
  const Json r = post("/v1/chat/completions", req, 200);
  const Json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u);
  for (const Json& t : content) {
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_EQ(t["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(t["top_logprobs"][0]["token"], t["token"]);
  }
  const Json tok = post("/tokenize", {{"prompt", "hello world"}}, 200);
  EXPECT_EQ(tok["count"], tok["tokens"].size());
  EXPECT_EQ(tok["max_model_len"], 256);
  const Json back = post("/detokenize", {{"tokens", tok["tokens"]}}, 200);
  EXPECT_EQ(back["prompt"], "hello world");
  const Json chat_tok = post("/tokenize", {{"messages", kChat["messages"]}}, 200);
  EXPECT_GT(chat_tok["count"].get<int>(), 3);
}

// A raw TCP connection to the server (for what httplib's client does not send).
int connect_raw(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads one response with a Content-Length body.
std::string read_response(int fd) {
  std::string got;
  char buf[4096];
  for (;;) {
    const size_t head = got.find("\r\n\r\n");
    if (head != std::string::npos) {
      const size_t cl = got.find("Content-Length: ");
      const size_t len = cl == std::string::npos ? 0 : std::stoul(got.substr(cl + 16));
      if (got.size() >= head + 4 + len) return got;
    }
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

TEST_F(HttpTest, AChunkedBodyOverTheLimitIs413AndTheConnectionStaysUsable) {
  const int fd = connect_raw(server_->port);
  ASSERT_GE(fd, 0);
  std::string wire = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                     std::string(kKey) +
                     "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string piece(1000, ' ');
  for (int i = 0; i < 100; ++i) wire += "3e8\r\n" + piece + "\r\n";  // 100 KB > 64 KiB
  wire += "0\r\n\r\n";
  ASSERT_EQ(send(fd, wire.data(), wire.size(), 0), static_cast<ssize_t>(wire.size()));
  const std::string first = read_response(fd);
  EXPECT_EQ(first.rfind("HTTP/1.1 413", 0), 0u) << first;
  EXPECT_NE(first.find("--max-body-bytes"), std::string::npos);
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, health.data(), health.size(), 0), static_cast<ssize_t>(health.size()));
  EXPECT_EQ(read_response(fd).rfind("HTTP/1.1 200", 0), 0u);
  close(fd);
}

TEST_F(HttpTest, AClientThatGoesAwayHasItsRequestCancelled) {
  const Json req = {{"prompt", "Once"},
                    {"max_tokens", 200},
                    {"ignore_eos", true},
                    {"temperature", 0},
                    {"stream", true}};
  // The cancellations counted so far (other tests share the server).
  auto cancelled_total = [&] {
    const std::string m = server_->metrics.render();
    const std::string key = "\ntandem:request_cancelled_total ";
    const size_t at = m.find(key);
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + key.size()));
  };
  const double cancelled_before = cancelled_total();
  ASSERT_GE(cancelled_before, 0) << server_->metrics.render();
  // A raw connection: send the request, read until a few events came, hang up.
  const int fd = connect_raw(server_->port);
  ASSERT_GE(fd, 0);
  const std::string body = req.dump();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                           std::string(kKey) + "\r\nContent-Type: application/json\r\n" +
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  const std::string wire = head + body;
  ASSERT_EQ(send(fd, wire.data(), wire.size(), 0), static_cast<ssize_t>(wire.size()));
  std::string got;
  char buf[4096];
  while (std::count(got.begin(), got.end(), '\n') < 12) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_NE(got.find("200 OK"), std::string::npos);
  EXPECT_NE(got.find("data: {"), std::string::npos);
  close(fd);
  // The engine frees the slot: nothing runs, and the cancellation is counted.
  bool cancelled = false;
  for (int i = 0; i < 300 && !cancelled; ++i) {
    const std::string m = server_->metrics.render();
    cancelled = cancelled_total() == cancelled_before + 1 &&
                m.find("\ntandem:num_requests_running 0\n") != std::string::npos;
    if (!cancelled) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(cancelled) << server_->metrics.render();
}

TEST_F(HttpTest, HostileBodiesNeverBreakTheServer) {
  const Json before = post("/v1/chat/completions", kChat, 200);
  std::mt19937 rng(3);
  const std::string valid = kChat.dump();
  std::vector<std::string> bodies = {
      "",
      "null",
      "[]",
      "\"x\"",
      "{}",
      std::string(300, '{'),
      std::string("{\"a\":\0}", 7),  // a NUL where the value goes
      R"({"messages": [{"role": "user", "content": "\u0000"}], "max_tokens": 1})",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e308})",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -9223372036854775808})",
      R"({"messages": [{"role": "user", "content": "x"}], "stop": [[[]]]})",
      R"({"messages": [{"role": "user", "content": "x"}], "temperature": NaN})",
      R"({"prompt": [[1, 2], [3]]})",
      R"({"prompt": [1, "a"]})",
      R"({"tokens": [-1]})"};
  for (int i = 0; i < 150; ++i) {
    std::string b = valid.substr(0, rng() % valid.size());      // truncated
    if (i % 3 == 0 && !b.empty()) b[rng() % b.size()] ^= 0x80;  // invalid UTF-8 somewhere
    bodies.push_back(b);
    std::string noise(rng() % 64, ' ');
    for (char& c : noise) c = static_cast<char>(rng());
    bodies.push_back(noise);
  }
  auto c = server_->client();
  for (const std::string& b : bodies) {
    for (const char* path :
         {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
      auto res = c.Post(path, b, "application/json");
      ASSERT_TRUE(res) << path << " " << b;
      EXPECT_GE(res->status, 200);
      EXPECT_LT(res->status, 500) << path << " " << b << " -> " << res->body;
      if (res->status >= 400) {
        EXPECT_TRUE(Json::parse(res->body)["error"].is_object());
      }
    }
  }
  EXPECT_EQ(c.Get("/health")->status, 200);
  const Json after = post("/v1/chat/completions", kChat, 200);
  EXPECT_EQ(after["choices"][0]["message"]["content"], before["choices"][0]["message"]["content"]);
}

TEST_F(HttpTest, AFullQueueIsA503WithRetryAfter) {
  ServerOptions o{.port = 0,
                  .served_model_name = "tiny",
                  .max_queue = 0,
                  .max_model_len = 256,
                  .eos_ids = model_->config().eos_token_ids,
                  .access_log = false,
                  .threads = 8};
  Served busy(*model_, *codec_, o);
  auto res = busy.client(false).Post("/v1/completions", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "queue_full");
}

}  // namespace
}  // namespace tandem::server
