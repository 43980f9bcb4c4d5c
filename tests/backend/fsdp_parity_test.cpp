// The seeds' guard for the FSDP backend: with the same seed and data, one optimizer step at
// topologies r1s4, r2s2 and r4s1 (4 ranks) gives the same gradients and updated parameters as a
// single process, on every rank, with and without fp32 master weights; 20 SFT steps at r2s2
// follow the single-process loss curve; sleep/wake_up and micro-batching change nothing.
//
// Tolerance (fp32 compute): rtol 2e-5, atol 2e-6, the bound miles' own test uses; only the
// order of floating-point sums differs between topologies (reduce-scatter vs local sums).
// Derivation (tests/common/tolerances.h): every row's forward and backward runs the same
// kernels whatever the topology; what changes is how a weight gradient's per-token terms are
// summed: over at most 8 rows x 16 tokens = 128 tokens per step, split over up to 4 ranks and
// added across them. Each order is within gamma_prob(128 + 4) = 6 sqrt(132) u = 4.1e-6 of the
// exact sum relative to sum_t |g_t|, so two orders within 8.2e-6 sum_t |g_t|: rtol 2e-5 allows
// sum_t |g_t| up to 2.4 |g| (terms of mixed sign), and atol 2e-6 covers the elements that cancel
// further (|g| below ~0.1: 8.2e-6 * sum_t |g_t| <= 2e-6 for sum_t |g_t| <= 0.24). AdamW moves a
// parameter by ~lr whatever the gradient's scale, so after a step the parameters differ by ~lr
// times the gradients' relative difference (~1e-9), well inside. Observed ~1e-7 relative.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "common/test_util.h"
#include "common/train_test_util.h"
#include "core/files.h"

namespace furlong::backend {
namespace {

namespace fs = std::filesystem;
using namespace testing;

constexpr double kRtol = 2e-5, kAtol = 2e-6;

class FsdpParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = furlong::testing::binary_dir() / "testdata" / ("fsdp." + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_model(dir_ / "model_bf16", tiny_config(false), at::kBFloat16, 3);
    write_model(dir_ / "model_fp32", tiny_config(false), at::kFloat, 3);
    write_model(dir_ / "model_tied", tiny_config(true), at::kFloat, 4);
    write_sft_data(dir_ / "data.jsonl", 160, 61, 7);
  }

