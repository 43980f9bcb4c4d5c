// Training that goes non-finite must never be silent: a NaN-filled model, or a learning rate
// that blows the weights up, stops the run naming the optimizer step (or, with
// --skip-nonfinite-steps, drops those updates), and no checkpoint is ever written with NaN or
// inf weights.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/test_util.h"
#include "common/train_test_util.h"
#include "io/safetensors.h"

namespace furlong::backend {
namespace {

namespace fs = std::filesystem;
using furlong::testing::run_command;
using furlong::testing::shell_quote;

// A tiny model directory whose weights are all NaN.
void write_nan_model(const fs::path& dir) {
  testing::write_model(dir, testing::tiny_config(false), at::kFloat, 3);
  auto weights = io::HfWeights::open(dir);
  io::NamedTensors tensors;
  for (const auto& name : weights.names()) {
    tensors.emplace_back(name, at::full_like(weights.get(name), NAN));
  }
  fs::remove(dir / "model.safetensors");
  io::save_hf_weights(dir, tensors);
}

std::string sft_command(const fs::path& model, const fs::path& data, const fs::path& save,
                        const std::string& extra) {
  return shell_quote(furlong::testing::furlong_binary().string()) +
         " train --loss-type sft --hf-checkpoint " + shell_quote(model.string()) +
         " --prompt-data " + shell_quote(data.string()) +
         " --global-batch-size 4 --num-rollout 3 --compute-dtype float32 --save " +
         shell_quote(save.string()) + " --save-interval 1 " + extra;
}

bool has_checkpoint(const fs::path& save) {
  if (!fs::exists(save)) return false;
  for (const auto& entry : fs::directory_iterator(save)) {
    if (entry.path().filename().string().rfind("iter_", 0) == 0) return true;
  }
  return false;
}

TEST(NonFiniteTraining, NanWeightsStopTheRunAtTheFirstStepAndSaveNothing) {
  auto dir = furlong::testing::scratch_dir();
  write_nan_model(dir / "m");
  testing::write_sft_data(dir / "d.jsonl", 12, 61, 1);
  auto r = run_command(sft_command(dir / "m", dir / "d.jsonl", dir / "save", ""));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 1 (rollout 0): the gradient norm is nan"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--skip-nonfinite-steps"), std::string::npos) << r.output;
  EXPECT_FALSE(has_checkpoint(dir / "save"));
}

TEST(NonFiniteTraining, SkippingStepsStillRefusesToSaveNonFiniteWeights) {
  auto dir = furlong::testing::scratch_dir();
  write_nan_model(dir / "m");
  testing::write_sft_data(dir / "d.jsonl", 12, 61, 1);
  auto r =
      run_command(sft_command(dir / "m", dir / "d.jsonl", dir / "save", "--skip-nonfinite-steps"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the update is skipped (--skip-nonfinite-steps)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("refusing to save the checkpoint of rollout 0"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("holds NaN or inf values"), std::string::npos) << r.output;
  EXPECT_FALSE(has_checkpoint(dir / "save"));
}

TEST(NonFiniteTraining, ALearningRateThatOverflowsTheWeightsStopsAtTheStepAfterIt) {
  // Adam moves every weight by about lr at the first step, so lr 1e30 makes weights ~1e30 and
  // the next forward's products (~1e60) overflow fp32: step 2's gradient norm is not finite.
  // The save after rollout 0 (iter_0000001) holds huge but finite weights, so it is allowed;
  // the run stops before rollout 1's update, so nothing is saved for it (iter_0000002).
  auto dir = furlong::testing::scratch_dir();
  testing::write_model(dir / "m", testing::tiny_config(false), at::kFloat, 3);
  testing::write_sft_data(dir / "d.jsonl", 12, 61, 1);
  auto r = run_command(
      sft_command(dir / "m", dir / "d.jsonl", dir / "save", "--lr 1e30 --lr-warmup-iters 0"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 2 (rollout 1): the gradient norm is"), std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(dir / "save" / "iter_0000001"));
  EXPECT_FALSE(fs::exists(dir / "save" / "iter_0000002"));
}

}  // namespace
}  // namespace furlong::backend
