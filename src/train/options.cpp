#include "train/options.h"

#include <ATen/Context.h>

#include "core/dtype.h"
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

OldLogprobs parse_old_logprobs(const std::string& name) {
  if (name == "auto") return OldLogprobs::kAuto;
  if (name == "recompute") return OldLogprobs::kRecompute;
  FURLONG_FAIL("--old-logprobs ", name, " is not supported; use auto or recompute");
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

ResolvedOffload resolve_offload(const TrainOptions& o) {
  const auto& f = o.offload;
  const bool implied = f.offload || o.rollout.colocate;
  ResolvedOffload r;
  r.train = f.offload_train_set ? f.offload_train : implied;
  r.rollout = f.offload_rollout_set ? f.offload_rollout : implied;
  if (o.precision.fsdp_cpu_offload) r.train = false;
  return r;
}

std::string format_debug_rollout_path(const std::string& path_template, int64_t rollout_id) {
  static const std::string kKey = "{rollout_id}";
  std::string out = path_template;
  for (size_t at = out.find(kKey); at != std::string::npos; at = out.find(kKey, at)) {
    const auto id = std::to_string(rollout_id);
    out.replace(at, kKey.size(), id);
    at += id.size();
  }
  return out;
}

std::string trainer_compute_dtype_name(const PrecisionOptions& p, const std::string& device_type) {
  if (p.fp16) return "float16";
  const c10::Device device(device_type.empty() ? (at::hasCUDA() ? "cuda" : "cpu") : device_type);
  return dtype_name(
      parse_compute_dtype(p.compute_dtype, c10::kBFloat16, device, "--compute-dtype"));
}

std::string rl_engine_dtype(const PrecisionOptions& p, const std::string& device_type) {
  const auto name = trainer_compute_dtype_name(p, device_type);
  return name == "float16" ? "auto" : name;  // the engine has no fp16 path
}

}  // namespace furlong::train
