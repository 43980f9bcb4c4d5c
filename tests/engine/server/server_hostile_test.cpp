// Clients that attack the server's resources rather than its parser: a second
// server on a port in use, chunked and unbounded bodies past --max-request-bytes, slow headers
// from many connections (slowloris), one small request asking for a huge number of samples,
// and an allocation failure while a response is produced. Each is bounded and the server keeps
// serving. Every client loop here is bounded in count and time.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "engine/server/server.h"
#include "failing_backend.h"
#include "raw_connection.h"
#include "served.h"

namespace furlong::engine::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::make_backend;
using testing::RawConnection;
using testing::Served;
using testing::status_of;

const std::string kChunkedPost =
    "POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Sends `piece` again and again, waiting up to 5 ms for an answer after each, until the
// server answers or closes, `max_bytes` are sent, or 10 s pass. Returns the bytes sent by then.
size_t send_until_answered(RawConnection& c, const std::string& piece, size_t max_bytes) {
  size_t sent = 0;
  const auto start = Clock::now();
  while (sent < max_bytes && seconds_since(start) < 10) {
    if (c.answered_within(5ms)) break;
    if (!c.send_all(piece)) break;  // the server closed its side
    sent += piece.size();
  }
  return sent;
}

// A hex chunk of `body` for a chunked body.
std::string chunk(const std::string& body) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", body.size());
  return size + body + "\r\n";
}

TEST(ServerHostile, ASecondServerOnAPortInUseFailsToBindAndTakesNoTraffic) {
  ServerOptions first_options;
  first_options.served_model_name = "first";
  Served first(first_options);
  const int port = first.server->port();
  ServerOptions options;
  options.port = port;
  options.served_model_name = "second";
  EngineServer second(make_backend(), options);
  std::string message = "(bound)";
  try {
    second.start();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("address already in use"), std::string::npos) << message;
  EXPECT_NE(message.find(":" + std::to_string(port)), std::string::npos) << message;
  // Every new connection reaches the first server (SO_REUSEPORT would split them).
  for (int i = 0; i < 16; ++i) {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(5);
    auto res = client.Get("/v1/models");
    ASSERT_TRUE(res) << "request " << i;
    EXPECT_EQ(Json::parse(res->body)["data"][0]["id"], "first") << "request " << i;
  }
}

TEST(ServerHostile, ThePortBindsAgainRightAfterAStop) {
  int port = -1;
  {
    Served first;
    port = first.server->port();
    // Connection: close makes the server close first: its side stays in TIME_WAIT.
    httplib::Client client("127.0.0.1", port);
    ASSERT_TRUE(client.Get("/health", {{"Connection", "close"}}));
  }
  ServerOptions options;
  options.port = port;
  EngineServer again(make_backend(), options);
  EXPECT_EQ(again.start(), port);
}

ServerOptions small_bodies() {
  ServerOptions options;
  options.max_request_bytes = 4096;
  return options;
}

TEST(ServerHostile, AChunkedBodyOverTheLimitIs413AndIsNotReadFurther) {
  Served s(small_bodies());
  RawConnection c(s.server->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send_all(kChunkedPost));
  size_t sent = send_until_answered(c, chunk(std::string(1024, ' ')), 256 << 10);
  std::string response = c.read_response();
  EXPECT_EQ(status_of(response), 413) << response.substr(0, 300);
  EXPECT_NE(response.find("--max-request-bytes (4096 bytes)"), std::string::npos) << response;
  EXPECT_LT(sent, 16u * 4096) << "the server kept reading the body";
  EXPECT_TRUE(s.client->health());
}

TEST(ServerHostile, AChunkDeclaredOverTheLimitIs413BeforeItsData) {
  Served s(small_bodies());
  RawConnection c(s.server->port());
  ASSERT_TRUE(c.send_all(kChunkedPost + "40000000\r\n"));  // one chunk of 1 GiB
  size_t sent = send_until_answered(c, std::string(1024, 'x'), 256 << 10);
  EXPECT_EQ(status_of(c.read_response()), 413) << c.received().substr(0, 300);
  EXPECT_LT(sent, 16u * 4096) << "the server kept reading the chunk";
}

TEST(ServerHostile, AContentLengthOverTheLimitIs413WithoutReadingTheBody) {
  Served s(small_bodies());
  RawConnection c(s.server->port());
  ASSERT_TRUE(c.send_all(
      "POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1073741824\r\n\r\n"));
  size_t sent = send_until_answered(c, std::string(1024, 'x'), 256 << 10);
  EXPECT_EQ(status_of(c.read_response()), 413) << c.received().substr(0, 300);
  EXPECT_LT(sent, 16u * 4096) << "the server kept reading (discarding) the body";
}

