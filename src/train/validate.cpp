#include "core/dtype.h"
#include "core/error.h"
#include "train/options.h"

namespace furlong::train {

void validate_options(const TrainOptions& o, int world_size) {
  FURLONG_CHECK(o.parallel.train_backend == "fsdp", "--train-backend ", o.parallel.train_backend,
                " is not available: furlong implements the fsdp backend");
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
  FURLONG_CHECK(o.batch.loss_type == "sft_loss" || o.batch.loss_type == "sft" ||
                    o.batch.loss_type == "policy_loss",
                "--loss-type ", o.batch.loss_type,
                " is not supported; use sft_loss (alias sft) "
                "or policy_loss");
  FURLONG_CHECK(!o.checkpoint.save_interval || o.checkpoint.save.has_value(),
                "--save-interval requires --save");
  FURLONG_CHECK(!o.checkpoint.save_interval || *o.checkpoint.save_interval > 0,
                "--save-interval must be positive");
  FURLONG_CHECK(o.optimizer.clip_grad >= 0, "--clip-grad must be >= 0");
  FURLONG_CHECK(!(o.precision.fp16 && o.precision.compute_dtype == "float32"),
                "--fp16 and --compute-dtype float32 contradict each other");
  parse_dtype(o.precision.compute_dtype, "--compute-dtype");
  if (o.batch.global_batch_size) {
    FURLONG_CHECK(*o.batch.global_batch_size > 0 && *o.batch.global_batch_size % world_size == 0,
                  "--global-batch-size ", *o.batch.global_batch_size,
                  " must be a positive multiple of the data-parallel size ", world_size);
  }
  FURLONG_CHECK(o.data.n_samples_per_prompt >= 1, "--n-samples-per-prompt must be at least 1");
}

}  // namespace furlong::train
