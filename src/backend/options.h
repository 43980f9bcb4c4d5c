// Options of the training backend (backend/backend.h): the model, its parallelism and precision,
// the optimizer, micro-batching and the RL objective. The train layer fills them from the flags
// (train/options.h, backend_options()); the backend reads nothing else of the run's flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "optim/lr_scheduler.h"
#include "rl/advantages.h"
#include "rl/kl.h"
#include "rl/losses.h"

namespace furlong::backend {

// --train-backend: the implementation of the backend contract (backend/backend.h).
enum class TrainBackendKind { kFsdp };
TrainBackendKind parse_train_backend(const std::string& name);

// --loss-type: the RL objective (policy_loss) or supervised fine-tuning (sft_loss, alias sft).
enum class LossType { kPolicyLoss, kSftLoss };
LossType parse_loss_type(const std::string& name);
const char* loss_type_name(LossType type);

// How the trainer gets the old policy's log-probs (--old-logprobs). kRecompute: a forward-only
// pass over the rollout before training (miles). kAuto: that pass only where something needs
// it; when the rollout trains in one optimizer step (and no reward KL or R2 routing reads pi_old
// first), the step's own forward is the old policy's, detached: the same weights and
// micro-batches as the pass, so the same bits and the same update, one forward fewer.
enum class OldLogprobs { kAuto, kRecompute };
OldLogprobs parse_old_logprobs(const std::string& name);

struct ModelOptions {
  std::string hf_checkpoint;
  std::optional<std::string> ref_load;  // HF directory of the reference model (KL); default hf
  std::string attn_implementation = "sdpa";
  bool gradient_checkpointing = false;
  bool fused_kernels = true;
};

struct ParallelOptions {
  TrainBackendKind train_backend = TrainBackendKind::kFsdp;
  int64_t dp_replicate_size = 1;
  int64_t context_parallel_size = 1;  // must stay 1 with the FSDP backend
  std::string distributed_backend = "auto";
  int64_t distributed_timeout_minutes = 10;
  // seconds a rank's heartbeat may be silent before the job ends naming it (0 = off)
  int64_t distributed_heartbeat_timeout = 60;
  bool fsdp_prefetch = true;
  bool fsdp_reshard_after_forward = true;
};

struct PrecisionOptions {
  bool fp16 = false;  // miles' switch: compute in fp16 instead of bf16
  // furlong: auto (bf16 where native, else fp32: core/dtype.h), bfloat16, float16, or float32
  // (exact-parity runs); --fp16 wins.
  ComputeDtype compute_dtype = ComputeDtype::kAuto;
  bool keep_fp32_master = true;
  bool fsdp_cpu_offload = false;
};

// --optimizer: AdamW is the one optimizer (miles' FSDP backend has no other).
enum class OptimizerKind { kAdam };

struct OptimizerOptions {
  OptimizerKind optimizer = OptimizerKind::kAdam;
  double lr = 1e-6;
  double min_lr = 0.0;
  double lr_warmup_init = 0.0;
  optim::LrDecayStyle lr_decay_style = optim::LrDecayStyle::kConstant;
  std::optional<int64_t> lr_decay_iters;
  int64_t lr_warmup_iters = 0;
  std::optional<double> lr_warmup_fraction;
  std::optional<int64_t> lr_wsd_decay_iters;
  std::optional<optim::WsdDecayStyle> lr_wsd_decay_style;
  bool use_checkpoint_lr_scheduler = true;
  bool override_lr_scheduler = false;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-8;
  double clip_grad = 1.0;
};

// Token budget of a packed micro-batch when the user chose neither --micro-batch-size nor
// --max-tokens-per-gpu.
inline constexpr int64_t kDefaultPackedTokens = 4096;

struct BatchOptions {
  std::optional<int64_t> global_batch_size;
  // Unset (and no --use-dynamic-batch-size): micro-batches are packed by token count with
  // kDefaultPackedTokens (resolve_micro_batching). Set: that many samples per micro-batch.
  std::optional<int64_t> micro_batch_size;
  bool use_dynamic_batch_size = false;
  std::optional<int64_t> max_tokens_per_gpu;
  bool calculate_per_token_loss = false;
  bool balance_data = false;  // split a rollout over DP ranks by tokens (equal counts)
  // Samples of a micro-batch with the same prompt hold it once (models::pack_sequences), where
  // the model can (softmax attention) and no per-token MoE bookkeeping (routing replay, the
  // load-balancing loss) needs every sample's own prompt rows.
  bool pack_shared_prompts = true;
  LossType loss_type = LossType::kPolicyLoss;
};

// The RL objective (miles' algorithm flags).
struct AlgorithmOptions {
  rl::AdvantageEstimator advantage_estimator = rl::AdvantageEstimator::kGrpo;
  bool disable_rewards_normalization = false;
  bool disable_grpo_std_normalization = false;
  bool normalize_advantages = false;
  double gamma = 1.0;
  double eps_clip = 0.2;
  std::optional<double> eps_clip_high;
  std::optional<double> eps_clip_c;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.0;
  rl::KlType kl_loss_type = rl::KlType::kK1;
  bool use_unbiased_kl = false;
  double kl_coef = 0.0;
  double entropy_coef = 0.0;
  bool use_rollout_logprobs = false;
  OldLogprobs old_logprobs = OldLogprobs::kAuto;
  bool use_tis = false;
  double tis_clip = 2.0;
  double tis_clip_low = 0.0;
  bool use_opsm = false;
  double opsm_delta = 1e-4;
};

// Mixture-of-experts training (miles' flags; docs/training.md "Mixture of experts"). Checked
// against the model when the backend builds it: on a dense model each of these is an error.
struct MoeOptions {
  // R2: the old-policy log-prob forward records the trainer's own expert choices and the
  // training forwards of the same rollout replay them.
  bool use_routing_replay = false;
  // R3: the engines record the expert choices of every token (rl::Sample::routed_experts) and
  // the trainer's old-policy and training forwards replay them. Implies use_routing_replay (set
  // by prepare_options_before_launch, as miles' argument validation does).
  bool use_rollout_routing_replay = false;
  // Megatron / miles: weight of the load-balancing loss added to the training loss (0 = off).
  double moe_aux_loss_coeff = 0.0;
};

// What to do when training goes non-finite (furlong; miles has no such switch).
struct TrainingGuardOptions {
  bool skip_nonfinite_steps = false;  // else a non-finite gradient norm stops the run
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

// Everything a backend reads: the component options above, plus the few values of the run it
// needs from elsewhere (copied by train::backend_options once the run's sizes are derived).
struct BackendOptions {
  ModelOptions model;
  ParallelOptions parallel;
  PrecisionOptions precision;
  OptimizerOptions optimizer;
  BatchOptions batch;
  AlgorithmOptions algorithm;
  MoeOptions moe;
  TrainingGuardOptions training_guard;
  CheckpointOptions checkpoint;
  int64_t global_batch_size = 0;     // samples per optimizer step
  int64_t train_iters = 0;           // optimizer steps of the run (the LR schedule's length)
  int64_t n_samples_per_prompt = 1;  // the reward-normalization group size
  double rollout_temperature = 1.0;  // log-probs are those of logits / temperature
  int64_t update_weight_buffer_size = int64_t{512} << 20;  // bytes per weight-sync bucket
  bool colocate = false;  // engines live in the training ranks (every rank's sink is called)
  bool ci_test = false;   // miles' --ci-test: extra consistency checks
};

// The rl layer's views of the algorithm flags (one conversion, used by validation and training).
rl::RewardNormOptions reward_norm_options(const AlgorithmOptions& algorithm,
                                          int64_t n_samples_per_prompt);
rl::AdvantageOptions advantage_options(const AlgorithmOptions& algorithm);
rl::LossOptions loss_options(const AlgorithmOptions& algorithm, const BatchOptions& batch);

// The dtype name ("bfloat16", "float16", "float32") the trainer computes in on `device_type`
// (core/dtype.h, trainer_dtype_name), and the engine dtype of an RL run (rl_engine_dtype_name).
std::string trainer_compute_dtype_name(const PrecisionOptions& precision,
                                       const std::string& device_type);
std::string rl_engine_dtype(const PrecisionOptions& precision, const std::string& device_type);

}  // namespace furlong::backend
