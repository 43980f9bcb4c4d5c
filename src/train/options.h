// Options of `furlong train`, grouped by the component that reads them. The flag table
// (src/app/flag_table_train.cpp) maps each flag, with miles' name and default, to one field
// here; choices are parsed into enums there, once. The conversions to the rl layer's option
// structs live here too (advantage_options, loss_options, ...), so that validation and
// training read the same values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "rl/advantages.h"
#include "rl/kl.h"
#include "rl/losses.h"
#include "train/agent_options.h"

namespace furlong::train {

// --train-backend: the implementation of the backend contract (train/backend.h).
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
  // furlong: bfloat16 (default), float16, or float32 (exact-parity runs); --fp16 wins.
  std::string compute_dtype = "auto";  // bf16 where native, else fp32 (core/dtype.h)
  bool keep_fp32_master = true;
  bool fsdp_cpu_offload = false;
};

struct TrainOptions;

// miles' --offload / --offload-train / --offload-rollout, as given (resolve_offload reads them).
struct OffloadOptions {
  bool offload = false;              // both of the two below
  bool offload_train = false;        // the trainer's weights and optimizer leave the device
  bool offload_rollout = false;      // the engine releases its memory while the trainer trains
  bool offload_train_set = false;    // given on the command line / YAML (either polarity)
  bool offload_rollout_set = false;  // given on the command line / YAML (either polarity)
};
// What the offload flags mean for this run (miles): --colocate turns both on unless negated;
// --offload turns both on; --fsdp-cpu-offload turns offload_train off (its shards already live
// in host memory, so sleep / wake_up have nothing to move).
struct ResolvedOffload {
  bool train = false;
  bool rollout = false;
};
ResolvedOffload resolve_offload(const TrainOptions& options);

// miles' debug switches of the RL loop.
struct DebugOptions {
  bool debug_rollout_only = false;  // generate and grade; no training, no weight sync
  bool debug_train_only = false;    // no engines; needs --load-debug-rollout-data
  // Path template with {rollout_id}: each rollout's samples are written there (JSON).
  std::optional<std::string> save_debug_rollout_data;
  // Path template with {rollout_id}: rollouts are read from there instead of generated.
  std::optional<std::string> load_debug_rollout_data;
};
// `path_template` with every "{rollout_id}" replaced by `rollout_id`.
std::string format_debug_rollout_path(const std::string& path_template, int64_t rollout_id);

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
  LossType loss_type = LossType::kPolicyLoss;
};

