#include "metrics/diagnostics.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace furlong::metrics {
namespace {

// Spread below this is no spread: the same bound the dynamic-sampling filter uses for std.
constexpr double kSpreadTolerance = 1e-8;

std::string reward_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", r);
  return buf;
}

// "every sample scored 0" or "the groups' rewards: 0 (5 groups), 1 (3 groups)".
std::string describe_rewards(const std::map<std::string, int>& groups_by_reward) {
  if (groups_by_reward.size() == 1) {
    return "every sample scored " + groups_by_reward.begin()->first;
  }
  std::string out = "the groups' rewards: ";
  bool first = true;
  for (const auto& [reward, count] : groups_by_reward) {
    out += (first ? "" : ", ") + reward + " (" + std::to_string(count) +
           (count == 1 ? " group)" : " groups)");
    first = false;
  }
  return out;
}

// The "Check: ..." part: where the reward comes from and what changes what is graded.
std::string check_hints(const RewardSetup& setup) {
  std::string out = "Check: the grader (" + setup.grader +
                    ") on a few responses (--save-debug-rollout-data writes them with their "
                    "rewards); that --label-key " +
                    setup.label_key + " names the answer field of the prompt data; ";
  out += std::string("--rollout-skip-special-tokens (") +
         (setup.skip_special_tokens ? "on"
                                    : "off: special tokens such as an end-of-turn marker stay in "
                                      "the graded text") +
         "); and the task's difficulty (a model that solves none, or all, of the prompts gets "
         "one reward everywhere).";
  return out;
}

}  // namespace

std::string zero_reward_spread_warning(const std::vector<std::vector<double>>& group_rewards,
                                       const RewardSetup& setup) {
  std::map<std::string, int> groups_by_reward;
  size_t samples = 0;
  int groups = 0;
  for (const auto& g : group_rewards) {
    if (g.size() < 2) continue;  // one sample has no spread to measure
    const auto [lo, hi] = std::minmax_element(g.begin(), g.end());
    if (!(*hi - *lo <= kSpreadTolerance)) return "";  // a spread, or a NaN: not this case
    groups_by_reward[reward_text(*lo)] += 1;
    samples = std::max(samples, g.size());
    ++groups;
  }
  if (groups == 0) return "";
  std::string msg = std::string("WARNING: ") +
                    (setup.group_normalized ? "no gradient signal" : "no reward spread") +
                    ": in the first rollout, all " + std::to_string(groups) +
                    " prompt groups have zero reward spread (the " + std::to_string(samples) +
                    " samples of each prompt got the same reward; " +
                    describe_rewards(groups_by_reward) + "). With --advantage-estimator " +
                    setup.advantage_estimator;
  msg += setup.group_normalized
             ? ", the group-normalized advantages (GRPO's) are all 0, so training steps change "
               "nothing. "
             : ", no response is rewarded over another of its prompt, so training cannot learn "
               "which responses are better. ";
  return msg + check_hints(setup);
}

}  // namespace furlong::metrics
