#include "core/dtype.h"
#include "core/error.h"
#include "data/dynamic_filter.h"
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
  FURLONG_CHECK(o.batch.micro_batch_size >= 1, "--micro-batch-size must be at least 1");
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
}

// The RL flags' rules (miles' appendix); errors say what to change.
void validate_rl_options(const TrainOptions& o) {
  const auto& a = o.algorithm;
  const auto& r = o.rollout;
  FURLONG_CHECK(o.batch.loss_type == LossType::kPolicyLoss, "internal: RL rules for --loss-type ",
                loss_type_name(o.batch.loss_type));
  FURLONG_CHECK(!(a.use_rollout_logprobs && a.use_tis),
                "--use-rollout-logprobs and --use-tis cannot be combined (TIS corrects the "
                "rollout log-probs against the trainer's; pick one)");
  rl::validate_algorithm_options(advantage_options(a), loss_options(a, o.batch));
  FURLONG_CHECK(!r.rm_type.empty() || r.rm_url,
                "RL needs a reward: set --rm-type (math, deepscaler, dapo, f1, exact_match) or "
                "--rm-url");
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
}

}  // namespace furlong::train
