// The agent env client (train/env_client.h) against a scripted HTTP server on 127.0.0.1:
// answers, retries of 5xx (a successful retry keeps no error), no retry of 4xx, timeouts of the
// whole attempt (dripping servers), the answer size bound, error texts valid UTF-8, non-JSON
// bodies, a dead port, and the checks of /start, /step and /finish answers.
#include "rollout/env_client.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "scripted_server.h"

namespace furlong::rollout {
namespace {

using testing::ScriptedServer;

EnvClientOptions fast(const std::string& url, double timeout_s = 2.0, int retries = 2) {
  return {.url = url, .timeout_s = timeout_s, .max_retries = retries, .backoff_s = 0.01};
}

TEST(EnvClient, PostsJsonToTheEndpointUnderThePath) {
  std::string seen_path, seen_body;
  ScriptedServer server([&](const httplib::Request& req, httplib::Response& res) {
    seen_path = req.path;
    seen_body = req.body;
    res.set_content(R"({"episode_id": "e1"})", "application/json");
  });
  EnvClient client(fast(server.url("/env/")));
  auto reply = client.post("start", {{"sample", {{"index", 3}}}});
  ASSERT_TRUE(reply.ok) << reply.error;
  EXPECT_EQ(reply.attempts, 1);
  EXPECT_EQ(seen_path, "/env/start");
  EXPECT_EQ(Json::parse(seen_body)["sample"]["index"], 3);
  std::string error;
  EXPECT_EQ(parse_start_reply(reply.body, error).value_or(""), "e1");
}

TEST(EnvClient, RetriesServerErrorsThenSucceeds) {
  ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
    if (server.requests < 3) {
      res.status = 503;
      res.set_content("busy", "text/plain");
      return;
    }
    res.set_content(R"({"done": true, "reward": 1})", "application/json");
  });
  EnvClient client(fast(server.url(), 2.0, 2));
  auto reply = client.post("step", Json::object());
  ASSERT_TRUE(reply.ok) << reply.error;
  EXPECT_EQ(reply.attempts, 3);
}

// A successful retry carries no error of the failed attempt before it (a /step answered 503
// once, then 200, succeeds).
TEST(EnvClient, ARetryThatSucceedsKeepsNoErrorOfTheFailedAttempt) {
  ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
    if (server.requests == 1) {
      res.status = 503;
      res.set_content("busy", "text/plain");
      return;
    }
    res.set_content(R"({"observation": [{"role": "tool", "content": "1"}], "done": false})",
                    "application/json");
  });
  EnvClient client(fast(server.url(), 2.0, 1));
  auto reply = client.post("step", Json::object());
  ASSERT_TRUE(reply.ok) << reply.error;
  EXPECT_EQ(reply.attempts, 2);
  EXPECT_EQ(reply.error, "");
  std::string error = reply.error;
  EXPECT_TRUE(parse_step_reply(reply.body, error)) << error;
  // A parse does not depend on what its error text held before.
  error = "stale";
  EXPECT_TRUE(parse_step_reply(reply.body, error));
}

TEST(EnvClient, GivesUpAfterTheRetriesWithTheLastError) {
  ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
    res.status = 500;
    res.set_content("boom", "text/plain");
  });
  EnvClient client(fast(server.url(), 2.0, 1));
  auto reply = client.post("step", Json::object());
  EXPECT_FALSE(reply.ok);
  EXPECT_FALSE(reply.timed_out);
  EXPECT_EQ(reply.attempts, 2);
  EXPECT_EQ(server.requests, 2);
  EXPECT_NE(reply.error.find("HTTP 500: boom"), std::string::npos) << reply.error;
  EXPECT_NE(reply.error.find("/step"), std::string::npos) << reply.error;
}

TEST(EnvClient, ClientErrorsAreNotRetried) {
  ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
    res.status = 404;
    res.set_content("no such episode", "text/plain");
  });
  EnvClient client(fast(server.url(), 2.0, 3));
  auto reply = client.post("step", Json::object());
  EXPECT_FALSE(reply.ok);
  EXPECT_EQ(reply.attempts, 1);
  EXPECT_NE(reply.error.find("no such episode"), std::string::npos) << reply.error;
}

