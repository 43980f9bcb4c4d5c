// Options of `furlong train`, grouped by the component that reads them. The flag table
// (src/app/flag_table_train.cpp) maps each flag, with miles' name and default, to one field
// here; choices are parsed into enums there, once. The components' structs live in the layers
// that read them (backend/options.h, rollout/options.h); backend_options() and rollout_config()
// hand each layer its own view, so that no layer below train sees TrainOptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/options.h"
#include "core/json_util.h"
#include "rollout/options.h"

namespace furlong::train {

using backend::advantage_options;
using backend::AlgorithmOptions;
using backend::BatchOptions;
using backend::CheckpointOptions;
using backend::kDefaultPackedTokens;
using backend::loss_options;
using backend::loss_type_name;
using backend::LossType;
using backend::ModelOptions;
using backend::MoeOptions;
using backend::OldLogprobs;
using backend::OptimizerOptions;
using backend::ParallelOptions;
using backend::parse_loss_type;
using backend::parse_old_logprobs;
using backend::parse_train_backend;
using backend::PrecisionOptions;
using backend::rl_engine_dtype;
using backend::TrainBackendKind;
using backend::trainer_compute_dtype_name;
using backend::TrainingGuardOptions;
using rollout::AgentOptions;
using rollout::chat_template_kwargs;
using rollout::DataOptions;
using rollout::EvalOptions;
using rollout::RolloutOptions;

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
  bool ci_test = false;  // miles' --ci-test: the backend's extra consistency checks
};
// `path_template` with every "{rollout_id}" replaced by `rollout_id`.
std::string format_debug_rollout_path(const std::string& path_template, int64_t rollout_id);

struct LoggingOptions {
  std::optional<std::string> metrics_file;  // JSONL of per-step metrics
  std::optional<std::string> tensorboard_dir;
  std::optional<std::string> report;  // HTML report written at the end (RL)
  int64_t num_threads = 0;
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
  PlacementOptions placement;
  AgentOptions agent;  // multi-turn episodes (rollout/agent_options.h)
};

// Rules that need no process group (checked before anything is built); errors name the flags
// and say what to do. `world_size` is the number of training ranks. RL runs check the RL
// rules too (validate_rl_options).
void validate_options(const TrainOptions& options, int world_size);
void validate_rl_options(const TrainOptions& options);
// The checks that need no model, data or process group, run once right after the flags are
// parsed (and miles' flags translated, app/miles_compat.h): R3 implies R2, the micro-batching
// default, the output paths (--metrics-file, --report parents exist; --tensorboard-dir is
// created), --chat-template-path, --apply-chat-template-kwargs, and the --save without
// --save-interval warning (--rm-type is checked by the flag table, which parses it), and the
// engines' exact scoring (resolve_engine_exact_logprobs). Logs only where `log` is true (the
// launch's first rank), so a line appears once per run.
void prepare_options_before_launch(TrainOptions& options, bool log);
// --engine-exact-logprobs when not given: on only where the trainer reads the rollout log-probs
// as pi_old (--use-rollout-logprobs). Elsewhere pi_old is the trainer's own forward (the old
// pass, or the step's forward detached), and the rollout log-probs feed TIS and the
// trainer-vs-engine metrics, for which decoding's own log-probs are the ones that matter; the
// re-scoring would be a forward pass over every sample that nothing reads.
void resolve_engine_exact_logprobs(TrainOptions& options, bool log);

// Each layer's view of the run's options (copies; derived sizes must be set first).
backend::BackendOptions backend_options(const TrainOptions& options);
rollout::RolloutConfig rollout_config(const TrainOptions& options);
// The rl layer's reward normalization of this run (backend::reward_norm_options).
rl::RewardNormOptions reward_norm_options(const TrainOptions& options);

}  // namespace furlong::train
