// One rollout's training data (miles' generate_rollout), on rank 0: pull prompt groups from
// the data source, generate n samples per prompt on the engines, grade them, keep groups that
// pass the dynamic-sampling filter until --rollout-batch-size groups are kept (over-sampling
// --over-sampling-batch-size groups per refill, aborting what is still in flight once the
// target is reached), and report rollout/* metrics. Also the eval pass (mean reward and pass@k
// per eval dataset).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/prompt_dataset.h"
#include "data/sample_builder.h"
#include "rl/sample.h"
#include "train/options.h"
#include "train/rollout_engines.h"

namespace furlong::tokenizer {
class Tokenizer;
}

namespace furlong::train {

// Grades samples (their response text, label and metadata): fills raw_reward of each.
using RewardFn = std::function<void(std::vector<rl::Sample*>& samples)>;

struct RolloutResult {
  std::vector<rl::Sample> samples;  // kept groups, in group order; raw rewards (the training
                                    // step normalizes them: rl::compute_rollout_advantages)
  std::map<std::string, double> metrics;
};

class RolloutCollector {
 public:
  RolloutCollector(const TrainOptions& options, RolloutEngines& engines,
                   data::RolloutDataSource& source, const tokenizer::Tokenizer& tokenizer,
                   RewardFn reward);
  RolloutResult collect();

  struct EvalSet {
    std::string name;
    std::unique_ptr<data::PromptDataset> dataset;
  };
  // eval/<name> (mean raw reward), eval/<name>-pass@k, eval/<name>-truncated_ratio,
  // eval/<name>/response_len/mean.
  std::map<std::string, double> evaluate(const std::vector<EvalSet>& sets);

 private:
  // Takes a finished group; returns true when it has enough (the rest is then aborted).
  using GroupConsumer = std::function<bool(std::vector<rl::Sample>&&)>;
  // Generates every sample of `groups` at once (whole groups split over the engines), handing
  // each group to `consume` (on this thread) as soon as all its samples are done: in completion
  // order on one engine, in group order on several (independent of timing). With
  // `routed_experts` (--use-rollout-routing-replay, training rollouts) every request asks for
  // the engine's expert ids and each sample gets them in rl::Sample::routed_experts (one row per
  // prompt + response token).
  void generate_groups(std::vector<std::vector<rl::Sample>> groups,
                       const engine::SamplingParams& params, const GroupConsumer& consume,
                       bool routed_experts = false);
  engine::SamplingParams sampling_params(bool eval) const;
  std::string decode_text(const std::vector<int64_t>& ids) const;

  const TrainOptions& options_;
  RolloutEngines& engines_;
  data::RolloutDataSource& source_;
  const tokenizer::Tokenizer& tokenizer_;
  RewardFn reward_;
};

// pass@k = 1 - C(n-c, k) / C(n, k) averaged over groups of n samples with c correct
// (reward == 1), for k = 1, 2, 4, ... <= n.
std::map<int64_t, double> pass_at_k(const std::vector<std::vector<double>>& group_rewards);

}  // namespace furlong::train
