// Checks on a run's first results that catch a misconfigured run early, as log messages a user
// can act on (the training loops decide when to run them and log what they return).
#pragma once

#include <string>
#include <vector>

namespace furlong::metrics {

// What the zero-spread message names so the user knows where to look (flag values as given).
struct RewardSetup {
  std::string grader;                // "--rm-type math", "--rm-url http://...", ...
  std::string label_key;             // --label-key
  bool skip_special_tokens = false;  // --rollout-skip-special-tokens
  std::string advantage_estimator;   // --advantage-estimator
  // Whether the estimator normalizes rewards within each prompt's group (grpo, gspo,
  // reinforce_plus_plus_baseline without --disable-rewards-normalization): then a group with
  // one reward gets advantage 0 for every sample.
  bool group_normalized = true;
};

// The warning for a rollout in which every group of two or more samples got one reward for all
// its samples (so group-normalized advantages, GRPO's, are all 0 and the step learns nothing;
// other estimators learn nothing that tells a prompt's better responses from its worse ones);
// "" when some group has a spread or no group has two samples. `group_rewards` holds each
// generated group's rewards.
std::string zero_reward_spread_warning(const std::vector<std::vector<double>>& group_rewards,
                                       const RewardSetup& setup);

}  // namespace furlong::metrics
