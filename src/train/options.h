// Options of `furlong train`, grouped by the component that reads them. The flag table
// (src/app/flag_table.cpp) maps each flag, with miles' name and default, to one field here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace furlong::train {

struct ModelOptions {
  std::string hf_checkpoint;
  std::string attn_implementation = "sdpa";
  bool gradient_checkpointing = false;
  bool fused_kernels = true;
};

struct ParallelOptions {
  std::string train_backend = "fsdp";
  int64_t dp_replicate_size = 1;
  int64_t context_parallel_size = 1;  // must stay 1 with the FSDP backend
  std::string distributed_backend = "auto";
  int64_t distributed_timeout_minutes = 10;
  bool fsdp_prefetch = true;
  bool fsdp_reshard_after_forward = true;
};

struct PrecisionOptions {
  bool fp16 = false;  // miles' switch: compute in fp16 instead of bf16
  // furlong: bfloat16 (default), float16, or float32 (exact-parity runs); --fp16 wins.
  std::string compute_dtype = "bfloat16";
  bool keep_fp32_master = true;
  bool fsdp_cpu_offload = false;
};

struct OptimizerOptions {
  std::string optimizer = "adam";
  double lr = 1e-6;
  double min_lr = 0.0;
  double lr_warmup_init = 0.0;
  std::string lr_decay_style = "constant";
  std::optional<int64_t> lr_decay_iters;
  int64_t lr_warmup_iters = 0;
  std::optional<double> lr_warmup_fraction;
  std::optional<int64_t> lr_wsd_decay_iters;
  std::optional<std::string> lr_wsd_decay_style;
  bool use_checkpoint_lr_scheduler = true;
  bool override_lr_scheduler = false;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  double clip_grad = 1.0;
};

struct BatchOptions {
  std::optional<int64_t> global_batch_size;
  int64_t micro_batch_size = 1;
  bool use_dynamic_batch_size = false;
  std::optional<int64_t> max_tokens_per_gpu;
  bool calculate_per_token_loss = false;
  std::string loss_type = "policy_loss";  // policy_loss | sft_loss (alias: sft)
};

struct DataOptions {
  std::string prompt_data;
  std::string input_key = "prompt";
  std::string response_key = "response";
  std::string label_key = "label";
  bool apply_chat_template = false;
  std::optional<int64_t> rollout_batch_size;
  int64_t n_samples_per_prompt = 1;
  std::optional<int64_t> num_steps_per_rollout;
  std::optional<int64_t> num_rollout;
  std::optional<int64_t> num_epoch;
  bool rollout_shuffle = false;
  int64_t rollout_seed = 42;
  int64_t seed = 1234;
  int64_t max_length = 0;
};

struct CheckpointOptions {
  std::optional<std::string> save;
  std::optional<int64_t> save_interval;
  std::optional<std::string> load;
  std::optional<std::string> save_trigger_sentinel;
  bool save_optim = true;  // --no-save-optim
  bool load_optim = true;  // --no-load-optim
  bool load_rng = true;    // --no-load-rng
};

struct LoggingOptions {
  std::optional<std::string> metrics_file;  // JSONL of per-step metrics
  int64_t num_threads = 0;
};

// Values the driver derives from the flags and the data (not flags themselves).
struct DerivedOptions {
  int64_t global_batch_size = 0;  // samples per optimizer step
  int64_t num_rollout = 0;
  int64_t train_iters = 0;  // optimizer steps of the whole run (the LR schedule's length)
};

struct TrainOptions {
  DerivedOptions derived;
  ModelOptions model;
  ParallelOptions parallel;
  PrecisionOptions precision;
  OptimizerOptions optimizer;
  BatchOptions batch;
  DataOptions data;
  CheckpointOptions checkpoint;
  LoggingOptions logging;
};

// Rules that need no process group (checked before anything is built); errors name the flags
// and say what to do. `world_size` is the number of training ranks.
void validate_options(const TrainOptions& options, int world_size);

}  // namespace furlong::train
