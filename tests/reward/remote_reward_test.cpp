// The remote reward client against an in-process cpp-httplib server: good answers (number and
// object rewards), slow (timeouts bound the wall time), garbage, HTTP 500 (retried), 400 (not
// retried), refused connections, bounded concurrency, and counted failures.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/test_util.h"
#include "reward/remote_reward.h"
#include "reward/rewards.h"

namespace furlong::reward {
namespace {

using furlong::testing::error_of;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class RewardServer {
 public:
  RewardServer() {
    server_.new_task_queue = [] { return new httplib::ThreadPool(32); };
    server_.Post("/good", [this](const httplib::Request& req, httplib::Response& res) {
      Json body = Json::parse(req.body);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        last_payload_ = body;
      }
      double reward = body["response"] == body["label"] ? 1.0 : 0.0;
      res.set_content(Json(reward).dump(), "application/json");
    });
    server_.Post("/dict", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"score": 0.5, "acc": true})", "application/json");
    });
    server_.Post("/slow", [this](const httplib::Request&, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mutex_);
      release_.wait_for(lock, std::chrono::seconds(20), [this] { return released_; });
      res.set_content("1.0", "application/json");
    });
    server_.Post("/busy", [this](const httplib::Request&, httplib::Response& res) {
      int now = ++in_flight_;
      int seen = max_in_flight_.load();
      while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      --in_flight_;
      res.set_content("1", "application/json");
    });
    server_.Post("/garbage", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("<html>oops</html>", "text/html");
    });
    server_.Post("/error500", [this](const httplib::Request&, httplib::Response& res) {
      ++hits_500_;
      res.status = 500;
      res.set_content("internal", "text/plain");
    });
    server_.Post("/flaky", [this](const httplib::Request&, httplib::Response& res) {
      if (++hits_flaky_ <= 2) {
        res.status = 503;
        return;
      }
      res.set_content("0.75", "application/json");
    });
    server_.Post("/bad_request", [this](const httplib::Request&, httplib::Response& res) {
      ++hits_400_;
      res.status = 400;
      res.set_content("missing field", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~RewardServer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
    }
    release_.notify_all();
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  Json last_payload() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_payload_;
  }

  std::atomic<int> hits_500_{0}, hits_flaky_{0}, hits_400_{0};
  std::atomic<int> in_flight_{0}, max_in_flight_{0};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable release_;
  bool released_ = false;
  Json last_payload_;
};

RemoteRewardOptions fast_options(const std::string& url) {
  RemoteRewardOptions o;
  o.url = url;
  o.timeout_s = 0.3;
  o.max_retries = 2;
  o.backoff_s = 0.05;
  o.max_backoff_s = 0.1;
  return o;
}

rl::Sample sample(const std::string& response, const std::string& label) {
  rl::Sample s;
  s.prompt = "What is 2+2?";
  s.response = response;
  s.label = label;
  return s;
}

TEST(RemoteReward, GoodServerAndPayloadShape) {
  RewardServer server;
  RemoteRewardClient client(fast_options(server.url("/good")));
  EXPECT_EQ(client.score(sample("4", "4")), 1.0);
  Json payload = server.last_payload();
  EXPECT_EQ(payload, (Json{{"prompt", "What is 2+2?"}, {"response", "4"}, {"label", "4"}}));
  EXPECT_EQ(client.score(sample("5", "4")), 0.0);
  EXPECT_EQ(client.stats().attempts, 2);
  EXPECT_EQ(client.stats().retries, 0);
  EXPECT_TRUE(remote_reward_payload(sample("x", ""))["label"].is_null());
}

TEST(RemoteReward, SlowServerIsBoundedByTimeoutTimesAttempts) {
  RewardServer server;
  RemoteRewardOptions o = fast_options(server.url("/slow"));
  RemoteRewardClient client(o);
  auto start = Clock::now();
  std::string err = error_of([&] { client.score(sample("4", "4")); });
  double elapsed = seconds_since(start);
  // 3 attempts x 0.3 s timeout + backoffs 0.05 + 0.1 s = 1.05 s; 1 s of slack for a loaded
  // 2-core machine. The lower bound shows the timeouts, not an early failure, ended it.
  EXPECT_LT(elapsed, 3 * 0.3 + 0.15 + 1.0);
  EXPECT_GT(elapsed, 3 * 0.3 * 0.9);
  EXPECT_NE(err.find("after 3 attempt(s)"), std::string::npos) << err;
  EXPECT_NE(err.find(o.url), std::string::npos) << err;
  EXPECT_EQ(client.stats().attempts, 3);
  EXPECT_EQ(client.stats().failures, 1);
}

