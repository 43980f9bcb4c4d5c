// Rewards to per-token advantages (miles' reward post-processing and
// compute_advantages_and_returns). compute_rollout_advantages is the whole stage in one call;
// the pieces below it are its steps:
//  1. normalize_group_rewards: per prompt group, subtract the group mean and, for grpo/gspo
//     with std normalization, divide by (unbiased std + 1e-6). The raw reward is kept apart.
//  2. compute_advantages: per-token advantages over the flat response layout.
//     grpo/gspo: A_t = R_i. reinforce_plus_plus: token rewards -kl_coef * KL_t (masked), R_i
//     added at the last position with mask 1, discounted returns G_t = r_t + gamma * G_{t+1}.
//     reinforce_plus_plus_baseline: A_t = R_i - kl_coef * KL_t (masked).
//     Then optional masked whitening (--normalize-advantages).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rl/kl.h"
#include "rl/layout.h"
#include "rl/sample.h"

namespace furlong::rl {

enum class AdvantageEstimator { kGrpo, kGspo, kReinforcePlusPlus, kReinforcePlusPlusBaseline };

// --advantage-estimator: "grpo" | "gspo" | "reinforce_plus_plus" |
// "reinforce_plus_plus_baseline" ("ppo" needs a critic, which furlong does not have).
AdvantageEstimator parse_advantage_estimator(const std::string& name);
const char* advantage_estimator_name(AdvantageEstimator estimator);

// Epsilons fixed by miles.
inline constexpr double kGroupStdEpsilon = 1e-6;  // A / (std + eps) in group normalization
inline constexpr double kWhitenEpsilon = 1e-8;    // (A - mean) / sqrt(var + eps)

struct RewardNormOptions {
  AdvantageEstimator estimator = AdvantageEstimator::kGrpo;
  bool rewards_normalization = true;   // false with --disable-rewards-normalization
  bool grpo_std_normalization = true;  // false with --disable-grpo-std-normalization
  int64_t n_samples_per_prompt = 1;    // std normalization is off when this is 1
};

// Group-normalized rewards (6.1), one per sample, in input order. `group_index` gives each
// sample's prompt group; `rollout_id` (empty = every sample is its own rollout) collapses
// siblings of one trajectory to one reward (they must be equal) and broadcasts the result back.
// Estimators other than grpo/gspo/reinforce_plus_plus_baseline, or normalization disabled,
// return the raw rewards. A group whose rewards are all equal gets exactly 0.
std::vector<double> normalize_group_rewards(const std::vector<double>& raw_rewards,
                                            const std::vector<int64_t>& group_index,
                                            const std::vector<int64_t>& rollout_id,
                                            const RewardNormOptions& options);

// The same over samples: sets each sample's `reward` from its `raw_reward`, grouped by
// `group_index` (every sample its own rollout).
void normalize_sample_rewards(std::vector<Sample>& samples, const RewardNormOptions& options);

struct AdvantageOptions {
  AdvantageEstimator estimator = AdvantageEstimator::kGrpo;
  double kl_coef = 0.0;               // --kl-coef (reward-level KL; unused by grpo/gspo)
  KlType kl_type = KlType::kK1;       // --kl-loss-type
  double gamma = 1.0;                 // --gamma (reinforce_plus_plus)
  bool normalize_advantages = false;  // --normalize-advantages (required by the ++ variants)
};

// Checks flag combinations (++ variants need --normalize-advantages; gamma in [0, 1]).
void validate_advantage_options(const AdvantageOptions& options);

struct AdvantageInputs {
  at::Tensor rewards_S{};        // fp32 [S]: normalize_group_rewards' output (raw for ++)
  at::Tensor log_probs_T{};      // fp32 [T]: pi_old; needed when kl_coef != 0 (++ variants)
  at::Tensor ref_log_probs_T{};  // fp32 [T]: pi_ref; needed when kl_coef != 0 (++ variants)
};

// Per-token advantages [T] before whitening (no grad). Masked positions of grpo/gspo carry R_i
// as well (the loss masks them); the ++ variants' KL term is zero there.
at::Tensor compute_advantages(const AdvantageInputs& inputs, const ResponseLayout& layout,
                              const AdvantageOptions& options);

// Mask-weighted moments of advantages: [3] = {sum m*A, sum m*A^2, sum m}. Sum these over the
// data-parallel group (all-reduce) before whiten_advantages to whiten across the whole batch.
at::Tensor advantage_moments(const at::Tensor& advantages_T, const at::Tensor& loss_mask_T);
// (A - mean) / sqrt(var_unbiased + 1e-8), mean and var from `moments` (advantage_moments'
// layout). With fewer than 2 masked tokens the variance has no unbiased estimate: var = 0 then.
at::Tensor whiten_advantages(const at::Tensor& advantages_T, const at::Tensor& moments);

// The advantage stage of one rollout (what the training step names). Every rank passes the
// whole rollout (to normalize rewards within each prompt group, whichever rank holds its
// members) and the old-policy / reference log-probs of its own samples, fp32 [response_length]
// each (`ref_log_probs` empty without a reference model). With --normalize-advantages the
// moments are summed over the data-parallel group by `sum_over_ranks` (in place, fp64), so the
// whitening spans the whole batch.
struct RolloutAdvantageInputs {
  const std::vector<Sample>* rollout = nullptr;
  std::vector<size_t> local;  // indices into *rollout of this rank's samples
  std::vector<at::Tensor> old_log_probs;
  std::vector<at::Tensor> ref_log_probs;
};
struct RolloutAdvantages {
  std::vector<double> rewards;         // per local sample: its group-normalized reward
  std::vector<at::Tensor> advantages;  // per local sample: fp32 [response_length]
};
RolloutAdvantages compute_rollout_advantages(
    const RolloutAdvantageInputs& inputs, const RewardNormOptions& reward_options,
    const AdvantageOptions& options, const std::function<void(at::Tensor&)>& sum_over_ranks);

// compute_advantages, then whitening over this micro-batch alone if normalize_advantages.
at::Tensor compute_and_whiten_advantages(const AdvantageInputs& inputs,
                                         const ResponseLayout& layout,
                                         const AdvantageOptions& options);

}  // namespace furlong::rl
