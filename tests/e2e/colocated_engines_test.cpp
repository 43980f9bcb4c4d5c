// Colocated engine placement end to end: `furlong train --colocate` on 2 CPU ranks with one
// engine per rank (the default, miles' --rollout-num-gpus = every training rank) against the same
// run with a single engine on rank 0 (--rollout-num-gpus 1, and --rollout-num-gpus-per-engine 2).
//
// What must hold, and why:
// - Tokens and rewards are the same sample for sample: each sample's sampling seed comes from
//   the run seed and its index (the engine's tokens depend on the prompt and seed, not on the
//   batch), and the collector returns the groups in prompt order whichever engine served them.
// - Every training metric is bit-identical: the trainer recomputes the old log-probs itself, so
//   identical samples give identical steps and weights, on the same 2 ranks.
// - The engines' own log-probs (--engine-exact-logprobs) are recomputed over the requests that
//   finish in the same engine step, packed together; which requests those are depends on the
//   engine's load (and on timing even with one engine), and the GEMM's blocking over the packed
//   rows changes the rounding. So they agree to the forward's rounding only: each is within
//   5e-5 of the exact value (rl_e2e_test.cpp derives that bound for this model: 4 * 1.8e-5 * 1.4
//   = 1e-4 for two computations), hence 1e-4 between them, and so for the metrics that average
//   them (rollout/rollout_log_probs, train/train_rollout_*; train/ess_ratio is built from them).
// - --check-weight-update-equal holds on every engine after every sync.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/arith_task.h"
#include "common/rl_flags.h"
#include "common/test_util.h"
#include "core/json_util.h"

namespace furlong::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kRollouts = 4;
constexpr double kLogprobTolerance = 1e-4;  // see the header comment

struct Fixture {
  fs::path model;
  fs::path data;
};

// The tiny random Qwen3 and the "a+b=" task of rl_e2e_test.cpp.
const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    const auto root = fresh_process_dir("e2e", "colocated");
    x.model = init_tiny_model(root, "model");
    x.data = root / "prompts.jsonl";
    write_arith_rows(x.data, threshold_row);
    return x;
  }();
  return f;
}

struct Run {
  CommandResult result;
  fs::path dir;
};

Run run_train(int nproc, const std::vector<std::string>& extra) {
  const auto& f = fixture();
  Run run{.result = {}, .dir = scratch_dir()};
  std::string cmd = shell_quote(furlong_binary().string());
  if (nproc > 1) {
    cmd += " launch --nproc-per-node " + std::to_string(nproc) + " -- " +
           shell_quote(furlong_binary().string());
  }
  const auto flags =
      threshold_grpo_flags(f.model, f.data, kRollouts)
          .add(tiny_trainer_flags())
          .add({"--colocate", "--check-weight-update-equal", "--update-weight-buffer-size", "65536",
                // Eval at the start and after rollouts 1 and 3: the eval rounds are split too.
                "--eval-interval", "2", "--eval-prompt-data", f.data.string(),
                "--n-samples-per-eval-prompt", "2", "--metrics-file",
                (run.dir / "metrics.jsonl").string(), "--save-debug-rollout-data",
                (run.dir / "rollout_{rollout_id}.json").string()})
          .add(extra);
  cmd += " train";
  for (const auto& a : flags.args()) cmd += " " + shell_quote(a);
  run.result = run_command(cmd + " 2>&1");
  return run;
}