struct DataOptions {
  std::string prompt_data;
  std::string input_key = "input";  // miles' default
  std::string response_key = "response";
  std::string label_key = "label";
  std::string tool_key = "tools";  // the tools handed to the chat template (miles' tool_key)
  bool apply_chat_template = false;
  // --apply-chat-template-kwargs: a JSON object of extra chat-template variables (Qwen3's
  // {"enable_thinking": false}); --chat-template-path: a Jinja file used instead of the
  // tokenizer's template.
  std::string apply_chat_template_kwargs = "{}";
  std::optional<std::string> chat_template_path;
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

// Generation of rollouts (the engine side of the loop) and their rewards.
struct RolloutOptions {
  double rollout_temperature = 1.0;
  double rollout_top_p = 1.0;
  int64_t rollout_top_k = -1;
  int64_t rollout_max_response_len = 1024;
  std::optional<int64_t> rollout_max_context_len;
  std::optional<int64_t> rollout_max_prompt_len;
  std::vector<std::string> rollout_stop;
  std::vector<int64_t> rollout_stop_token_ids;
  bool rollout_skip_special_tokens = false;  // drop special tokens from sample.response
  std::optional<int64_t> over_sampling_batch_size;
  std::string dynamic_sampling_filter_path;  // "" | check_reward_nonzero_std | check_no_aborted
  std::string metadata_key = "metadata";
  std::string rm_type;                // built-in reward (math, deepscaler, dapo, f1, ...)
  std::optional<std::string> rm_url;  // remote reward server
  std::optional<std::string> reward_key;
  double rm_timeout_seconds = 30.0;
  int64_t rm_max_retries = 3;
  // Layout: colocated (an engine inside each training process) or disaggregated (engine
  // servers, started by furlong or given by URL, weights broadcast over a process group).
  bool colocate = false;
  int64_t rollout_num_engines = 1;
  // miles' --rollout-num-gpus (unset: colocated = every training rank) and
  // --rollout-num-gpus-per-engine; train/engine_layout.h turns them into engines and ranks.
  std::optional<int64_t> rollout_num_gpus;
  int64_t rollout_num_gpus_per_engine = 1;
  std::vector<std::string> rollout_engine_urls;
  int64_t engine_max_total_tokens = 0;    // 0 = sized from engine_mem_fraction_static
  double engine_mem_fraction_static = 0;  // 0 = the engine default (0.7 CPU, 0.85 CUDA)
  int64_t engine_num_threads = 0;
  int64_t engine_chunked_prefill_size = 8192;  // --sglang-chunked-prefill-size (<= 0: never)
  int64_t engine_decode_log_interval = 40;     // --sglang-decode-log-interval (0: never)
  int64_t engine_max_running_requests = 256;   // --sglang-max-running-requests
  int64_t engine_max_prefill_tokens = 8192;    // --sglang-max-prefill-tokens (per step)
  int64_t engine_context_length = 0;           // --sglang-context-length (0: the model's)
  bool engine_disable_radix_cache = false;     // --sglang-disable-radix-cache: no prefix sharing
  double engine_startup_timeout = 300.0;       // seconds an engine server may take to be healthy
  // seconds one request to an engine server may go unanswered (0 = no bound)
  double rollout_engine_request_timeout = 1800.0;
  // Engines re-score each finished sample with the trainer's code path (rollout log-probs
  // bit-identical to the trainer's scoring of that sequence); off: decode-time log-probs.
  bool engine_exact_logprobs = true;
  bool check_weight_update_equal = false;
  int64_t update_weight_buffer_size = int64_t{512} << 20;
  std::optional<int64_t> debug_exit_after_rollout;
  // Partial rollouts (miles' --partial-rollout): groups still generating when a rollout has
  // enough are aborted into a buffer and continue in a later rollout (train/rollout_collector.h).
  bool partial_rollout = false;
  bool mask_offpolicy_in_partial_rollout = false;  // older-weight prefix gets loss mask 0
  // A buffered sample whose oldest token is more than this many versions behind the engines'
  // weights starts over from its prompt (unset: never).
  std::optional<int64_t> max_weight_staleness;
  // One-step-off-policy training (miles' train_async.py): rollout k+1 generates while rollout k
  // trains; the engines get new weights every update_weights_interval rollouts.
  bool train_async = false;
  int64_t update_weights_interval = 1;
};

struct EvalOptions {
  std::optional<int64_t> eval_interval;
  std::vector<std::string> eval_prompt_data;  // path, or name path [name path ...]
  int64_t n_samples_per_eval_prompt = 1;
  std::optional<double> eval_temperature;
  std::optional<double> eval_top_p;
  std::optional<int64_t> eval_top_k;
  std::optional<int64_t> eval_max_response_len;
  bool skip_eval_before_train = false;
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

struct LoggingOptions {
  std::optional<std::string> metrics_file;  // JSONL of per-step metrics
  std::optional<std::string> tensorboard_dir;
  std::optional<std::string> report;  // HTML report written at the end (RL)
  int64_t num_threads = 0;
};

// miles flags that furlong accepts so that miles' launch scripts run as written, although the
// mechanism they select does not exist here (SGLang/FlashAttention kernels, wandb, Ray fault
// tolerance, miles' CI checkers, Python plugins). prepare_options_before_launch() logs one line
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

// Values the driver derives from the flags and the data (not flags themselves).
struct DerivedOptions {
  int64_t global_batch_size = 0;  // samples per optimizer step
  int64_t num_rollout = 0;
  int64_t train_iters = 0;  // optimizer steps of the whole run (the LR schedule's length)
};

// Where the training ranks and the engines' weight-sync rendezvous run (src/app/cmd_train.cpp,
// dist/launch_env.h).
struct PlacementOptions {
  int64_t actor_num_nodes = 0;          // 0 = not given: the launch environment decides
  int64_t actor_num_gpus_per_node = 0;  // 0 = not given: world / nodes when launched, else 1
  // The address engines on other hosts reach this trainer at for weight sync ("" = the
  // MILES_HOST_IP variable, else this host's address on the route to the first remote engine).
  std::string rollout_master_addr;
};

struct TrainOptions {
  DerivedOptions derived;
  ModelOptions model;
  ParallelOptions parallel;
  PrecisionOptions precision;
  OffloadOptions offload;
  DebugOptions debug;
  OptimizerOptions optimizer;
  BatchOptions batch;
  DataOptions data;
  RolloutOptions rollout;
  EvalOptions eval;
  AlgorithmOptions algorithm;
  MoeOptions moe;
  TrainingGuardOptions training_guard;
  CheckpointOptions checkpoint;
  LoggingOptions logging;
  MilesCompatOptions compat;
  PlacementOptions placement;
  AgentOptions agent;  // multi-turn episodes (train/agent_options.h)
};

// Rules that need no process group (checked before anything is built); errors name the flags
// and say what to do. `world_size` is the number of training ranks. RL runs check the RL
// rules too (validate_rl_options).
void validate_options(const TrainOptions& options, int world_size);
void validate_rl_options(const TrainOptions& options);
// The checks and translations that need no model, data or process group, run once right after
// the flags are parsed: miles-compatibility flags (see MilesCompatOptions; FlashAttention names
// become sdpa, --train-env-vars is applied), --rm-type, the output paths (--metrics-file,
// --report parents exist; --tensorboard-dir is created), --chat-template-path,
// --apply-chat-template-kwargs, and the --save without --save-interval warning. Logs only where
// `log` is true (the launch's first rank), so a line appears once per run.
void prepare_options_before_launch(TrainOptions& options, bool log);
// --apply-chat-template-kwargs as a JSON object (an error naming the flag otherwise).
OrderedJson chat_template_kwargs(const DataOptions& data);

// The rl layer's views of the algorithm flags (one conversion, used by validation and training).
rl::RewardNormOptions reward_norm_options(const TrainOptions& options);
rl::AdvantageOptions advantage_options(const AlgorithmOptions& algorithm);
rl::LossOptions loss_options(const AlgorithmOptions& algorithm, const BatchOptions& batch);

// The dtype name ("bfloat16", "float16", "float32") the trainer computes in on `device_type`
// ("cpu", "cuda"; "" = cuda when present, else cpu, the engine's default): --fp16, else
// --compute-dtype with auto = bf16 where native, else fp32. RL engines compute in it too, so
// trainer and engine log-probs come from the same arithmetic.
std::string trainer_compute_dtype_name(const PrecisionOptions& precision,
                                       const std::string& device_type);
// The engine dtype of an RL run: the trainer's, except with --fp16 (the engine computes in
// bf16 or fp32 only), where the engine's own default stays.
std::string rl_engine_dtype(const PrecisionOptions& precision, const std::string& device_type);

}  // namespace furlong::train
