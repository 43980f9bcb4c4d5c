#include "app/miles_compat.h"

#include <cstdlib>

#include "core/dtype.h"
#include "core/error.h"
#include "core/json_util.h"
#include "core/log.h"
#include "core/strings.h"

namespace furlong::app {
namespace {

// Where the run's metrics go, for the lines that say so (wandb, SGLang metrics).
std::string metrics_destinations(const train::TrainOptions& o) {
  std::vector<std::string> where;
  if (o.logging.metrics_file) where.push_back("--metrics-file " + *o.logging.metrics_file);
  if (o.logging.report) {
    where.push_back("--report " + *o.logging.report + " (its data in " + *o.logging.report +
                    ".metrics.jsonl)");
  }
  if (o.logging.tensorboard_dir) where.push_back("--tensorboard-dir " + *o.logging.tensorboard_dir);
  if (where.empty())
    return "the console only (add --metrics-file or --tensorboard-dir to keep them)";
  return join(where, ", ");
}

// Flags that ask for a mechanism furlong does not have and would change the run: errors.
void reject_unavailable(const MilesCompatOptions& c) {
  auto fail_if = [](bool given, const std::string& flag, const std::string& why) {
    FURLONG_CHECK(!given, flag, " is not available in furlong: ", why);
  };
  const std::string mis =
      "it is an option of miles' Python mis.py (--custom-tis-function-path), which furlong cannot "
      "load; furlong's built-in truncated importance sampling is --use-tis with --tis-clip / "
      "--tis-clip-low";
  fail_if(c.custom_tis_function_path.has_value(), "--custom-tis-function-path",
          "furlong cannot load Python functions; its built-in truncated importance sampling is "
          "--use-tis with --tis-clip / --tis-clip-low");
  fail_if(c.custom_config_path.has_value(), "--custom-config-path",
          "it configures miles' Python plugin functions, which furlong cannot load");
  fail_if(c.use_rs, "--use-rs", mis);
  fail_if(c.tis_batch_normalize, "--tis-batch-normalize", mis);
  fail_if(c.tis_level.has_value(), "--tis-level", mis);
  fail_if(c.rs_level.has_value(), "--rs-level", mis);
  fail_if(c.tis_mode.has_value(), "--tis-mode", mis);
  fail_if(c.tis_lower_bound.has_value(), "--tis-lower-bound", mis);
  fail_if(c.tis_upper_bound.has_value(), "--tis-upper-bound", mis);
  fail_if(c.rs_veto_threshold.has_value(), "--rs-veto-threshold", mis);
  fail_if(c.multimodal_keys.has_value(), "--multimodal-keys",
          "furlong trains text-only models; drop the flag and use text prompts");
  fail_if(c.eval_config.has_value(), "--eval-config",
          "give the eval sets as --eval-prompt-data NAME PATH [NAME PATH ...] with "
          "--n-samples-per-eval-prompt / --eval-max-response-len / --eval-top-p");
  fail_if(c.ci_save_grad_norm.has_value(), "--ci-save-grad-norm",
          "furlong does not write miles' grad-norm comparison files (train/grad_norm is in the "
          "run's metrics)");
  fail_if(c.ci_load_grad_norm.has_value(), "--ci-load-grad-norm",
          "furlong does not compare against miles' grad-norm files");
  fail_if(c.rollout_function_path.has_value(), "--rollout-function-path",
          "furlong cannot load Python rollout functions; its rollout is the built-in one");
  fail_if(c.save_debug_event_data.has_value(), "--save-debug-event-data",
          "furlong writes no audit event log; --metrics-file keeps every step's metrics");
  const std::string diffusion =
      "DiffusionGemma block-diffusion training is not available in furlong (causal LMs only)";
  fail_if(c.diffusion_freeze_router, "--diffusion-freeze-router", diffusion);
  fail_if(c.diffusion_noise_epsilon.has_value(), "--diffusion-noise-epsilon", diffusion);
  fail_if(c.diffusion_self_conditioning_probability.has_value(),
          "--diffusion-self-conditioning-probability", diffusion);
  fail_if(c.diffusion_encoder_loss_weight.has_value(), "--diffusion-encoder-loss-weight",
          diffusion);
  fail_if(c.qkv_format == "bshd", "--qkv-format bshd",
          "furlong packs sequences (thd), and miles' FSDP backend rejects bshd too");
  FURLONG_CHECK(c.update_weight_transfer_mode == "broadcast", "--update-weight-transfer-mode ",
                c.update_weight_transfer_mode,
                " is not available in furlong: weights reach the engines in-process (--colocate) "
                "or by a broadcast over a process group; use broadcast");
}

// --train-env-vars: a JSON object; each value (a string, number or bool) is set in this
// process's environment, which every rank, engine and child process then inherits.
void apply_train_env_vars(const std::string& text, bool log) {
  Json vars;
  try {
    vars = Json::parse(text);
  } catch (const Json::exception& e) {
    FURLONG_FAIL("--train-env-vars: expected a JSON object, got '", text, "' (", e.what(), ")");
  }
  FURLONG_CHECK(vars.is_object(), "--train-env-vars: expected a JSON object, got ", text);
  std::vector<std::string> names;
  for (const auto& [name, value] : vars.items()) {
    FURLONG_CHECK(value.is_string() || value.is_number() || value.is_boolean(),
                  "--train-env-vars: the value of ", name, " must be a string, number or bool");
    FURLONG_CHECK(!name.empty() && name.find('=') == std::string::npos, "--train-env-vars: '", name,
                  "' is not a valid variable name");
    const std::string v = value.is_string() ? value.get<std::string>() : value.dump();
    ::setenv(name.c_str(), v.c_str(), /*overwrite=*/1);
    names.push_back(name + "=" + v);
  }
  if (log && !names.empty()) LOG_INFO("--train-env-vars: set ", join(names, " "));
}

// The one line per substituted miles flag (only where `log`), and the translations they imply.
void apply_translations(const MilesCompatOptions& c, train::TrainOptions& o, bool log) {
  auto note = [log](const std::string& line) {
    if (log) LOG_INFO(line);
  };
  auto& attn = o.model.attn_implementation;
  if (attn == "flash_attention_2" || attn == "flash_attention_3") {
    note("--attn-implementation " + attn +
         ": furlong has no FlashAttention kernels; the trainer and the engines use sdpa "
         "(libtorch's fused scaled-dot-product attention) instead");
    attn = "sdpa";
  }
  if (!c.sglang_attention_backend.empty()) {
    note("--sglang-attention-backend " + c.sglang_attention_backend +
         ": furlong's engine has no SGLang attention backends; it runs the trainer's attention "
         "path (--attn-implementation " +
         attn + ")");
  }
  if (c.sglang_enable_metrics) {
    note(
        "--sglang-enable-metrics: furlong's engine serves no Prometheus endpoint; its rollout "
        "metrics go to " +
        metrics_destinations(o));
  }
  const bool on_policy = c.true_on_policy_mode || !c.sglang_rl_on_policy_target.empty() ||
                         !c.sglang_true_on_policy_contract.empty();
  FURLONG_CHECK(
      !on_policy || o.rollout.engine_exact_logprobs || !o.rollout.engine_exact_logprobs_set,
      "--true-on-policy-mode (and --sglang-rl-on-policy-target / "
      "--sglang-true-on-policy-contract) need the rollout log-probs to equal the "
      "trainer's, which is --engine-exact-logprobs: drop --no-engine-exact-logprobs");
  if (on_policy) o.rollout.engine_exact_logprobs = o.rollout.engine_exact_logprobs_set = true;
  const std::string exact =
      ": furlong's rollout log-probs come from the trainer's own code path "
      "(--engine-exact-logprobs, on), bit-identical to the trainer's recomputation";
  if (c.true_on_policy_mode) note("--true-on-policy-mode" + exact);
  if (!c.sglang_rl_on_policy_target.empty())
    note("--sglang-rl-on-policy-target " + c.sglang_rl_on_policy_target + exact);
  if (!c.sglang_true_on_policy_contract.empty())
    note("--sglang-true-on-policy-contract " + c.sglang_true_on_policy_contract + exact);
  if (c.sglang_enable_deterministic_inference) {
    note(
        "--sglang-enable-deterministic-inference: furlong has no separate deterministic "
        "inference mode; with --engine-exact-logprobs the rollout log-probs are recomputed by "
        "the trainer's code path, independent of batching");
  }
  if (c.deterministic_mode) {
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    note("--deterministic-mode: libtorch's deterministic algorithms are on for the trainer");
  }
  if (c.dump_details) {
    if (!o.debug.save_debug_rollout_data)
      o.debug.save_debug_rollout_data = *c.dump_details + "/rollout_data/{rollout_id}.json";
    note("--dump-details " + *c.dump_details + ": furlong writes each rollout's samples to " +
         *o.debug.save_debug_rollout_data +
         " (--save-debug-rollout-data, JSON); miles' train-data, trajectory and event dumps are "
         "not written");
  }
  if (c.save_retain_interval) {
    note("--save-retain-interval " + std::to_string(*c.save_retain_interval) +
         ": furlong deletes no checkpoint; every one under --save is kept");
  }
  if (c.use_fault_tolerance) {
    note(
        "--use-fault-tolerance: furlong has no fault-tolerance controller; a failed rank or "
        "engine ends the run with an error naming it, and --load resumes from the last "
        "checkpoint under --save");
  }
  if (c.use_wandb) {
    std::string run = c.wandb_project.empty()
                          ? ""
                          : " (project " + c.wandb_project +
                                (c.wandb_group.empty() ? "" : ", group " + c.wandb_group) + ")";
    note("--use-wandb: furlong cannot reach a wandb server" + run + "; metrics go to " +
         metrics_destinations(o));
  }
  o.debug.ci_test = c.ci_test;
  if (c.ci_test && !c.ci_disable_weight_update_checker) o.rollout.check_weight_update_equal = true;
  if (c.ci_test) {
    note(std::string("--ci-test: furlong checks the engines' weights after every sync (") +
         (o.rollout.check_weight_update_equal ? "--check-weight-update-equal on" : "off") +
         "), and with routing replay that at most 1% of the replayed tokens share no expert with "
         "the trainer's free top-k (ci/r3_mismatch_fraction); miles' CI log-prob, KL and metric "
         "assertions are not run");
  }
  if (c.ci_metric_checker_key) {
    note("--ci-metric-checker-key " + *c.ci_metric_checker_key +
         ": not checked by furlong; the value is in the run's metrics");
  }
  if (c.bf16) {
    FURLONG_CHECK(!o.precision.fp16, "--bf16 and --fp16 contradict each other; pick one");
    const ComputeDtype dtype = o.precision.compute_dtype;
    FURLONG_CHECK(dtype == ComputeDtype::kAuto || dtype == ComputeDtype::kBfloat16,
                  "--bf16 and --compute-dtype ", compute_dtype_name(dtype),
                  " contradict each other; pick one");
    o.precision.compute_dtype = ComputeDtype::kBfloat16;
  }
  if (c.disable_compute_advantages_and_returns) {
    FURLONG_CHECK(o.batch.loss_type == train::LossType::kSftLoss,
                  "--disable-compute-advantages-and-returns is not available with --loss-type "
                  "policy_loss: the policy loss needs advantages (miles uses it for SFT and "
                  "custom losses)");
    note("--disable-compute-advantages-and-returns: SFT computes no advantages; nothing to do");
  }
  if (c.num_gpus_per_node) {
    note("--num-gpus-per-node " + std::to_string(*c.num_gpus_per_node) +
         ": not used by furlong; engines are laid out by --rollout-num-gpus and "
         "--rollout-num-gpus-per-engine");
  }
}

}  // namespace

void apply_miles_compat(const MilesCompatOptions& compat, train::TrainOptions& options, bool log) {
  apply_translations(compat, options, log);
  reject_unavailable(compat);
  apply_train_env_vars(compat.train_env_vars, log);
}

}  // namespace furlong::app
