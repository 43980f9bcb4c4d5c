#include <ATen/Context.h>

#include <cstdlib>
#include <filesystem>

#include "core/dtype.h"
#include "core/error.h"
#include "core/json_util.h"
#include "core/log.h"
#include "data/dynamic_filter.h"
#include "rollout/agent_episode.h"
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
  FURLONG_CHECK(!(o.precision.fp16 && o.precision.compute_dtype == ComputeDtype::kFloat32),
                "--fp16 and --compute-dtype float32 contradict each other");
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
  FURLONG_CHECK(r.rm_type || r.rm_url || rollout::agent_rollouts(o.agent),
                "RL needs a reward: set --rm-type (math, deepscaler, dapo, f1, exact_match, "
                "final_number), "
                "--rm-url, or an --agent-env-url / --agent-harness-url that gives rewards");
  rollout::validate_agent_options(rollout_config(o));
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

void resolve_engine_exact_logprobs(TrainOptions& o, bool log) {
  auto& r = o.rollout;
  if (r.engine_exact_logprobs_set) return;
  r.engine_exact_logprobs = o.algorithm.use_rollout_logprobs;
  r.engine_exact_logprobs_set = true;
  if (log && o.batch.loss_type == LossType::kPolicyLoss) {
    LOG_INFO("--engine-exact-logprobs: ", r.engine_exact_logprobs ? "on" : "off",
             r.engine_exact_logprobs
                 ? " (--use-rollout-logprobs trains against the engines' log-probs)"
                 : " (pi_old is the trainer's own forward, so the engines keep their decoding "
                   "log-probs; --engine-exact-logprobs re-scores each sample with the trainer's "
                   "code path, which makes train_rollout_logprob_abs_diff 0)");
  }
}

void prepare_options_before_launch(TrainOptions& o, bool log) {
  // miles' argument validation: R3 replays through the R2 machinery, so it turns R2 on.
  if (o.moe.use_rollout_routing_replay) o.moe.use_routing_replay = true;
  resolve_engine_exact_logprobs(o, log);
  resolve_micro_batching(o.batch, log);
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
