#include "train/options.h"

#include "core/error.h"

namespace furlong::train {

TrainBackendKind parse_train_backend(const std::string& name) {
  if (name == "fsdp") return TrainBackendKind::kFsdp;
  FURLONG_FAIL("--train-backend ", name, " is not available: furlong implements the fsdp backend");
}

LossType parse_loss_type(const std::string& name) {
  if (name == "policy_loss") return LossType::kPolicyLoss;
  if (name == "sft_loss" || name == "sft") return LossType::kSftLoss;
  FURLONG_FAIL("--loss-type ", name, " is not supported; use sft_loss (alias sft) or policy_loss");
}

const char* loss_type_name(LossType type) {
  return type == LossType::kPolicyLoss ? "policy_loss" : "sft_loss";
}

rl::RewardNormOptions reward_norm_options(const TrainOptions& o) {
  const auto& a = o.algorithm;
  return {.estimator = a.advantage_estimator,
          .rewards_normalization = !a.disable_rewards_normalization,
          .grpo_std_normalization = !a.disable_grpo_std_normalization,
          .n_samples_per_prompt = o.data.n_samples_per_prompt};
}

rl::AdvantageOptions advantage_options(const AlgorithmOptions& a) {
  return {.estimator = a.advantage_estimator,
          .kl_coef = a.kl_coef,
          .kl_type = a.kl_loss_type,
          .gamma = a.gamma,
          .normalize_advantages = a.normalize_advantages};
}

rl::LossOptions loss_options(const AlgorithmOptions& a, const BatchOptions& b) {
  return {.eps_clip = a.eps_clip,
          .eps_clip_high = a.eps_clip_high,
          .eps_clip_c = a.eps_clip_c,
          .sequence_level_ratio = a.advantage_estimator == rl::AdvantageEstimator::kGspo,
          .use_tis = a.use_tis,
          .tis_clip = a.tis_clip,
          .tis_clip_low = a.tis_clip_low,
          .entropy_coef = a.entropy_coef,
          .use_kl_loss = a.use_kl_loss,
          .kl_loss_coef = a.kl_loss_coef,
          .kl_loss_type = a.kl_loss_type,
          .use_unbiased_kl = a.use_unbiased_kl,
          .calculate_per_token_loss = b.calculate_per_token_loss,
          .use_opsm = a.use_opsm,
          .opsm_delta = a.opsm_delta};
}

}  // namespace furlong::train