TEST(EnvClient, ASlowServerTimesOutWithinTheBound) {
  ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    res.set_content("{}", "application/json");
  });
  EnvClient client(fast(server.url(), 0.3, 1));
  const auto t0 = std::chrono::steady_clock::now();
  auto reply = client.post("step", Json::object());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(reply.ok);
  EXPECT_TRUE(reply.timed_out) << reply.error;
  EXPECT_EQ(reply.attempts, 2);
  // Two attempts of 0.3 s plus one 0.01 s backoff; far below the server's 1.5 s per answer.
  EXPECT_LT(s, 1.2);
}

// A loopback server that answers every connection with `prefix` at once, then `drip` one byte
// per `gap`; it runs at most 10 s and stops writing when the client hangs up.
class DripServer {
 public:
  DripServer(std::string prefix, std::string drip, std::chrono::milliseconds gap)
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(fd_, 8) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("DripServer: no listening socket");
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, prefix, drip, gap] { serve(prefix, drip, gap); });
  }
  ~DripServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve(const std::string& prefix, const std::string& drip, std::chrono::milliseconds gap) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto running = [&] { return !stop_ && std::chrono::steady_clock::now() < end; };
    while (running()) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      timeval tv{1, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      char request[65536];
      (void)!::recv(c, request, sizeof(request), 0);  // the small request, read once
      bool open = ::send(c, prefix.data(), prefix.size(), MSG_NOSIGNAL) ==
                  static_cast<ssize_t>(prefix.size());
      for (size_t i = 0; open && i < drip.size() && running(); ++i) {
        open = ::send(c, &drip[i], 1, MSG_NOSIGNAL) == 1;
        std::this_thread::sleep_for(gap);
      }
      ::close(c);
    }
  }
  int fd_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// An env dripping one byte at a time, each read in time, is still bounded: the timeout bounds the
// whole attempt: status line, headers and body.
TEST(EnvClient, TheTimeoutBoundsTheWholeAttemptOfADrippingServer) {
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
  const std::string body = R"({"done": true, "reward": 1, "padding": "....................."})";
  const std::string length = "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  struct Case {
    const char* what;
    std::string prefix, drip;
  };
  const Case cases[] = {{"the status line", "", head + length + body},
                        {"the body", head + length, body}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    DripServer server(c.prefix, c.drip, std::chrono::milliseconds(100));
    EnvClient client(fast(server.url(), 0.5, 1));
    const auto t0 = std::chrono::steady_clock::now();
    auto reply = client.post("step", Json::object());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_FALSE(reply.ok);
    EXPECT_TRUE(reply.timed_out) << reply.error;
    EXPECT_EQ(reply.attempts, 2);
    EXPECT_NE(reply.error.find("--agent-env-timeout"), std::string::npos) << reply.error;
    // Two attempts of 0.5 s; the whole answer would take several seconds.
    EXPECT_LT(s, 2.5);
  }
}

// An answer over the size bound (an endless chunked one too), declared or streamed, fails the call
// at once, without a retry.
TEST(EnvClient, AnAnswerOverTheSizeBoundFailsWithoutARetry) {
  constexpr size_t kBound = 1 << 20;
  const auto t0 = std::chrono::steady_clock::now();
  ScriptedServer endless([&](const httplib::Request&, httplib::Response& res) {
    auto sent = std::make_shared<size_t>(0);
    res.set_chunked_content_provider(
        "application/json", [sent, t0](size_t, httplib::DataSink& sink) {
          static const std::string chunk(64 << 10, ' ');
          // Bounded for the test: 256 MiB or 10 s, whichever comes first.
          if (*sent >= (size_t{256} << 20) ||
              std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
            sink.done();
            return true;
          }
          *sent += chunk.size();
          return sink.write(chunk.data(), chunk.size());
        });
  });
  ScriptedServer declared([&](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(2 * kBound, ' '), "application/json");
  });
  for (ScriptedServer* server : {&endless, &declared}) {
    auto options = fast(server->url(), 5.0, 2);
    options.max_response_bytes = kBound;
    EnvClient client(options);
    auto reply = client.post("step", Json::object());
    EXPECT_FALSE(reply.ok);
    EXPECT_TRUE(reply.too_large) << reply.error;
    EXPECT_FALSE(reply.timed_out);
    EXPECT_EQ(reply.attempts, 1);
    EXPECT_EQ(server->requests, 1);
    EXPECT_NE(reply.error.find("--agent-env-max-response-bytes"), std::string::npos) << reply.error;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
}

