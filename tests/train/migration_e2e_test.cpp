// `furlong train` end to end on the migration flags of miles' RL loop, on a tiny random Qwen3
// with the arithmetic tokenizer (examples/tokenizers/arith) and the "a+b=" task of
// tests/e2e/rl_e2e_test.cpp, colocated on one rank:
//   * every optimizer step's train/* metrics at its own train/step (miles' counter
//     rollout_id * steps_per_rollout + step), under miles' names (train/lr-pg_0), in the JSONL
//     and in TensorBoard (read back with TensorBoard's own reader);
//   * --save-debug-rollout-data, then --debug-train-only --load-debug-rollout-data replaying
//     the saved rollouts: the same train/* numbers, bit for bit;
//   * --debug-rollout-only; --ref-load; the OPSM and unbiased-KL flags reaching the loss;
//   * the engine computing in the trainer's dtype (fp32 and bf16 checkpoints);
//   * SFT writing TensorBoard and the HTML report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/arith_task.h"
#include "common/rl_flags.h"
#include "common/test_util.h"
#include "common/train_test_util.h"
#include "core/files.h"
#include "core/json_util.h"

namespace furlong::train {
namespace {

namespace fs = std::filesystem;
using furlong::testing::furlong_binary;
using furlong::testing::run_command;
using furlong::testing::scratch_dir;
using furlong::testing::shell_quote;

struct Fixture {
  fs::path root, model, model_bf16, other_model, data;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.root = furlong::testing::fresh_process_dir("train", "migration_fixture");
    x.model = furlong::testing::init_tiny_model(x.root, "model", 7, "float32");
    x.model_bf16 = furlong::testing::init_tiny_model(x.root, "model_bf16", 7, "bfloat16");
    x.other_model = furlong::testing::init_tiny_model(x.root, "other_model", 8, "float32");
    x.data = x.root / "prompts.jsonl";
    furlong::testing::write_arith_rows(x.data, furlong::testing::threshold_row);
    return x;
  }();
  return f;
}

// The threshold task's run, 2 rollouts of 4 prompts x 4 samples, 2 optimizer steps of 8 samples
// per rollout, in micro-batches of 4, unshuffled, with the default advantage estimator and betas.
furlong::testing::TrainFlags rl_flags(const fs::path& dir) {
  const auto& f = fixture();
  return furlong::testing::threshold_grpo_flags(f.model, f.data, 2)
      .drop("--rollout-shuffle")
      .drop("--global-batch-size")
      .set("--rollout-batch-size", "4")
      .set("--n-samples-per-prompt", "4")
      .add({"--num-steps-per-rollout", "2"})
      .add(furlong::testing::tiny_trainer_flags()
               .drop("--advantage-estimator")
               .drop("--adam-beta2")
               .set("--micro-batch-size", "4"))
      .add({"--metrics-file", (dir / "metrics.jsonl").string(), "--colocate"});
}

furlong::testing::CommandResult run_train(const std::vector<std::string>& flags) {
  std::string cmd = shell_quote(furlong_binary().string()) + " train ";
  for (const auto& a : flags) cmd += shell_quote(a) + " ";
  return run_command(cmd + " 2>&1");
}

std::vector<Json> read_rows(const fs::path& file) {
  std::vector<Json> rows;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

std::vector<Json> rows_with(const std::vector<Json>& rows, const std::string& key) {
  std::vector<Json> out;
  for (const auto& r : rows) {
    if (r.contains(key)) out.push_back(r);
  }
  return out;
}

// train/* values of the step rows, without the wall-clock ones.
Json train_values(const std::vector<Json>& rows) {
  Json out = Json::array();
  for (const auto& r : rows_with(rows, "train/step")) {
    Json v = Json::object();
    for (const auto& [k, x] : r.items()) {
      if (k.rfind("train/", 0) == 0 && k != "train/step_time") v[k] = x;
    }
    out.push_back(v);
  }
  return out;
}

TEST(MigrationEndToEnd, StepsLoggedAtTrainStepAndSavedRolloutsReplayBitIdentically) {
  auto dir = scratch_dir();
  auto flags = rl_flags(dir);
  const auto tb = dir / "tb";
  const std::string saved = (dir / "rollouts" / "rollout_{rollout_id}.json").string();
  flags.add({"--tensorboard-dir", tb.string(), "--save-debug-rollout-data", saved, "--use-kl-loss",
             "--kl-loss-coef", "0.0", "--ref-load", fixture().model.string()});
  auto r = run_train(flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_rows(dir / "metrics.jsonl");
  const auto steps = rows_with(rows, "train/step");
  ASSERT_EQ(steps.size(), 4u) << r.output;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["train/step"].get<double>(), static_cast<double>(i));
    EXPECT_EQ(steps[i]["step"].get<int64_t>(), static_cast<int64_t>(i));
    for (const char* key : {"train/lr-pg_0", "train/loss", "train/pg_loss", "train/grad_norm",
                            "train/ppo_kl", "train/kl_loss"}) {
      EXPECT_TRUE(steps[i].contains(key)) << key << " missing at step " << i;
    }
    EXPECT_FALSE(steps[i].contains("train/lr")) << "miles' name is train/lr-pg_0";
  }
  // --ref-load = the actor's own checkpoint: before the first update the reference scores
  // exactly as the actor does; after updates the two differ.
  EXPECT_EQ(steps[0]["train/kl_loss"].get<double>(), 0.0);
  EXPECT_NE(steps[2]["train/kl_loss"].get<double>(), 0.0);
  for (size_t i = 0; i < steps.size(); ++i) {
  }
  // The second step of a rollout trains on weights the first moved: ppo_kl is no longer 0.
  EXPECT_NE(steps[1]["train/ppo_kl"].get<double>(), 0.0);
  const auto rollouts = rows_with(rows, "rollout/step");
  ASSERT_EQ(rollouts.size(), 2u);
  for (size_t i = 0; i < rollouts.size(); ++i) {
    EXPECT_EQ(rollouts[i]["rollout/step"].get<double>(), static_cast<double>(i));
    EXPECT_TRUE(rollouts[i].contains("rollout/raw_reward"));
    EXPECT_FALSE(rollouts[i].contains("train/loss")) << "train/* belong to the step rows";
  }

  // TensorBoard, read back by TensorBoard: train/* at train/step, rollout/* at rollout/step.
  const auto tb_json = dir / "tb.json";
  furlong::testing::run_python("oracles/read_tensorboard.py", {tb.string(), tb_json.string()});
  auto scalars = read_json_file(tb_json)["scalars"];
  ASSERT_TRUE(scalars.contains("train/lr-pg_0"));
  std::vector<double> train_steps, rollout_steps;
  for (const auto& e : scalars["train/loss"]) train_steps.push_back(e[0].get<double>());
  for (const auto& e : scalars["rollout/raw_reward"]) rollout_steps.push_back(e[0].get<double>());
  EXPECT_EQ(train_steps, (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(rollout_steps, (std::vector<double>{0, 1}));
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(scalars["train/loss"][i][1].get<double>(),
              static_cast<double>(static_cast<float>(steps[i]["train/loss"].get<double>())));
  }

  // Replay: no engines, the saved samples, the same training.
  ASSERT_TRUE(fs::exists(dir / "rollouts" / "rollout_0.json"));
  ASSERT_TRUE(fs::exists(dir / "rollouts" / "rollout_1.json"));
  auto replay_dir = dir / "replay";
  fs::create_directories(replay_dir);
  auto replay = rl_flags(replay_dir);
  replay.add({"--debug-train-only", "--load-debug-rollout-data", saved, "--use-kl-loss",
              "--kl-loss-coef", "0.0", "--ref-load", fixture().model.string()});
  auto r2 = run_train(replay);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const auto replayed = read_rows(replay_dir / "metrics.jsonl");
  EXPECT_EQ(train_values(replayed).dump(), train_values(rows).dump());
  EXPECT_EQ(train_values(replayed).size(), 4u);
}

TEST(MigrationEndToEnd, DebugRolloutOnlyGeneratesWithoutTraining) {
  auto dir = scratch_dir();
  auto flags = rl_flags(dir);
  flags.add({"--debug-rollout-only"});
  auto r = run_train(flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_rows(dir / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 2u) << r.output;
  for (const auto& row : rows) {
    EXPECT_TRUE(row.contains("rollout/raw_reward")) << row.dump();
    for (const auto& [k, v] : row.items()) EXPECT_NE(k.rfind("train/", 0), 0u) << k;
  }
  // Train-only without saved rollouts is refused before anything loads.
  auto bad = rl_flags(dir);
  bad.add({"--debug-train-only"});
  auto r2 = run_train(bad);
  EXPECT_NE(r2.exit_code, 0);
  EXPECT_NE(r2.output.find("--load-debug-rollout-data"), std::string::npos) << r2.output;
}

// --ref-load names the reference model's own directory: another model's log-probs, so a KL
// that is 0 against the actor's checkpoint (previous test) is positive here. OPSM and the
// unbiased KL reach the loss: on a rollout's first (on-policy) step OPSM masks nothing and the
// unbiased weight exp(logp - logp_old) is exactly 1, so the KL equals the plain run's; on the
// second step (the weights moved) OPSM at --opsm-delta 0 masks the negative-advantage samples
// that drifted, and the weighted KL differs. A --ref-load that does not exist is a clear error.
TEST(MigrationEndToEnd, RefLoadOpsmAndUnbiasedKlReachTheLoss) {
  auto run = [](const fs::path& dir, bool unbiased) {
    auto flags = rl_flags(dir);
    flags.add({"--use-kl-loss", "--kl-loss-coef", "0.01", "--use-opsm", "--opsm-delta", "0",
               "--ref-load", fixture().other_model.string()});
    if (unbiased) flags.add({"--use-unbiased-kl"});
    flags.set("--num-rollout", "1");
    // 128 samples instead of 16, so that the second step's half (8 groups of 8) holds a group
    // with a spread of rewards (negative advantages for OPSM to mask) whatever the seeded draws
    // are: at the random model's ~5% reward rate a group has a spread with p ~ 1 - 0.95^8 = 0.34,
    // and 8 groups all without one has p ~ 0.66^8 < 4%.
    flags.set("--rollout-batch-size", "16").set("--n-samples-per-prompt", "8");
    auto r = run_train(flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return rows_with(read_rows(dir / "metrics.jsonl"), "train/step");
  };
  auto dir = scratch_dir();
  fs::create_directories(dir / "plain");
  const auto steps = run(dir, true);
  const auto plain = run(dir / "plain", false);
  ASSERT_EQ(steps.size(), 2u);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_GT(steps[0]["train/kl_loss"].get<double>(), 0.0);
  ASSERT_TRUE(steps[0].contains("train/opsm_clipfrac"));
  EXPECT_EQ(steps[0]["train/opsm_clipfrac"].get<double>(), 0.0);
  EXPECT_GT(steps[1]["train/opsm_clipfrac"].get<double>(), 0.0);
  EXPECT_EQ(steps[0]["train/kl_loss"].get<double>(), plain[0]["train/kl_loss"].get<double>());
  EXPECT_NE(steps[1]["train/kl_loss"].get<double>(), plain[1]["train/kl_loss"].get<double>());

  auto bad = rl_flags(dir);
  bad.add({"--use-kl-loss", "--ref-load", (dir / "missing").string()});
  auto r2 = run_train(bad);
  EXPECT_NE(r2.exit_code, 0);
  EXPECT_NE(r2.output.find("--ref-load"), std::string::npos) << r2.output;
}

// The first dtype named after `marker` in the first line of `output` that contains it (the
// trainer's line goes on to explain the choice, naming other dtypes: "float32 (auto: cpu has no
// native bfloat16 arithmetic ...)").
std::string logged_dtype(const std::string& output, const std::string& marker) {
  const auto at = output.find(marker);
  if (at == std::string::npos) return "";
  const auto end = output.find('\n', at);
  std::string first;
  size_t first_at = std::string::npos;
  for (const char* name : {"bfloat16", "float32", "float16"}) {
    const auto found = output.find(name, at + marker.size());
    if (found < end && found < first_at) {
      first = name;
      first_at = found;
    }
  }
  return first;
}

// By default the engine computes in the trainer's dtype (both log it): the trainer's auto is
// bf16 where native, else fp32, whatever the checkpoint's dtype. With the same dtype and the
// trainer's code path (--engine-exact-logprobs), the engine's log-probs match the trainer's
// old-policy pass: train_rollout_logprob_abs_diff (mean |trainer - engine| over the step's
// tokens) stays within 1e-4, the fp32 bound derived in tests/e2e/rl_e2e_test.cpp (forward
// budget of the exact logits, two computations; measured here: 0 in fp32 and in bf16, the rows
// of a packed batch being computed independently). An engine left in the checkpoint's fp32
// while the trainer computes in bf16 differed by 8.4e-4 on this model.
void expect_engine_matches_trainer(const fs::path& model, const std::string& what) {
  auto dir = scratch_dir();
  auto flags = rl_flags(dir);
  flags.set("--hf-checkpoint", model.string())
      .set("--compute-dtype", "auto")  // the default
      .set("--num-steps-per-rollout", "1");
  auto r = run_train(flags);
  ASSERT_EQ(r.exit_code, 0) << what << ": " << r.output;
  const auto trainer = logged_dtype(r.output, "trainer compute dtype: ");
  const auto engine = logged_dtype(r.output, "engine: loaded ");
  EXPECT_FALSE(trainer.empty()) << r.output;
  EXPECT_EQ(engine, trainer) << what << ": the engine computes in another dtype";
  for (const auto& row : rows_with(read_rows(dir / "metrics.jsonl"), "train/step")) {
    EXPECT_LE(row["train/train_rollout_logprob_abs_diff"].get<double>(), 1e-4)
        << what << " step " << row["train/step"];
  }
}

TEST(MigrationEndToEnd, EngineComputesInTheTrainersDtype) {
  expect_engine_matches_trainer(fixture().model, "fp32 checkpoint");
  expect_engine_matches_trainer(fixture().model_bf16, "bf16 checkpoint");
}

TEST(MigrationEndToEnd, SftWritesTensorBoardAndReport) {
  auto dir = scratch_dir();
  testing::write_model(dir / "model", testing::tiny_config(false), at::kFloat, 3);
  testing::write_sft_data(dir / "data.jsonl", 16, 61, 7);
  auto r =
      run_train({"--hf-checkpoint", (dir / "model").string(), "--loss-type", "sft", "--prompt-data",
                 (dir / "data.jsonl").string(), "--global-batch-size", "8", "--num-rollout", "2",
                 "--compute-dtype", "float32", "--num-threads", "1", "--tensorboard-dir",
                 (dir / "tb").string(), "--report", (dir / "report.html").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  furlong::testing::run_python("oracles/read_tensorboard.py",
                               {(dir / "tb").string(), (dir / "tb.json").string()});
  auto scalars = read_json_file(dir / "tb.json")["scalars"];
  ASSERT_TRUE(scalars.contains("train/loss")) << scalars.dump();
  ASSERT_EQ(scalars["train/loss"].size(), 2u);
  // miles' counter, 0-based: train/step = rollout_id * steps_per_rollout + step.
  EXPECT_EQ(scalars["train/loss"][0][0].get<double>(), 0.0);
  EXPECT_EQ(scalars["train/loss"][1][0].get<double>(), 1.0);
  EXPECT_TRUE(scalars.contains("train/lr-pg_0"));
  const auto html = read_file(dir / "report.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("train/loss"), std::string::npos);
}

}  // namespace
}  // namespace furlong::train
