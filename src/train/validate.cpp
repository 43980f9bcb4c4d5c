#include <ATen/Context.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/dtype.h"
#include "core/error.h"
#include "core/json_util.h"
#include "core/log.h"
#include "core/strings.h"
#include "data/dynamic_filter.h"
#include "reward/rewards.h"
#include "train/agent_episode.h"
#include "train/options.h"

namespace furlong::train {

void validate_options(const TrainOptions& o, int world_size) {
  FURLONG_CHECK(o.parallel.distributed_timeout_minutes >= 1,
                "--distributed-timeout-minutes must be at least 1, got ",
                o.parallel.distributed_timeout_minutes);
  FURLONG_CHECK(o.parallel.distributed_heartbeat_timeout >= 0 &&
                    o.parallel.distributed_heartbeat_timeout <= 86400,
                "--distributed-heartbeat-timeout must be between 0 (off) and 86400 seconds, got ",
                o.parallel.distributed_heartbeat_timeout);
  FURLONG_CHECK(o.rollout.rm_max_retries >= 0 && o.rollout.rm_max_retries <= 1000,
                "--rm-max-retries must be between 0 and 1000, got ", o.rollout.rm_max_retries);
  FURLONG_CHECK(o.parallel.context_parallel_size == 1,
                "Context parallelism is not supported for the FSDP backend "
                "(--context-parallel-size ",
                o.parallel.context_parallel_size,
                "): FSDP shards parameters, not sequences. Use --context-parallel-size 1 and "
                "bound sequence memory with --max-tokens-per-gpu or --gradient-checkpointing");
  FURLONG_CHECK(o.parallel.dp_replicate_size >= 1, "--dp-replicate-size must be at least 1, got ",
                o.parallel.dp_replicate_size);
  FURLONG_CHECK(world_size % o.parallel.dp_replicate_size == 0, "--dp-replicate-size ",
                o.parallel.dp_replicate_size, " does not divide the world size ", world_size,
                ": the mesh is replicate x shard, so choose a divisor of ", world_size);
  FURLONG_CHECK(o.optimizer.optimizer == "adam", "Unsupported optimizer: ", o.optimizer.optimizer,
                ". Supported options: 'adam'");
  FURLONG_CHECK(!o.batch.use_dynamic_batch_size || o.batch.max_tokens_per_gpu.has_value(),
                "--use-dynamic-batch-size requires --max-tokens-per-gpu");
  FURLONG_CHECK(!o.batch.max_tokens_per_gpu || *o.batch.max_tokens_per_gpu > 0,
                "--max-tokens-per-gpu must be positive");
  FURLONG_CHECK(o.batch.micro_batch_size.value_or(1) >= 1, "--micro-batch-size must be at least 1");
  FURLONG_CHECK(!o.checkpoint.save_interval || o.checkpoint.save.has_value(),
                "--save-interval requires --save");
  FURLONG_CHECK(!o.checkpoint.save_interval || *o.checkpoint.save_interval > 0,
                "--save-interval must be positive");
  FURLONG_CHECK(o.optimizer.clip_grad >= 0, "--clip-grad must be >= 0");
  FURLONG_CHECK(!(o.precision.fp16 && o.precision.compute_dtype == "float32"),
                "--fp16 and --compute-dtype float32 contradict each other");
  if (o.precision.compute_dtype != "auto")
    parse_dtype(o.precision.compute_dtype, "--compute-dtype");
  if (o.batch.global_batch_size) {
    FURLONG_CHECK(*o.batch.global_batch_size > 0 && *o.batch.global_batch_size % world_size == 0,
                  "--global-batch-size ", *o.batch.global_batch_size,
                  " must be a positive multiple of the data-parallel size ", world_size);
  }
  FURLONG_CHECK(o.data.n_samples_per_prompt >= 1, "--n-samples-per-prompt must be at least 1");
  FURLONG_CHECK(o.moe.moe_aux_loss_coeff >= 0, "--moe-aux-loss-coeff must be >= 0, got ",
                o.moe.moe_aux_loss_coeff);
  FURLONG_CHECK(
      !(o.moe.use_routing_replay || o.moe.use_rollout_routing_replay) ||
          o.batch.loss_type == LossType::kPolicyLoss,
      o.moe.use_rollout_routing_replay ? "--use-rollout-routing-replay" : "--use-routing-replay",
      " needs --loss-type policy_loss: routing replay reuses the routing of a rollout "
      "(the engines' for R3, the old-policy log-prob pass's for R2), which SFT has not");
}

// The RL flags' rules (miles' appendix); errors say what to change.
namespace {

// --partial-rollout's companions and --train-async's requirements.
void validate_partial_and_async(const TrainOptions& o) {
  const auto& r = o.rollout;
  FURLONG_CHECK(!r.mask_offpolicy_in_partial_rollout || r.partial_rollout,
                "--mask-offpolicy-in-partial-rollout needs --partial-rollout");
  FURLONG_CHECK(!r.max_weight_staleness || r.partial_rollout,
                "--max-weight-staleness applies to buffered partial samples; it needs "
                "--partial-rollout");
  FURLONG_CHECK(!r.max_weight_staleness || *r.max_weight_staleness >= 0,
                "--max-weight-staleness must be >= 0, got ", r.max_weight_staleness.value_or(0));
  FURLONG_CHECK(r.update_weights_interval >= 1, "--update-weights-interval must be >= 1, got ",
                r.update_weights_interval);
  FURLONG_CHECK(r.update_weights_interval == 1 || r.train_async, "--update-weights-interval ",
                r.update_weights_interval,
                " applies to --train-async only (the synchronous loop sends the weights after "
                "every rollout); add --train-async or drop it");
  if (!r.train_async) return;
  FURLONG_CHECK(!r.colocate,
                "--train-async overlaps generation with training, so the engines need devices of "
                "their own: drop --colocate (use engine servers: --rollout-num-engines or "
                "--rollout-engine-urls)");
  const auto& d = o.debug;
  FURLONG_CHECK(!d.debug_train_only && !d.debug_rollout_only && !d.load_debug_rollout_data,
                "--train-async overlaps generation with training; it cannot run with "
                "--debug-train-only, --debug-rollout-only or --load-debug-rollout-data");
}

}  // namespace

void validate_rl_options(const TrainOptions& o) {
  const auto& a = o.algorithm;
  const auto& r = o.rollout;
  FURLONG_CHECK(o.batch.loss_type == LossType::kPolicyLoss, "internal: RL rules for --loss-type ",
                loss_type_name(o.batch.loss_type));
  FURLONG_CHECK(!(a.use_rollout_logprobs && a.use_tis),
                "--use-rollout-logprobs and --use-tis cannot be combined (TIS corrects the "
                "rollout log-probs against the trainer's; pick one)");
  rl::validate_algorithm_options(advantage_options(a), loss_options(a, o.batch));
  FURLONG_CHECK(!r.rm_type.empty() || r.rm_url || o.agent.agent_env_url,
                "RL needs a reward: set --rm-type (math, deepscaler, dapo, f1, exact_match, "
                "final_number), "
                "--rm-url, or an --agent-env-url whose env gives rewards");
  validate_agent_options(o);
  FURLONG_CHECK(!o.eval.eval_interval || !o.eval.eval_prompt_data.empty(),
                "--eval-interval needs --eval-prompt-data");
  FURLONG_CHECK(!(r.colocate && !r.rollout_engine_urls.empty()),
                "--colocate runs the engine in the training processes; drop "
                "--rollout-engine-urls (or --colocate for disaggregated engines)");
  FURLONG_CHECK(r.rollout_temperature >= 0.0, "--rollout-temperature must be >= 0");
  FURLONG_CHECK(r.rollout_max_response_len >= 1, "--rollout-max-response-len must be >= 1");
  if (o.data.rollout_batch_size) {
    data::resolve_over_sampling_batch_size(*o.data.rollout_batch_size, r.over_sampling_batch_size);
  }
  validate_partial_and_async(o);
}

}  // namespace furlong::train