// Error texts are valid UTF-8 whatever bytes the env sent, so the episode record dumps as JSON
// (--save-debug-rollout-data).
TEST(EnvClient, ErrorTextsAreValidUtf8WhateverTheEnvSent) {
  ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
    res.status = server.requests == 1 ? 500 : 200;
    res.set_content("\xff\xfe not json \xc3", "text/plain");
  });
  for (int k = 0; k < 2; ++k) {
    EnvClient client(fast(server.url(), 2.0, 0));
    auto reply = client.post("step", Json::object());
    ASSERT_FALSE(reply.ok);
    EXPECT_NE(reply.error.find("\xEF\xBF\xBD not json \xEF\xBF\xBD"), std::string::npos)
        << reply.error;
    EXPECT_NO_THROW(Json(reply.error).dump());
  }
}

TEST(EnvClient, ANonJsonBodyIsAnErrorAfterRetries) {
  ScriptedServer server([&](const httplib::Request&, httplib::Response& res) {
    res.set_content("<html>oops</html>", "text/html");
  });
  EnvClient client(fast(server.url(), 2.0, 1));
  auto reply = client.post("start", Json::object());
  EXPECT_FALSE(reply.ok);
  EXPECT_EQ(reply.attempts, 2);
  EXPECT_NE(reply.error.find("not JSON"), std::string::npos) << reply.error;
}

TEST(EnvClient, ADeadPortFailsWithoutHanging) {
  // A port the kernel handed out and that nobody listens on: bound, never listened, closed.
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port = ntohs(addr.sin_port);
    ::close(fd);
  }
  EnvClient client(fast("http://127.0.0.1:" + std::to_string(port), 1.0, 1));
  auto reply = client.post("start", Json::object());
  EXPECT_FALSE(reply.ok);
  EXPECT_FALSE(reply.timed_out);
  EXPECT_NE(reply.error.find("request failed"), std::string::npos) << reply.error;
}

TEST(EnvClient, BadUrlsAreClearErrors) {
  for (const char* url : {"127.0.0.1:8000", "http://:80", "http://host:0", "http://host:x1"}) {
    try {
      EnvClient client(fast(url));
      ADD_FAILURE() << url << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--agent-env-url"), std::string::npos) << e.what();
    }
  }
}

TEST(EnvReplies, StepAnswersAreChecked) {
  std::string error;
  auto ok = parse_step_reply(
      Json::parse(R"({"observation": [{"role": "tool", "content": "42"}], "done": false})"), error);
  ASSERT_TRUE(ok) << error;
  EXPECT_FALSE(ok->done);
  EXPECT_FALSE(ok->reward);
  EXPECT_EQ(ok->observation.dump(), R"([{"role":"tool","content":"42"}])");
  auto done = parse_step_reply(Json::parse(R"({"done": true, "reward": 0.5})"), error);
  ASSERT_TRUE(done) << error;
  EXPECT_EQ(done->reward.value_or(-1), 0.5);
  const char* bad[] = {
      R"([])",
      R"({"observation": []})",
      R"({"observation": [], "done": false})",
      R"({"observation": [{"role": "system", "content": "x"}], "done": false})",
      R"({"observation": [{"role": "tool", "content": 3}], "done": false})",
      R"({"observation": [{"role": "tool", "content": "x", "extra": 1}], "done": false})",
      R"({"observation": "text", "done": false})",
      R"({"done": true, "reward": "1"})",
      // 1e308 would be inf in float32 training.
      R"({"done": true, "reward": 1e308})",
      R"({"done": true, "reward": -2e9})",
      R"({"done": "yes"})",
  };
  for (const char* body : bad) {
    error.clear();
    EXPECT_FALSE(parse_step_reply(Json::parse(body), error)) << body;
    EXPECT_FALSE(error.empty()) << body;
  }
}

TEST(EnvReplies, StartAndFinishAnswersAreChecked) {
  std::string error;
  EXPECT_FALSE(parse_start_reply(Json::parse(R"({"episode_id": 3})"), error));
  EXPECT_NE(error.find("episode_id"), std::string::npos);
  error.clear();
  EXPECT_FALSE(parse_finish_reply(Json::parse(R"({})"), error));
  EXPECT_TRUE(error.empty());
  EXPECT_EQ(parse_finish_reply(Json::parse(R"({"reward": 2})"), error).value_or(0), 2.0);
  EXPECT_FALSE(parse_finish_reply(Json::parse(R"({"reward": [1]})"), error));
  EXPECT_FALSE(error.empty());
}

}  // namespace
}  // namespace furlong::rollout
