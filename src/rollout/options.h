// Options of the rollout layer: the prompt data, generation and rewards, evaluation, agent
// episodes, and the model the engines serve. The train layer fills them from the flags
// (train/options.h, rollout_config()); the rollout layer reads nothing else of the run's flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/json_util.h"
#include "reward/reward_type.h"
#include "rollout/agent_options.h"

namespace furlong::rollout {

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
  std::optional<reward::RewardType> rm_type;  // built-in reward (math, deepscaler, dapo, f1, ...)
  std::optional<std::string> rm_url;          // remote reward server
  std::optional<std::string> reward_key;
  double rm_timeout_seconds = 30.0;
  int64_t rm_max_retries = 3;
  // Layout: colocated (an engine inside each training process) or disaggregated (engine
  // servers, started by furlong or given by URL, weights broadcast over a process group).
  bool colocate = false;
  int64_t rollout_num_engines = 1;
  // miles' --rollout-num-gpus (unset: colocated = every training rank) and
  // --rollout-num-gpus-per-engine; rollout/engine_layout.h turns them into engines and ranks.
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
  // Unless given (engine_exact_logprobs_set), `furlong train` turns it on only where the trainer
  // reads the rollout log-probs as pi_old (train::resolve_engine_exact_logprobs).
  bool engine_exact_logprobs = false;
  bool engine_exact_logprobs_set = false;
  bool check_weight_update_equal = false;
  int64_t update_weight_buffer_size = int64_t{512} << 20;
  std::optional<int64_t> debug_exit_after_rollout;
  // Partial rollouts (miles' --partial-rollout): groups still generating when a rollout has
  // enough are aborted into a buffer and continue in a later rollout (rollout/rollout_collector.h).
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

// The model the engines serve and how they compute (from the model and precision flags).
struct EngineModelOptions {
  std::string hf_checkpoint;  // the HF directory the engines load
  std::string attn_implementation = "sdpa";
  bool fused_kernels = true;
  bool fp16 = false;  // --fp16 (the engine keeps its own default dtype then)
  // --compute-dtype: the trainer's, so the engines' too
  ComputeDtype compute_dtype = ComputeDtype::kAuto;
  bool record_routing = false;      // R3: the engines record every token's experts
  bool pack_shared_prompts = true;  // --pack-shared-prompts, for the exact log-prob pass
  // The engine dtype on `device_type` ("" = cuda when present, else cpu): the trainer's compute
  // dtype (core/dtype.h, rl_engine_dtype_name).
  std::string dtype(const std::string& device_type) const;
};

// Everything the rollout layer reads.
struct RolloutConfig {
  DataOptions data;
  RolloutOptions rollout;
  EvalOptions eval;
  AgentOptions agent;
  EngineModelOptions engine;
  std::string rollout_master_addr;  // where engines on other hosts reach the trainer ("" = auto)
  std::string eval_samples_log;     // JSONL that eval sample tables go to ("" = none)
  // How rewards become advantages (named by the zero-reward-spread warning).
  std::string advantage_estimator = "grpo";
  bool group_normalized_rewards = true;
};

// --apply-chat-template-kwargs as a JSON object (an error naming the flag otherwise).
OrderedJson chat_template_kwargs(const DataOptions& data);

}  // namespace furlong::rollout
