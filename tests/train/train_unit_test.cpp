// Single-process unit tests of src/train pieces that need no model and no ranks:
// - SFT data accepts RL's "file@[start:end]" row slices (one parser for both);
// - the leftovers of killed checkpoint saves are removed, and nothing else;
// - a stalled engine server (one that accepts requests and never answers) fails the rollout
//   within --rollout-engine-request-timeout, naming the engine, after logging the wait.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "backend/batching.h"
#include "backend/checkpoint.h"
#include "common/test_util.h"
#include "core/error.h"
#include "core/files.h"
#include "engine/server/client.h"
#include "rollout/rollout_engines.h"
#include "train/options.h"
#include "train/sft_data.h"

namespace furlong::train {
namespace {

using namespace furlong::backend;

std::unique_ptr<rollout::RolloutEngines> make_remote_engines(const TrainOptions& o, int rank) {
  return rollout::make_remote_engines(rollout_config(o), rank);
}

namespace fs = std::filesystem;

// SftDataOptions reading `path`, every other field at its default.
SftDataOptions sft_data_at(const std::string& path) {
  SftDataOptions o;
  o.path = path;
  return o;
}
using Clock = std::chrono::steady_clock;

fs::path fresh_dir(const std::string& name) {
  auto dir =
      furlong::testing::binary_dir() / "testdata" / (name + "." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// ----- SFT data slices -----

// Five pre-tokenized rows; row i has prompt [i] and response [100 + i].
fs::path write_tokenized_rows(const fs::path& dir) {
  std::string text;
  for (int i = 0; i < 5; ++i) {
    text += Json{{"prompt_ids", {i}}, {"response_ids", {100 + i}}}.dump() + "\n";
  }
  write_file_atomic(dir / "sft.jsonl", text);
  return dir / "sft.jsonl";
}

std::vector<int64_t> first_tokens(const std::vector<rl::Sample>& samples) {
  std::vector<int64_t> out;
  for (const auto& s : samples) out.push_back(s.tokens.front());
  return out;
}

TEST(SftData, AcceptsTheRowSliceSyntaxOfRlPromptData) {
  auto file = write_tokenized_rows(fresh_dir("sft_slice")).string();
  EXPECT_EQ(first_tokens(load_sft_samples(sft_data_at(file), "")),
            (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(first_tokens(load_sft_samples(sft_data_at(file + "@[1:3]"), "")),
            (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(first_tokens(load_sft_samples(sft_data_at(file + "@[-2:]"), "")),
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(first_tokens(load_sft_samples(sft_data_at(file + "@[:1]"), "")),
            (std::vector<int64_t>{0}));
  auto empty =
      furlong::testing::error_of([&] { load_sft_samples(sft_data_at(file + "@[4:2]"), ""); });
  EXPECT_NE(empty.find("selects no rows out of 5"), std::string::npos) << empty;
  auto bad =
      furlong::testing::error_of([&] { load_sft_samples(sft_data_at(file + "@[x:2]"), ""); });
  EXPECT_NE(bad.find("is not an integer"), std::string::npos) << bad;
}

// ----- leftovers of killed checkpoint saves -----

TEST(CheckpointLeftovers, KilledSavesLeftoversAreRemovedAndNothingElse) {
  auto root = fresh_dir("ckpt_leftovers");
  write_file_atomic(root / "latest_checkpointed_iteration.txt", "3\n");
  for (const char* tmp : {"latest_checkpointed_iteration.txt.tmp.123.456",
                          "latest_checkpointed_iteration.txt.tmp.789.1"}) {
    write_file_atomic(root / tmp, "6\n");
  }
  fs::create_directories(root / "iter_0000003" / "model");
  fs::create_directories(root / "iter_0000006.partial" / "model");
  write_file_atomic(root / "iter_0000006.partial" / "model" / "index.json.tmp.1.2", "{");
  fs::create_directories(root / "iter_0000003.old");      // iter_0000003 exists: stale
  fs::create_directories(root / "iter_0000009.old");      // the only copy of iteration 9: kept
  write_file_atomic(root / "notes.txt.tmp.1.2", "x");     // not ours
  write_file_atomic(root / "iter_0000004.partial", "x");  // a file, not a save's directory
  fs::create_directories(root / "iter_abc.partial");      // not an iteration name

  EXPECT_EQ(remove_stale_checkpoint_files(root), 4);
  EXPECT_EQ(latest_iteration(root), 3);
  EXPECT_TRUE(fs::exists(root / "iter_0000003" / "model"));
  EXPECT_FALSE(fs::exists(root / "latest_checkpointed_iteration.txt.tmp.123.456"));
  EXPECT_FALSE(fs::exists(root / "latest_checkpointed_iteration.txt.tmp.789.1"));
  EXPECT_FALSE(fs::exists(root / "iter_0000006.partial"));
  EXPECT_FALSE(fs::exists(root / "iter_0000003.old"));
  EXPECT_TRUE(fs::exists(root / "iter_0000009.old"));
  EXPECT_TRUE(fs::exists(root / "notes.txt.tmp.1.2"));
  EXPECT_TRUE(fs::exists(root / "iter_0000004.partial"));
  EXPECT_TRUE(fs::exists(root / "iter_abc.partial"));
  EXPECT_EQ(remove_stale_checkpoint_files(root), 0) << "nothing left to remove";
  EXPECT_EQ(remove_stale_checkpoint_files(root / "missing"), 0);
}

// ----- a stalled engine server -----

// A loopback HTTP server that answers /health but holds every /generate until released (at
// most 30 s), as an engine that got SIGSTOP after start-up would look to its client.
class StalledEngine {
 public:
  StalledEngine() {
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    server_.Post("/generate", [this](const httplib::Request&, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(30), [&] { return released_; });
      res.status = 503;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~StalledEngine() {
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
};

TEST(EngineRequestTimeout, TheClientRaisesATimeoutNamingTheUrlAndTheBound) {
  StalledEngine engine;
  engine::server::ClientOptions options;
  options.read_timeout_s = 1.0;
  engine::server::EngineClient client(engine.url(), options);
  EXPECT_TRUE(client.health());
  const auto t0 = Clock::now();
  try {
    client.generate({1, 2, 3}, Json::object(), true);
    ADD_FAILURE() << "a stalled engine answered";
  } catch (const engine::server::TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(engine.url() + "/generate"), std::string::npos) << what;
    EXPECT_NE(what.find("no answer within 1 s"), std::string::npos) << what;
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
}

TEST(EngineRequestTimeout, AStalledEngineFailsTheRolloutWithinTheBoundNamingTheEngine) {
  StalledEngine engine;
  TrainOptions options;
  options.rollout.rollout_engine_urls = {engine.url()};
  options.rollout.rollout_engine_request_timeout = 3.0;
  ::testing::internal::CaptureStderr();
  auto engines = make_remote_engines(options, 0);
  std::atomic<bool> done{false};
  engine::GenerateRequest request;
  request.input_ids = {1, 2, 3};
  const auto t0 = Clock::now();
  engines->submit(request, [&](engine::GenerateOutput) { done = true; });
  while (!done && Clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto took = Clock::now() - t0;
  engines.reset();  // joins the workers and the wait reporter
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(done) << "the request was still waiting after 20 s\n" << log;
  EXPECT_GE(took, std::chrono::milliseconds(2500));
  EXPECT_LT(took, std::chrono::seconds(8)) << "the bound is 3 s";
  // While waiting: a line per report interval (a quarter of the bound here) naming the engine.
  EXPECT_NE(log.find("engine " + engine.url() + ": 1 request(s) unanswered, the oldest for "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--rollout-engine-request-timeout"), std::string::npos) << log;
}

TEST(EngineRequestTimeout, TheErrorRaisedOnTheDriverThreadNamesTheEngineAndTheFlag) {
  StalledEngine engine;
  TrainOptions options;
  options.rollout.rollout_engine_urls = {engine.url()};
  options.rollout.rollout_engine_request_timeout = 1.0;
  auto engines = make_remote_engines(options, 0);
  std::atomic<bool> done{false};
  engines->submit(engine::GenerateRequest{.input_ids = {1}, .sampling = {}},
                  [&](engine::GenerateOutput) { done = true; });
  const auto t0 = Clock::now();
  while (!done && Clock::now() - t0 < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(done);
  auto error = furlong::testing::error_of([&] { engines->rethrow_errors(); });
  EXPECT_NE(error.find("engine " + engine.url() + " failed a generate request"), std::string::npos)
      << error;
  EXPECT_NE(error.find("--rollout-engine-request-timeout"), std::string::npos) << error;
}

TEST(EngineRequestTimeout, ANegativeBoundIsRejected) {
  TrainOptions options;
  options.rollout.rollout_engine_urls = {"http://127.0.0.1:1"};
  options.rollout.rollout_engine_request_timeout = -1;
  auto error = furlong::testing::error_of([&] { make_remote_engines(options, 0); });
  EXPECT_NE(error.find("--rollout-engine-request-timeout must be >= 0"), std::string::npos)
      << error;
}

// --balance-data: equal counts per rank, every sample once, and token totals balanced where the
// strided split (r, r + W, ...) is not: lengths 1..8 over 2 ranks split 16 / 20 strided; the
// equal-size Karmarkar-Karp partition reaches 18 / 18 (pairs (8,5)+(4,1) vs (7,6)+(3,2)).
TEST(BalanceData, EqualCountPartitionBalancesTokenTotals) {
  const std::vector<int64_t> lengths = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<size_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    auto part = balanced_dp_shard_indices(lengths, rank, 2);
    EXPECT_EQ(part.size(), 4u);
    EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
    int64_t total = 0;
    for (size_t i : part) total += lengths[i];
    EXPECT_EQ(total, 18) << "rank " << rank;
    seen.insert(seen.end(), part.begin(), part.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Strided, for contrast: the imbalance the flag removes.
  int64_t strided0 = 0;
  for (size_t i : dp_shard_indices(lengths.size(), 0, 2)) strided0 += lengths[i];
  EXPECT_EQ(strided0, 16);
  try {
    balanced_dp_shard_indices({1, 2, 3}, 0, 2);
    ADD_FAILURE() << "3 samples over 2 ranks must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--balance-data"), std::string::npos) << e.what();
  }
}

// miles' offload rules: --colocate implies both unless negated, --offload sets both, and
// --fsdp-cpu-offload turns offload-train off.
TEST(Offload, ResolvesAsMiles) {
  TrainOptions o;
  EXPECT_FALSE(resolve_offload(o).train);
  EXPECT_FALSE(resolve_offload(o).rollout);
  o.rollout.colocate = true;
  EXPECT_TRUE(resolve_offload(o).train);
  EXPECT_TRUE(resolve_offload(o).rollout);
  o.offload.offload_train_set = true;  // --no-offload-train
  EXPECT_FALSE(resolve_offload(o).train);
  EXPECT_TRUE(resolve_offload(o).rollout);
  o = TrainOptions{};
  o.offload.offload = true;
  EXPECT_TRUE(resolve_offload(o).train && resolve_offload(o).rollout);
  o.precision.fsdp_cpu_offload = true;
  EXPECT_FALSE(resolve_offload(o).train);
  EXPECT_TRUE(resolve_offload(o).rollout);
}

// The engines re-score samples only where the trainer reads their log-probs as pi_old; a given
// flag (either polarity) wins.
TEST(EngineExactLogprobs, OnByDefaultOnlyWhereTheTrainerTrainsAgainstThem) {
  TrainOptions o;
  resolve_engine_exact_logprobs(o, /*log=*/false);
  EXPECT_FALSE(o.rollout.engine_exact_logprobs);
  o = TrainOptions{};
  o.algorithm.use_rollout_logprobs = true;
  resolve_engine_exact_logprobs(o, false);
  EXPECT_TRUE(o.rollout.engine_exact_logprobs);
  o.rollout.engine_exact_logprobs = false;  // --no-engine-exact-logprobs
  o.rollout.engine_exact_logprobs_set = true;
  resolve_engine_exact_logprobs(o, false);
  EXPECT_FALSE(o.rollout.engine_exact_logprobs);
  o = TrainOptions{};
  o.rollout.engine_exact_logprobs = o.rollout.engine_exact_logprobs_set = true;
  resolve_engine_exact_logprobs(o, false);
  EXPECT_TRUE(o.rollout.engine_exact_logprobs);
}

TEST(DebugRolloutData, PathTemplateReplacesEveryRolloutId) {
  EXPECT_EQ(format_debug_rollout_path("/d/{rollout_id}/r_{rollout_id}.json", 12),
            "/d/12/r_12.json");
  EXPECT_EQ(format_debug_rollout_path("/d/fixed.json", 3), "/d/fixed.json");
}

}  // namespace
}  // namespace furlong::train