// The limit is the same for both framings: limit bytes pass, limit + 1 is a 413.
TEST(ServerHostile, ChunkedBodiesPassUpToTheLimitExactly) {
  Served s(small_bodies());
  const std::string json = R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 1}})";
  for (size_t size : {size_t{4096}, size_t{4097}}) {
    std::string body = json + std::string(size - json.size(), ' ');
    RawConnection c(s.server->port());
    ASSERT_TRUE(c.send_all(kChunkedPost + chunk(body.substr(0, 1000)) + chunk(body.substr(1000)) +
                           "0\r\n\r\n"));
    int status = status_of(c.read_response());
    EXPECT_EQ(status, size == 4096 ? 200 : 413) << size << ": " << c.received().substr(0, 300);
  }
}

// RFC 9112 6.3: a request with neither Content-Length nor Transfer-Encoding has no body, so the
// server answers it instead of reading until the client closes.
TEST(ServerHostile, APostWithoutLengthOrChunkingHasAnEmptyBody) {
  Served s(small_bodies());
  RawConnection c(s.server->port());
  ASSERT_TRUE(c.send_all("POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  size_t sent = send_until_answered(c, std::string(1024, 'x'), 256 << 10);
  std::string response = c.read_response();
  EXPECT_EQ(status_of(response), 400) << response.substr(0, 300);
  EXPECT_LT(sent, 16u * 4096) << "the server read past the headers";
}

TEST(ServerHostile, ACompressedRequestBodyIs415) {
  Served s(small_bodies());
  httplib::Client client(s.server->url());
  client.set_read_timeout(5);
  auto res = client.Post("/generate", {{"Content-Encoding", "gzip"}}, std::string(64, 'x'),
                         "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 415) << res->body;
  EXPECT_NE(res->body.find("Content-Encoding"), std::string::npos) << res->body;
}

// Connections that send their header one byte at a time, from a thread, for at most `ticks`
// rounds of `every` (or until stop).
class Trickle {
 public:
  Trickle(int port, int connections, std::chrono::milliseconds every, int ticks) {
    for (int i = 0; i < connections; ++i) {
      conns_.push_back(std::make_unique<RawConnection>(port));
      conns_.back()->send_some("GET /get_model_info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    }
    thread_ = std::thread([this, every, ticks] {
      for (int t = 0; t < ticks && !stop_; ++t) {
        for (auto& c : conns_) c->send_some("a");
        std::this_thread::sleep_for(every);
      }
    });
  }
  ~Trickle() {
    stop_ = true;
    thread_.join();
  }
  std::vector<std::unique_ptr<RawConnection>>& connections() { return conns_; }

 private:
  std::vector<std::unique_ptr<RawConnection>> conns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(ServerHostile, SlowHeadersOnManyConnectionsDoNotStarveAnAuthenticatedRequest) {
  ServerOptions options;
  options.api_key = "secret";
  options.max_concurrent_requests = 4;
  Served s(options);
  // 64 connections, 16 times the handler threads, each one header byte every 200 ms (12 s).
  Trickle slow(s.server->port(), 64, 200ms, 60);
  std::this_thread::sleep_for(500ms);
  httplib::Client client(s.server->url());
  client.set_connection_timeout(8);
  client.set_read_timeout(8);
  const auto start = Clock::now();
  auto res = client.Post("/generate", {{"Authorization", "Bearer secret"}},
                         R"({"input_ids": [5], "sampling_params": {"max_new_tokens": 2}})",
                         "application/json");
  const double elapsed = seconds_since(start);
  ASSERT_TRUE(res) << "no answer in " << elapsed << " s";
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_LT(elapsed, 4.0);
}

TEST(ServerHostile, AHeaderNotCompleteWithinTheTimeoutIs408AndClosed) {
  ServerOptions options;
  options.header_timeout_s = 1;
  Served s(options);
  Trickle slow(s.server->port(), 1, 100ms, 50);  // would keep sending for 5 s
  const auto start = Clock::now();
  auto& c = *slow.connections()[0];
  ASSERT_TRUE(c.closed_within(4s)) << "still open after " << seconds_since(start) << " s";
  EXPECT_GT(seconds_since(start), 0.5);
  EXPECT_EQ(status_of(c.received()), 408) << c.received();
  EXPECT_TRUE(s.client->health());
}

TEST(ServerHostile, WaitingConnectionsBeyondTheBoundCloseTheOldestFirst) {
  ServerOptions options;
  options.max_waiting_connections = 8;
  options.api_key = "secret";
  Served s(options);
  std::vector<std::unique_ptr<RawConnection>> conns;
  for (int i = 0; i < 24; ++i) {
    conns.push_back(std::make_unique<RawConnection>(s.server->port()));
    ASSERT_TRUE(conns.back()->send_all("GET /health HTTP/1.1\r\nX-Slow: "));
    std::this_thread::sleep_for(10ms);  // the gate sees them in this order
  }
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(conns[i]->closed_within(3s)) << "connection " << i;
  for (int i = 16; i < 23; ++i) EXPECT_FALSE(conns[i]->closed_within(50ms)) << "connection " << i;
  httplib::Client client(s.server->url());
  client.set_read_timeout(5);
  auto res = client.Get("/get_model_info", {{"Authorization", "Bearer secret"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// A body of `prompts` one-token prompts for /generate or /v1/completions, n samples each.
std::string many_prompts(const std::string& path, int prompts, int n) {
  Json ids = Json::array();
  for (int i = 0; i < prompts; ++i) ids.push_back(Json::array({1 + i % 50}));
  if (path == "/generate") {
    return Json{{"input_ids", ids}, {"sampling_params", {{"n", n}, {"max_new_tokens", 1}}}}.dump();
  }
  return Json{{"prompt", ids}, {"n", n}, {"max_tokens", 1}}.dump();
}

TEST(ServerHostile, OneRequestQueuesAtMostMaxSamplesPerRequest) {
  ServerOptions options;
  options.max_samples_per_request = 64;
  Served s(options);
  for (const char* path : {"/generate", "/v1/completions"}) {
    auto raw = s.client->request("POST", path, many_prompts(path, 5, 16));  // 80 samples
    EXPECT_EQ(raw.status, 400) << path << ": " << raw.body.substr(0, 300);
    EXPECT_NE(raw.body.find("--max-samples-per-request (64)"), std::string::npos) << raw.body;
    EXPECT_NE(raw.body.find("80"), std::string::npos) << raw.body;
    raw = s.client->request("POST", path, many_prompts(path, 4, 16));  // 64: the bound
    EXPECT_EQ(raw.status, 200) << path << ": " << raw.body.substr(0, 300);
  }
  auto raw = s.client->request(
      "POST", "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "hi"}], "n": 65, "max_tokens": 1})");
  EXPECT_EQ(raw.status, 400) << raw.body.substr(0, 300);
  EXPECT_NE(raw.body.find("--max-samples-per-request"), std::string::npos) << raw.body;
  EXPECT_EQ(s.backend->num_running(), 0);
}

// The issue's request: 5000 prompts x n = 128 in a 40 KB body, against the default bound.
TEST(ServerHostile, TheDefaultBoundRejectsHugeFanOutAtOnce) {
  Served s;
  const auto start = Clock::now();
  auto raw =
      s.client->request("POST", "/v1/completions", many_prompts("/v1/completions", 5000, 128));
  EXPECT_EQ(raw.status, 400) << raw.body.substr(0, 300);
  EXPECT_NE(raw.body.find("640000"), std::string::npos) << raw.body.substr(0, 300);
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(s.backend->num_running(), 0);
}

TEST(ServerHostile, AnAllocationFailureIsA503AndTheServerKeepsServing) {
  auto backend = std::make_shared<testing::FailingBackend>(make_backend());
  ServerOptions options;
  options.port = 0;
  EngineServer server(backend, options);
  server.start();
  EngineClient client(server.url(), ClientOptions{});
  backend->fail_submit = true;
  auto raw = client.request("POST", "/generate", R"({"input_ids": [3]})");
  EXPECT_EQ(raw.status, 503) << raw.body;
  Json body = Json::parse(raw.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << raw.body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find("out of memory"), std::string::npos);
  backend->fail_submit = false;
  EXPECT_TRUE(client.health());
  EXPECT_EQ(client.generate({1}, testing::sampling(2)).output_ids.size(), 2u);
}

// While a streamed response is produced, outside any route handler: the stream ends, the
// server does not (an escaping exception used to terminate the process).
TEST(ServerHostile, AnAllocationFailureWhileStreamingEndsOnlyThatStream) {
  auto backend = std::make_shared<testing::FailingBackend>(make_backend());
  ServerOptions options;
  options.port = 0;
  EngineServer server(backend, options);
  server.start();
  backend->fail_weight_version = true;
  httplib::Client streaming(server.url());
  streaming.set_read_timeout(10);
  auto res = streaming.Post(
      "/generate",
      R"({"input_ids": [3], "stream": true, "sampling_params": {"max_new_tokens": 64}})",
      "application/json");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("out of memory"), std::string::npos) << res->body;
  backend->fail_weight_version = false;
  EngineClient client(server.url(), ClientOptions{});
  EXPECT_TRUE(client.health());
  EXPECT_EQ(client.generate({1}, testing::sampling(2)).output_ids.size(), 2u);
}

}  // namespace
}  // namespace furlong::engine::server
