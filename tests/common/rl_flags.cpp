#include "common/rl_flags.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace furlong::testing {

namespace fs = std::filesystem;

TrainFlags& TrainFlags::set(const std::string& name, const std::string& value) {
  auto it = std::find(args_.begin(), args_.end(), name);
  if (it == args_.end() || std::next(it) == args_.end()) {
    ADD_FAILURE() << name << " is not among the flags";
    return *this;
  }
  *std::next(it) = value;
  return *this;
}

TrainFlags& TrainFlags::drop(const std::string& name) {
  auto it = std::find(args_.begin(), args_.end(), name);
  if (it == args_.end()) {
    ADD_FAILURE() << name << " is not among the flags";
    return *this;
  }
  auto end = std::find_if(std::next(it), args_.end(),
                          [](const std::string& a) { return a.starts_with("--"); });
  args_.erase(it, end);
  return *this;
}

TrainFlags& TrainFlags::add(const std::vector<std::string>& args) {
  args_.insert(args_.end(), args.begin(), args.end());
  return *this;
}

TrainFlags threshold_grpo_flags(const fs::path& model, const fs::path& prompts, int num_rollout) {
  return {"--hf-checkpoint",
          model.string(),
          "--prompt-data",
          prompts.string(),
          "--input-key",
          "input",
          "--label-key",
          "label",
          "--rm-type",
          "exact_match",
          "--rollout-skip-special-tokens",
          "--rollout-shuffle",
          "--rollout-batch-size",
          "8",
          "--n-samples-per-prompt",
          "8",
          "--global-batch-size",
          "64",
          "--num-rollout",
          std::to_string(num_rollout),
          "--rollout-max-response-len",
          "2"};
}

TrainFlags tiny_trainer_flags() {
  return {"--advantage-estimator",
          "grpo",
          "--lr",
          "1e-2",
          "--adam-beta2",
          "0.99",
          "--compute-dtype",
          "float32",
          "--micro-batch-size",
          "16",
          "--num-threads",
          "1",
          "--engine-num-threads",
          "1"};
}

}  // namespace furlong::testing
