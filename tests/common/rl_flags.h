// The `furlong train` flag sets of the RL tests as argv lists, and the edits a test makes to
// one: the tiny task's GRPO run, the trainer side of the tiny runs, a value replaced, a flag
// dropped.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace furlong::testing {

// An argv list of `furlong train` flags: "--name value..." and bare switches.
class TrainFlags {
 public:
  TrainFlags() = default;
  TrainFlags(std::initializer_list<std::string> args) : args_(args) {}
  explicit TrainFlags(std::vector<std::string> args) : args_(std::move(args)) {}

  // Replaces the value of `name` (a test failure if it is not among the flags).
  TrainFlags& set(const std::string& name, const std::string& value);
  // Removes `name` and its values, the words up to the next "--" word (a test failure if it
  // is not among the flags).
  TrainFlags& drop(const std::string& name);
  // Appends `args`.
  TrainFlags& add(const std::vector<std::string>& args);

  const std::vector<std::string>& args() const { return args_; }
  operator std::vector<std::string>() const { return args_; }  // NOLINT: an argv list

 private:
  std::vector<std::string> args_;
};

// `furlong train` flags of the threshold task's GRPO runs (common/arith_task.h): the model and
// prompts (input/label keys, exact-match reward, special tokens skipped, shuffled), 8 prompts x
// 8 samples per rollout, one global batch of 64, responses of at most 2 tokens, `num_rollout`
// rollouts.
TrainFlags threshold_grpo_flags(const std::filesystem::path& model,
                                const std::filesystem::path& prompts, int num_rollout);

// The trainer side of the tiny runs: GRPO advantages, lr 1e-2, AdamW's beta2 0.99, fp32
// compute, micro-batches of 16, one thread for the trainer and one for the engine.
TrainFlags tiny_trainer_flags();

}  // namespace furlong::testing
