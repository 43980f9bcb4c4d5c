#include "train/options.h"

#include "train/driver.h"

namespace furlong::train {

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

backend::BackendOptions backend_options(const TrainOptions& o) {
  return {.model = o.model,
          .parallel = o.parallel,
          .precision = o.precision,
          .optimizer = o.optimizer,
          .batch = o.batch,
          .algorithm = o.algorithm,
          .moe = o.moe,
          .training_guard = o.training_guard,
          .checkpoint = o.checkpoint,
          .global_batch_size = o.derived.global_batch_size,
          .train_iters = o.derived.train_iters,
          .n_samples_per_prompt = o.data.n_samples_per_prompt,
          .rollout_temperature = o.rollout.rollout_temperature,
          .update_weight_buffer_size = o.rollout.update_weight_buffer_size,
          .colocate = o.rollout.colocate,
          .ci_test = o.debug.ci_test};
}

rollout::RolloutConfig rollout_config(const TrainOptions& o) {
  return {.data = o.data,
          .rollout = o.rollout,
          .eval = o.eval,
          .agent = o.agent,
          .engine = {.hf_checkpoint = o.model.hf_checkpoint,
                     .attn_implementation = o.model.attn_implementation,
                     .fused_kernels = o.model.fused_kernels,
                     .fp16 = o.precision.fp16,
                     .compute_dtype = o.precision.compute_dtype,
                     .record_routing = o.moe.use_rollout_routing_replay,
                     .pack_shared_prompts = o.batch.pack_shared_prompts},
          .rollout_master_addr = o.placement.rollout_master_addr,
          .eval_samples_log = o.logging.report ? metrics_path(o) : "",
          .advantage_estimator = rl::advantage_estimator_name(o.algorithm.advantage_estimator),
          .group_normalized_rewards =
              !o.algorithm.disable_rewards_normalization &&
              o.algorithm.advantage_estimator != rl::AdvantageEstimator::kReinforcePlusPlus};
}

rl::RewardNormOptions reward_norm_options(const TrainOptions& o) {
  return backend::reward_norm_options(o.algorithm, o.data.n_samples_per_prompt);
}

}  // namespace furlong::train
