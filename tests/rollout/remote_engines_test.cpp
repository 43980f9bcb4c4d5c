// Engine servers as the trainer drives them (rollout/remote_engines.cpp), on 127.0.0.1:
//  - a server the trainer spawned dies with a SIGKILLed trainer (the same child options);
//  - a restarted trainer rejoins an engine whose weight group its killed predecessor held (a
//    real engine on a tiny model, served in process);
//  - a weight broadcast held up by an engine logs its wait while it waits (a fake engine that
//    joins the group and never receives).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/test_util.h"
#include "core/json_util.h"
#include "dist/child_process.h"
#include "dist/launcher.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/server/backend.h"
#include "engine/server/client.h"
#include "engine/server/remote_weights.h"
#include "engine/server/server.h"
#include "engine/weight_sync.h"
#include "models/hf_model.h"
#include "rollout/engine_server_process.h"
#include "rollout/rollout_engines.h"

namespace furlong::rollout {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Polls waitpid(pid) for up to `limit`; the status once the process ended.
std::optional<int> reap_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

// The command name of process `pid` ("" once it is gone).
std::string proc_comm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

// Engine servers spawned by `furlong train` die with a SIGKILLed trainer. A stand-in
// trainer (a forked child) starts a stand-in server (sleep) with the engine servers' child
// options; once the trainer is killed the server must end within a bound. This process is a
// subreaper meanwhile, so the orphaned server comes back to it to be reaped.
TEST(EngineServerProcess, DiesWithASigkilledTrainer) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t trainer = ::fork();
  ASSERT_GE(trainer, 0);
  if (trainer == 0) {
    ::close(fds[0]);
    auto options = engine_server_child_options(RolloutConfig{}, 1, "");
    options.argv = {"/bin/sleep", "30"};
    dist::ChildProcess server(options);
    const pid_t pid = server.pid();
    (void)!::write(fds[1], &pid, sizeof(pid));
    ::sleep(30);  // killed long before
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t server = -1;
  pollfd p{fds[0], POLLIN, 0};
  if (::poll(&p, 1, 10000) == 1) (void)!::read(fds[0], &server, sizeof(server));
  ::close(fds[0]);
  // Kill the trainer only once its server runs `sleep`: before its exec the child is still
  // setting up (a parent gone by then makes it exit 1, not die by the signal checked below).
  for (int i = 0; server > 0 && i < 1000 && proc_comm(server) != "sleep"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(trainer, SIGKILL);
  EXPECT_TRUE(reap_within(trainer, std::chrono::seconds(10)).has_value());
  ASSERT_GT(server, 0) << "the trainer did not start its server";
  const auto status = reap_within(server, std::chrono::seconds(10));
  if (!status) {  // the fault: clean up the orphan ourselves
    ::kill(server, SIGKILL);
    reap_within(server, std::chrono::seconds(10));
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  ASSERT_TRUE(status.has_value()) << "the server outlived its trainer by 10 s";
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL) << *status;
}

const fs::path& model_dir() {
  static const fs::path dir = [] {
    auto d = furlong::testing::scratch_dir() / "remote_engines_model";
    engine::testing::write_tiny_model(d, engine::testing::tiny_config("qwen3"), 43, "float32");
    return d;
  }();
  return dir;
}

// Trainer options for engines at `url`, every wait bounded by `bound_s`.
RolloutConfig trainer_options(const std::string& url, double bound_s) {
  RolloutConfig o;
  o.rollout.rollout_engine_urls = {url};
  o.rollout.rollout_engine_request_timeout = bound_s;
  o.rollout.engine_startup_timeout = bound_s;
  return o;
}

// An engine still holds the weight group of a trainer killed with -9: the restarted trainer's
// sync replaces that group and delivers its weights.
TEST(RemoteEngines, ARestartedTrainerRejoinsAnEngineItsKilledPredecessorJoined) {
  c10::InferenceMode guard;
  std::shared_ptr<engine::Engine> engine =
      engine::Engine::load(model_dir().string(), engine::testing::small_engine_options("float32"));
  engine::server::ServerOptions server_options;
  server_options.port = 0;
  engine::server::EngineServer server(
      engine::server::make_engine_backend(engine, model_dir().string()), server_options);
  server.start();
  {  // The predecessor joins the engine's group and dies without leaving it.
    engine::server::EngineClient client(server.url());
    engine::WeightGroupSpec spec;
    spec.master_port = dist::pick_free_port("127.0.0.1");
    // Short: on the way out this side waits that long for the engine to check out of the
    // group, which it never does (a killed trainer does not wait at all).
    spec.timeout_seconds = 2;
    auto group = engine::server::connect_remote_engines({&client}, spec);
  }
  auto named = models::load_hf_model(model_dir().string())->named_weights();
  for (auto& [name, t] : named) t = t * 0.9;
  auto engines = make_remote_engines(trainer_options(server.url(), 8), 0);
  const WeightSource source = [&](const WeightSink& sink) { sink(named); };
  int64_t bytes = 0;
  try {
    bytes = engines->sync_weights(source, 1, /*check_equal=*/true);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the restarted trainer's weight sync failed: " << e.what();
  }
  EXPECT_GT(bytes, 0);
  EXPECT_EQ(engine->weight_version(), 1);
  engines.reset();
  server.stop();
}

// An engine that joins the weight group and then never receives: its
// /update_weights_from_distributed waits until released (at most 10 s).
class StalledReceiver {
 public:
  StalledReceiver() {
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{}", "application/json");
    });
    server_.Post("/init_weights_update_group",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   const Json body = Json::parse(req.body);
                   engine::WeightGroupSpec spec;
                   spec.master_addr = body["master_address"];
                   spec.master_port = body["master_port"];
                   spec.world_size = body["world_size"];
                   spec.rank_offset = body["rank_offset"];
                   spec.timeout_seconds = 20;
                   auto group = engine::join_weight_group(spec, spec.rank_offset);
                   std::lock_guard<std::mutex> lock(mu_);
                   group_ = std::move(group);
                   res.set_content(R"({"success": true})", "application/json");
                 });
    server_.Post("/destroy_weights_update_group",
                 [](const httplib::Request&, httplib::Response& res) {
                   res.set_content(R"({"success": true})", "application/json");
                 });
    server_.Post("/update_weights_from_distributed", [this](const httplib::Request&,
                                                            httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(10), [&] { return released_; });
      res.status = 500;
      res.set_content(R"({"success": false, "message": "stalled"})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~StalledReceiver() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::unique_ptr<dist::ProcessGroups> group_;
};

// A weight broadcast held up by a stopped engine says so: while it waits, a line per report
// interval (a quarter of the 3 s bound, at least 1 s) says what the sync waits for and which
// engines answer /health.
TEST(RemoteEngines, AStalledWeightBroadcastLogsItsWait) {
  StalledReceiver engine;
  ::testing::internal::CaptureStderr();
  auto engines = make_remote_engines(trainer_options(engine.url(), 3), 0);
  const WeightSource source = [&](const WeightSink& sink) {
    sink({{"model.embed_tokens.weight", at::ones({4, 4})}});
  };
  const auto t0 = Clock::now();
  const auto error = furlong::testing::error_of([&] { engines->sync_weights(source, 7, false); });
  const auto took = Clock::now() - t0;
  engines.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(error, "") << "a stalled engine acknowledged the update";
  EXPECT_LT(took, std::chrono::seconds(9)) << "the bound is 3 s";
  EXPECT_NE(log.find("weight sync (version 7): waiting for "), std::string::npos) << log;
  EXPECT_NE(log.find("broadcasting the weights"), std::string::npos) << log;
  EXPECT_NE(log.find(engine.url() + " answers /health"), std::string::npos) << log;
}

}  // namespace
}  // namespace furlong::rollout