namespace furlong::train {
namespace {

// Where the run's metrics go, for the lines that say so (wandb, SGLang metrics).
std::string metrics_destinations(const TrainOptions& o) {
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
void apply_miles_compat(TrainOptions& o, bool log) {
  auto& c = o.compat;
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
  FURLONG_CHECK(!on_policy || o.rollout.engine_exact_logprobs,
                "--true-on-policy-mode (and --sglang-rl-on-policy-target / "
                "--sglang-true-on-policy-contract) need the rollout log-probs to equal the "
                "trainer's, which is --engine-exact-logprobs: drop --no-engine-exact-logprobs");
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
        "inference mode; with --engine-exact-logprobs (" +
        std::string(o.rollout.engine_exact_logprobs ? "on" : "off") +
        ") the rollout log-probs are recomputed by the trainer's code path, independent of "
        "batching");
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
    FURLONG_CHECK(o.precision.compute_dtype == "auto" || o.precision.compute_dtype == "bfloat16",
                  "--bf16 and --compute-dtype ", o.precision.compute_dtype,
                  " contradict each other; pick one");
    o.precision.compute_dtype = "bfloat16";
  }
  if (c.disable_compute_advantages_and_returns) {
    FURLONG_CHECK(o.batch.loss_type == LossType::kSftLoss,
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
  reject_unavailable(c);
  apply_train_env_vars(c.train_env_vars, log);
}

// --rm-type before anything loads: a known type (with an optional boxed_ prefix).
void check_rm_type(const std::string& rm_type) {
  if (rm_type.empty()) return;
  const auto known = reward::known_reward_types();
  const std::string base = rm_type.starts_with("boxed_") ? rm_type.substr(6) : rm_type;
  if (std::find(known.begin(), known.end(), base) != known.end()) return;
  auto guess = closest_match(rm_type, known);
  FURLONG_FAIL("--rm-type ", rm_type, ": unknown reward type",
               guess ? " (did you mean " + *guess + "?)" : std::string(),
               "; known: ", join(known, ", "), " (each also as boxed_<type>)");
}

// An output file's directory must exist (a typo should not create a tree somewhere).
void check_parent_exists(const std::optional<std::string>& path, const std::string& flag) {
  if (!path) return;
  const auto parent = std::filesystem::path(*path).parent_path();
  FURLONG_CHECK(parent.empty() || std::filesystem::is_directory(parent), flag, " ", *path,
                ": the directory ", parent.string(), " does not exist; create it first");
}

void check_outputs(const LoggingOptions& l) {
  check_parent_exists(l.metrics_file, "--metrics-file");
  check_parent_exists(l.report, "--report");
  if (l.tensorboard_dir) {
    // TensorBoard's writers create their directory (as miles' SummaryWriter does).
    std::error_code ec;
    std::filesystem::create_directories(*l.tensorboard_dir, ec);
    FURLONG_CHECK(!ec && std::filesystem::is_directory(*l.tensorboard_dir), "--tensorboard-dir ",
                  *l.tensorboard_dir, ": cannot create the directory (", ec.message(), ")");
  }
}

void check_chat_template_flags(const DataOptions& d) {
  if (d.chat_template_path) {
    FURLONG_CHECK(std::filesystem::is_regular_file(*d.chat_template_path), "--chat-template-path ",
                  *d.chat_template_path, ": no such file (a Jinja chat template is expected)");
  }
  chat_template_kwargs(d);
}

}  // namespace

OrderedJson chat_template_kwargs(const DataOptions& d) {
  OrderedJson kwargs;
  try {
    kwargs = OrderedJson::parse(d.apply_chat_template_kwargs);
  } catch (const OrderedJson::exception& e) {
    FURLONG_FAIL("--apply-chat-template-kwargs: expected a JSON object, got '",
                 d.apply_chat_template_kwargs, "' (", e.what(), ")");
  }
  FURLONG_CHECK(kwargs.is_object(), "--apply-chat-template-kwargs: expected a JSON object, got ",
                d.apply_chat_template_kwargs);
  for (const char* reserved : {"messages", "add_generation_prompt"}) {
    FURLONG_CHECK(!kwargs.contains(reserved), "--apply-chat-template-kwargs: '", reserved,
                  "' is set by furlong itself and cannot be passed");
  }
  return kwargs;
}

// miles' default is one sample per micro-batch, which on a CPU makes a step several times slower
// than packing the same samples (one GEMM over many rows instead of many one-row ones). furlong
// packs by token count unless the user asks for a fixed --micro-batch-size; the loss and the
// gradients are the same either way (up to summation order).
static void resolve_micro_batching(BatchOptions& b, bool log) {
  if (b.use_dynamic_batch_size || b.micro_batch_size) return;
  b.use_dynamic_batch_size = true;
  if (!b.max_tokens_per_gpu) b.max_tokens_per_gpu = kDefaultPackedTokens;
  if (log) {
    LOG_INFO("micro-batches: packed by token count, up to ", *b.max_tokens_per_gpu,
             " tokens each (--max-tokens-per-gpu); --micro-batch-size N fixes N samples instead");
  }
}

void prepare_options_before_launch(TrainOptions& o, bool log) {
  // miles' argument validation: R3 replays through the R2 machinery, so it turns R2 on.
  if (o.moe.use_rollout_routing_replay) o.moe.use_routing_replay = true;
  apply_miles_compat(o, log);
  resolve_micro_batching(o.batch, log);
  if (o.batch.loss_type == LossType::kPolicyLoss) check_rm_type(o.rollout.rm_type);
  check_outputs(o.logging);
  check_chat_template_flags(o.data);
  if (log && o.checkpoint.save && !o.checkpoint.save_interval) {
    LOG_WARN("--save ", *o.checkpoint.save,
             " is set without --save-interval: as in miles, no checkpoint is written during or "
             "at the end of the run",
             o.checkpoint.save_trigger_sentinel
                 ? " except when --save-trigger-sentinel's file appears"
                 : "",
             "; add --save-interval N to save every N rollouts and at the last one");
  }
}

}  // namespace furlong::train