  // Runs the worker; returns its output directory.
  static fs::path run(const std::string& name, int nproc, std::vector<std::string> flags) {
    auto out = dir_ / name;
    std::vector<std::string> argv = {worker_binary().string(), "--data",
                                     (dir_ / "data.jsonl").string(), "--out", out.string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = run_ranks(nproc, argv);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  }

  static void expect_close(const fs::path& got_dir, int ranks, const fs::path& want_dir,
                           const std::string& what) {
    auto want = read_dumps(want_dir, 1)[0];
    auto got = read_dumps(got_dir, ranks);
    for (int r = 0; r < ranks; ++r) {
      std::string worst;
      double v = max_violation(got[r], want, kRtol, kAtol, &worst);
      EXPECT_LE(v, 0.0) << what << ": rank " << r << " differs most at " << worst;
      if (r > 0) {
        for (const auto& [name, t] : got[0]) {
          EXPECT_TRUE(at::equal(t, got[r][name])) << what << ": rank " << r << " " << name;
        }
      }
    }
  }

  static fs::path dir_;
};
fs::path FsdpParity::dir_;

TEST_F(FsdpParity, OneStepMatchesSingleProcessAtEveryTopology) {
  for (bool master : {true, false}) {
    SCOPED_TRACE(master ? "fp32 master over a bf16 checkpoint" : "no master (fp32 checkpoint)");
    std::vector<std::string> flags = {"--model",
                                      (dir_ / (master ? "model_bf16" : "model_fp32")).string()};
    if (!master) flags.push_back("--no-keep-fp32-master");
    std::string tag = master ? "master" : "nomaster";
    auto single = run("single_" + tag, 0, flags);
    for (int replicas : {1, 2, 4}) {
      auto f = flags;
      f.insert(f.end(), {"--dp-replicate-size", std::to_string(replicas)});
      std::string topo = "r" + std::to_string(replicas) + "s" + std::to_string(4 / replicas);
      auto out = run(topo + "_" + tag, 4, f);
      expect_close(out, 4, single, topo + " " + tag);
    }
  }
}

TEST_F(FsdpParity, TiedEmbeddingsShardCorrectly) {
  std::vector<std::string> flags = {"--model", (dir_ / "model_tied").string()};
  auto single = run("tied_single", 0, flags);
  flags.insert(flags.end(), {"--dp-replicate-size", "2"});
  expect_close(run("tied_r2s2", 4, flags), 4, single, "tied r2s2");
}

TEST_F(FsdpParity, TwentyStepsAtR2S2FollowTheSingleProcessLossCurve) {
  std::vector<std::string> flags = {"--model", (dir_ / "model_bf16").string(), "--rollouts", "20"};
  auto single = read_json_file(run("curve_single", 0, flags) / "losses.json");
  flags.insert(flags.end(), {"--dp-replicate-size", "2"});
  auto sharded = read_json_file(run("curve_r2s2", 4, flags) / "losses.json");
  ASSERT_EQ(single.size(), 20u);
  ASSERT_EQ(sharded.size(), 20u);
  for (size_t i = 0; i < single.size(); ++i) {
    for (const char* key : {"loss", "grad_norm"}) {
      double want = single[i][key], got = sharded[i][key];
      EXPECT_NEAR(got, want, kAtol + kRtol * std::abs(want)) << key << " at step " << i + 1;
    }
  }
  EXPECT_LT(single[19]["loss"].get<double>(), single[0]["loss"].get<double>())
      << "the loss should fall over 20 steps";
}

TEST_F(FsdpParity, SleepWakeUpAndMicroBatchingChangeNothing) {
  std::vector<std::string> flags = {"--model", (dir_ / "model_bf16").string(), "--rollouts",
                                    "2",       "--dp-replicate-size",          "2"};
  auto plain = run("sleep_plain", 4, flags);
  auto f = flags;
  f.push_back("--sleep-after-first");
  auto slept = run("sleep_slept", 4, f);
  auto a = read_dumps(plain, 4), b = read_dumps(slept, 4);
  for (const auto& [name, t] : a[0]) EXPECT_TRUE(at::equal(t, b[0][name])) << name;

  // Micro-batches of 1 with activation checkpointing vs one micro-batch of 8: same step.
  std::vector<std::string> single = {"--model", (dir_ / "model_bf16").string()};
  auto whole = run("mbs_whole", 0, single);
  auto s = single;
  s.insert(s.end(), {"--micro-batch-size", "1", "--gradient-checkpointing"});
  expect_close(run("mbs_one", 0, s), 1, whole, "micro-batch 1 + checkpointing");
}

// --fsdp-cpu-offload reaches the actor, and --offload-train (sleep before, wake_up after every
// rollout) moves nothing but where the memory is: on this CPU-only machine there is no device
// memory, so the shards and optimizer state must sit in host memory (where miles puts them
// under either flag) and every number of training must be bit-identical to the plain run.
TEST_F(FsdpParity, ActorCpuOffloadAndOffloadTrainKeepTrainingBitIdentical) {
  std::vector<std::string> flags = {"--model", (dir_ / "model_bf16").string(), "--rollouts",
                                    "2",       "--dp-replicate-size",          "1"};
  auto plain = run("offload_plain", 2, flags);
  auto f = flags;
  f.push_back("--fsdp-cpu-offload");
  auto offloaded = run("offload_cpu", 2, f);
  f = flags;
  f.push_back("--offload-train");
  auto slept = run("offload_train", 2, f);

  auto plain_placement = read_json_file(plain / "placement.json");
  EXPECT_FALSE(plain_placement["cpu_offload"].get<bool>());
  auto placement = read_json_file(offloaded / "placement.json");
  EXPECT_TRUE(placement["cpu_offload"].get<bool>()) << "the actor was built without CPU offload";
  for (const auto& dump : {placement, read_json_file(slept / "placement.json")}) {
    ASSERT_FALSE(dump["shard_devices"].empty());
    ASSERT_FALSE(dump["optimizer_state_devices"].empty());
    for (const auto& d : dump["shard_devices"]) EXPECT_EQ(d.get<std::string>(), "cpu");
    for (const auto& d : dump["optimizer_state_devices"]) EXPECT_EQ(d.get<std::string>(), "cpu");
  }
  auto want_losses = read_json_file(plain / "losses.json");
  ASSERT_EQ(want_losses.size(), 2u);
  auto want = read_dumps(plain, 2);
  for (const auto& dir : {offloaded, slept}) {
    // Bit-identical: the same doubles, not merely close ones.
    EXPECT_EQ(read_json_file(dir / "losses.json").dump(), want_losses.dump()) << dir;
    auto got = read_dumps(dir, 2);
    for (int r = 0; r < 2; ++r) {
      for (const auto& [name, t] : want[r]) {
        EXPECT_TRUE(at::equal(t, got[r][name])) << dir << " rank " << r << " " << name;
      }
    }
  }
}

// --balance-data changes which rank trains which sample, not the step: the loss and gradient
// are sums over all of the step's samples, so 4 ranks with the token-balanced split match the
// single process within the sharding tolerance (a lost or duplicated sample would move them by
// a whole sample's share, ~1/8).
TEST_F(FsdpParity, BalancedDataSplitTrainsTheSameStep) {
  std::vector<std::string> flags = {"--model", (dir_ / "model_fp32").string(),
                                    "--no-keep-fp32-master", "--micro-batch-size", "1"};
  auto single = run("balance_single", 0, flags);
  flags.push_back("--balance-data");
  expect_close(run("balance_r1s4", 4, flags), 4, single, "--balance-data r1s4");
}

}  // namespace
}  // namespace furlong::backend
