// miles' flags that furlong accepts without having the mechanism they select: a command-line
// translation, kept in the app layer so that the training layers see only furlong's options.
#pragma once

#include <optional>
#include <string>

#include "train/options.h"

namespace furlong::app {

// miles flags that furlong accepts so that miles' launch scripts run as written, although the
// mechanism they select does not exist here (SGLang/FlashAttention kernels, wandb, Ray fault
// tolerance, miles' CI checkers, Python plugins). apply_miles_compat() logs one line
// per flag given, naming what furlong does instead, or fails naming the flag when its value
// asks for behaviour furlong lacks.
struct MilesCompatOptions {
  std::string sglang_attention_backend;  // any SGLang backend name: the engine runs sdpa
  bool sglang_enable_metrics = false;
  bool sglang_enable_deterministic_inference = false;
  std::string sglang_rl_on_policy_target;
  std::string sglang_true_on_policy_contract;
  bool true_on_policy_mode = false;
  bool deterministic_mode = false;
  bool use_fault_tolerance = false;
  bool use_wandb = false;
  std::string wandb_project, wandb_group, wandb_key, wandb_team, wandb_host, wandb_mode, wandb_dir,
      wandb_run_id;
  bool disable_wandb_random_suffix = false;
  bool wandb_always_use_train_step = false;
  std::string train_env_vars = "{}";  // JSON object: set in the environment before anything
  std::string update_weight_transfer_mode = "broadcast";
  std::optional<std::string> update_weight_disk_dir;
  std::optional<std::string> update_weight_local_checkpoint_dir;
  bool ci_test = false;
  bool ci_disable_kl_checker = false;
  bool ci_disable_logprobs_checker = false;
  bool ci_disable_weight_update_checker = false;
  std::optional<std::string> ci_metric_checker_key;
  std::optional<double> ci_metric_checker_threshold;
  // Given: an error (furlong cannot do what they ask).
  std::optional<std::string> ci_save_grad_norm, ci_load_grad_norm, custom_tis_function_path,
      custom_config_path, multimodal_keys, eval_config;
  // --dump-details DIR: the rollouts go to DIR/rollout_data/{rollout_id}.json
  // (--save-debug-rollout-data); miles' other dumps are not written.
  std::optional<std::string> dump_details;
  std::optional<int64_t> save_retain_interval;  // furlong deletes no checkpoint
  bool use_rs = false, tis_batch_normalize = false, diffusion_freeze_router = false;
  std::optional<std::string> rollout_function_path, save_debug_event_data;
  std::optional<double> diffusion_noise_epsilon, diffusion_self_conditioning_probability,
      diffusion_encoder_loss_weight;
  bool bf16 = false;  // compute in bf16 (--compute-dtype bfloat16)
  bool disable_compute_advantages_and_returns = false;  // SFT: nothing to disable; RL: an error
  std::string qkv_format = "thd";            // furlong packs sequences (thd); bshd is an error
  std::optional<int64_t> num_gpus_per_node;  // miles' rollout GPUs per node: not used
  std::optional<std::string> tis_level, rs_level, tis_mode;
  std::optional<double> tis_lower_bound, tis_upper_bound, rs_veto_threshold;
};

// `furlong train`'s options: the run's, plus the miles flags translated into them.
struct TrainCommandOptions {
  train::TrainOptions train;
  MilesCompatOptions compat;
};

// The one line per substituted miles flag (only where `log`), the translations they imply
// (FlashAttention names become sdpa, --bf16, --dump-details, --ci-test, ...) and the errors for
// flags whose behaviour furlong lacks; --train-env-vars is applied to this process's environment.
void apply_miles_compat(const MilesCompatOptions& compat, train::TrainOptions& options, bool log);

}  // namespace furlong::app
