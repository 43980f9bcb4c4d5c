#include "backend/options.h"

#include "core/dtype.h"
#include "core/error.h"

namespace furlong::backend {

TrainBackendKind parse_train_backend(const std::string& name) {
  if (name == "fsdp") return TrainBackendKind::kFsdp;
  FURLONG_FAIL("--train-backend ", name, " is not available: furlong implements the fsdp backend");
}

LossType parse_loss_type(const std::string& name) {
  if (name == "policy_loss") return LossType::kPolicyLoss;
  if (name == "sft_loss" || name == "sft") return LossType::kSftLoss;
  FURLONG_FAIL("--loss-type ", name, " is not supported; use sft_loss (alias sft) or policy_loss");
}

OldLogprobs parse_old_logprobs(const std::string& name) {
  if (name == "auto") return OldLogprobs::kAuto;
  if (name == "recompute") return OldLogprobs::kRecompute;
  FURLONG_FAIL("--old-logprobs ", name, " is not supported; use auto or recompute");
}

const char* loss_type_name(LossType type) {
  return type == LossType::kPolicyLoss ? "policy_loss" : "sft_loss";
}

rl::RewardNormOptions reward_norm_options(const AlgorithmOptions& a, int64_t n_samples_per_prompt) {
  return {.estimator = a.advantage_estimator,
          .rewards_normalization = !a.disable_rewards_normalization,
          .grpo_std_normalization = !a.disable_grpo_std_normalization,
          .n_samples_per_prompt = n_samples_per_prompt};
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

std::string trainer_compute_dtype_name(const PrecisionOptions& p, const std::string& device_type) {
  return trainer_dtype_name(p.fp16, p.compute_dtype, device_type);
}

std::string rl_engine_dtype(const PrecisionOptions& p, const std::string& device_type) {
  return rl_engine_dtype_name(p.fp16, p.compute_dtype, device_type);
}

}  // namespace furlong::backend