TEST(RemoteReward, GarbageAnd500AreRetriedThenFail) {
  RewardServer server;
  RemoteRewardClient garbage(fast_options(server.url("/garbage")));
  std::string err = error_of([&] { garbage.score(sample("4", "4")); });
  EXPECT_NE(err.find("not JSON: <html>oops</html>"), std::string::npos) << err;
  EXPECT_EQ(garbage.stats().attempts, 3);

  RemoteRewardClient failing(fast_options(server.url("/error500")));
  err = error_of([&] { failing.score(sample("4", "4")); });
  EXPECT_NE(err.find("HTTP 500: internal"), std::string::npos) << err;
  EXPECT_EQ(server.hits_500_.load(), 3);

  RemoteRewardClient flaky(fast_options(server.url("/flaky")));
  EXPECT_EQ(flaky.score(sample("4", "4")), 0.75);
  EXPECT_EQ(flaky.stats().retries, 2);
}

TEST(RemoteReward, ClientErrorsAreNotRetried) {
  RewardServer server;
  RemoteRewardClient client(fast_options(server.url("/bad_request")));
  std::string err = error_of([&] { client.score(sample("4", "4")); });
  EXPECT_NE(err.find("HTTP 400: missing field (not retried)"), std::string::npos) << err;
  EXPECT_EQ(server.hits_400_.load(), 1);
}

// A loopback port nobody listens on: bound (so the kernel picks a free one), then closed.
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(RemoteReward, RefusedConnectionFailsWithoutWaitingForTimeouts) {
  RemoteRewardClient client(fast_options("http://127.0.0.1:" + std::to_string(closed_port())));
  auto start = Clock::now();
  std::string err = error_of([&] { client.score(sample("4", "4")); });
  // Refusals are immediate: only the backoffs (0.05 + 0.1 s) are waited, far below the 0.9 s
  // the three timeouts would take.
  EXPECT_LT(seconds_since(start), 0.8);
  EXPECT_NE(err.find("request failed (Connection)"), std::string::npos) << err;
  EXPECT_EQ(client.stats().attempts, 3);
}

TEST(RemoteReward, UrlValidation) {
  RemoteRewardOptions o;
  o.url = "https://rm.example:8443/score";  // TLS: Debian's cpp-httplib is built with OpenSSL
  EXPECT_NO_THROW(RemoteRewardClient c(o));
  o.url = "ftp://x";
  EXPECT_NE(error_of([&] { RemoteRewardClient c(o); }).find("http(s)://host"), std::string::npos);
  o.url = "http://:80/";
  EXPECT_NE(error_of([&] { RemoteRewardClient c(o); }).find("names no host"), std::string::npos);
  o.url = "http://x:99999/";
  EXPECT_NE(error_of([&] { RemoteRewardClient c(o); }).find("port '99999'"), std::string::npos);
  o.url = "http://x/";
  o.timeout_s = 0;
  EXPECT_NE(error_of([&] { RemoteRewardClient c(o); }).find("must be > 0"), std::string::npos);
}

TEST(RemoteReward, BatchRunsConcurrentlyWithinTheBound) {
  RewardServer server;
  RewardOptions o;
  o.rm_type = RewardType{RewardKind::kRemote};
  o.remote = fast_options(server.url("/busy"));
  o.remote.timeout_s = 5;
  o.max_concurrency = 4;
  RewardGrader model(o);
  std::vector<rl::Sample> samples(12, sample("4", "4"));
  auto start = Clock::now();
  RewardStats stats = model.compute_rewards(samples);
  double elapsed = seconds_since(start);
  EXPECT_EQ(stats.scored, 12);
  for (const auto& s : samples) EXPECT_EQ(s.raw_reward, 1.0);
  EXPECT_LE(server.max_in_flight_.load(), 4);
  EXPECT_GE(server.max_in_flight_.load(), 2);
  // 12 requests of 0.2 s, 4 at a time: 0.6 s; sequential would take 2.4 s.
  EXPECT_LT(elapsed, 1.8);
}

TEST(RemoteReward, ObjectRewardsAndCountedFailures) {
  RewardServer server;
  RewardOptions o;
  o.rm_type = RewardType{RewardKind::kRemote};
  o.reward_key = "score";
  o.remote = fast_options(server.url("/dict"));
  std::vector<rl::Sample> samples(2, sample("4", "4"));
  RewardGrader(o).compute_rewards(samples);
  EXPECT_EQ(samples[1].raw_reward, 0.5);
  EXPECT_EQ(samples[1].metadata["reward"]["acc"], true);

  o.remote = fast_options(server.url("/garbage"));
  o.remote.max_retries = 0;
  o.fail_on_remote_error = false;
  RewardGrader lenient(o);
  std::vector<rl::Sample> more(3, sample("4", "4"));
  RewardStats stats = lenient.compute_rewards(more);
  EXPECT_EQ(stats.remote_failures, 3);
  EXPECT_EQ(more[0].raw_reward, 0.0);
  EXPECT_NE(more[0].metadata["reward_error"].get<std::string>().find("not JSON"),
            std::string::npos);

  o.fail_on_remote_error = true;
  std::vector<rl::Sample> strict(2, sample("4", "4"));
  EXPECT_NE(error_of([&] { RewardGrader(o).compute_rewards(strict); }).find("not JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace furlong::reward
