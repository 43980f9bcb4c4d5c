// The agent env client (train/env_client.h) against a scripted HTTP server on 127.0.0.1:
// answers, retries of 5xx, no retry of 4xx, timeouts, non-JSON bodies, a dead port, and the
// checks of /start, /step and /finish answers.
#include "rollout/env_client.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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