std::vector<Json> metric_rows(const fs::path& dir) {
  std::vector<Json> rows;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

Json rollout_samples(const fs::path& dir, int rollout_id) {
  std::ifstream in(dir / ("rollout_" + std::to_string(rollout_id) + ".json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return Json::parse(text).at("samples");
}

bool is_timing(const std::string& key) {
  return key.rfind("perf/", 0) == 0 || key.find("time") != std::string::npos;
}

bool from_engine_logprobs(const std::string& key) {
  static const std::set<std::string> keys = {"rollout/rollout_log_probs",
                                             "train/train_rollout_logprob_abs_diff",
                                             "train/train_rollout_kl", "train/ess_ratio"};
  return keys.count(key) > 0;
}

// Same tokens, masks, rewards and statuses sample for sample; engine log-probs to rounding.
void expect_same_rollouts(const Run& a, const Run& b) {
  for (int id = 0; id < kRollouts; ++id) {
    const auto sa = rollout_samples(a.dir, id), sb = rollout_samples(b.dir, id);
    ASSERT_EQ(sa.size(), 64u) << "rollout " << id;
    ASSERT_EQ(sa.size(), sb.size()) << "rollout " << id;
    for (size_t i = 0; i < sa.size(); ++i) {
      for (const char* field : {"i", "g", "t", "r", "m", "raw", "rw", "s", "response"}) {
        EXPECT_EQ(sa[i][field], sb[i][field])
            << "rollout " << id << " sample " << i << " " << field;
      }
      const auto la = sa[i]["lp"].get<std::vector<double>>();
      const auto lb = sb[i]["lp"].get<std::vector<double>>();
      ASSERT_EQ(la.size(), lb.size());
      for (size_t t = 0; t < la.size(); ++t) {
        EXPECT_LE(std::abs(la[t] - lb[t]), kLogprobTolerance)
            << "rollout " << id << " sample " << i;
      }
    }
  }
}

void expect_same_metrics(const Run& a, const Run& b) {
  const auto ra = metric_rows(a.dir), rb = metric_rows(b.dir);
  ASSERT_EQ(ra.size(), static_cast<size_t>(kRollouts));
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t row = 0; row < ra.size(); ++row) {
    for (const auto& [key, value] : ra[row].items()) {
      if (is_timing(key)) continue;
      ASSERT_TRUE(rb[row].contains(key)) << key;
      if (from_engine_logprobs(key)) {
        EXPECT_LE(std::abs(value.get<double>() - rb[row][key].get<double>()), kLogprobTolerance)
            << "rollout " << row << " " << key;
      } else {
        EXPECT_EQ(value, rb[row][key]) << "rollout " << row << " " << key;
      }
    }
  }
}

bool has(const CommandResult& r, const std::string& text) {
  return r.output.find(text) != std::string::npos;
}

TEST(ColocatedEngines, OneEnginePerRankGivesTheRolloutsOfOneEngine) {
  const auto two = run_train(2, {});
  ASSERT_EQ(two.result.exit_code, 0) << two.result.output;
  EXPECT_TRUE(
      has(two.result, "rollout engines: colocated: 2 engines on ranks 0,1 of 2, 1 thread(s) each"))
      << two.result.output;
  EXPECT_TRUE(has(two.result, "colocated engine on rank 1 serves its share")) << two.result.output;

  const auto one = run_train(2, {"--rollout-num-gpus", "1"});
  ASSERT_EQ(one.result.exit_code, 0) << one.result.output;
  EXPECT_TRUE(has(one.result, "colocated: 1 engine on rank 0 of 2")) << one.result.output;
  EXPECT_TRUE(has(one.result, "rank(s) 1 train only")) << one.result.output;
  EXPECT_FALSE(has(one.result, "serves its share")) << one.result.output;

  expect_same_rollouts(two, one);
  expect_same_metrics(two, one);
}

// HSDP 2 x 2: every rank gathers full weights within its shard group, so all 4 engines take the
// trainer's bits (--check-weight-update-equal fails the run otherwise) and serve a quarter.
TEST(ColocatedEngines, FourEnginesUnderHsdpGiveTheRolloutsOfOneEngine) {
  const auto four = run_train(4, {"--dp-replicate-size", "2"});
  ASSERT_EQ(four.result.exit_code, 0) << four.result.output;
  EXPECT_TRUE(has(four.result, "colocated: 4 engines on ranks 0,1,2,3 of 4")) << four.result.output;
  for (int rank = 1; rank < 4; ++rank) {
    // The first round is the baseline eval: 55 groups of 2 in blocks of 14, 14, 14, 13.
    const std::string share = rank < 3 ? "28" : "26";
    EXPECT_TRUE(has(four.result, "colocated engine on rank " + std::to_string(rank) +
                                     " serves its share (" + share +
                                     " requests in its first round)"))
        << four.result.output;
  }
  const auto one = run_train(4, {"--dp-replicate-size", "2", "--rollout-num-gpus", "1"});
  ASSERT_EQ(one.result.exit_code, 0) << one.result.output;
  expect_same_rollouts(four, one);
  expect_same_metrics(four, one);
}

TEST(ColocatedEngines, TwoGpusPerEngineRunOneEngineOnTheGroupsFirstRank) {
  const auto grouped = run_train(2, {"--rollout-num-gpus-per-engine", "2"});
  ASSERT_EQ(grouped.result.exit_code, 0) << grouped.result.output;
  EXPECT_TRUE(has(grouped.result, "colocated: 1 engine on rank 0 of 2")) << grouped.result.output;
  EXPECT_TRUE(has(grouped.result, "--rollout-num-gpus-per-engine 2: no tensor parallelism"))
      << grouped.result.output;
  EXPECT_FALSE(has(grouped.result, "serves its share")) << grouped.result.output;
}

TEST(ColocatedEngines, ImpossibleLayoutsFailBeforeAnyModelLoads) {
  auto more = run_train(1, {"--rollout-num-gpus", "2"});
  EXPECT_NE(more.result.exit_code, 0);
  EXPECT_TRUE(has(more.result, "--rollout-num-gpus 2 with --colocate must lie in [1, 1]"))
      << more.result.output;
  auto odd = run_train(1, {"--rollout-num-gpus-per-engine", "0"});
  EXPECT_NE(odd.result.exit_code, 0);
  EXPECT_TRUE(has(odd.result, "--rollout-num-gpus-per-engine must be >= 1")) << odd.result.output;
  for (const auto* r : {&more.result, &odd.result}) {
    EXPECT_FALSE(has(*r, "engine: loaded")) << r->output;
  }
}

}  // namespace
}  // namespace furlong::testing
