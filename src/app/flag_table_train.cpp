// The flag table of `furlong train` (and `furlong launch` / `export-hf`): miles' names and
// defaults, each bound to one field of train::TrainOptions. Part of the one flag table with
// flag_table.cpp (split only to keep files short).
#include <initializer_list>
#include <utility>

#include "app/commands.h"
#include "app/flag_table_agent.h"
#include "app/flag_table_rollout.h"
#include "core/dtype.h"
#include "optim/lr_scheduler.h"

namespace furlong::app {
namespace {

void add_model_flags(config::FlagSet& f, train::ModelOptions& m, train::ParallelOptions& p) {
  f.set_group("Model and backend");
  f.add("hf-checkpoint", &m.hf_checkpoint,
        "HF model directory to train (config.json, safetensors, tokenizer)")
      .required = true;
  f.add_enum<train::TrainBackendKind>("train-backend", &p.train_backend, {"fsdp"},
                                      train::parse_train_backend, "training backend");
  f.add("attn-implementation", &m.attn_implementation,
        "attention path: sdpa (fused kernel) or eager (plain math reference); miles' "
        "flash_attention_2 / flash_attention_3 run sdpa (logged)")
      .choices = {"sdpa", "eager", "flash_attention_2", "flash_attention_3"};
  f.add("gradient-checkpointing", &m.gradient_checkpointing,
        "recompute each transformer block in backward instead of keeping its activations");
  f.add("fused-kernels", &m.fused_kernels,
        "one-pass CPU kernels for RMSNorm/RoPE/SwiGLU (off: ATen ops mirroring transformers)");
}

void add_parallel_flags(config::FlagSet& f, train::ParallelOptions& p, train::PrecisionOptions& q) {
  f.set_group("Parallelism and precision");
  f.add("dp-replicate-size", &p.dp_replicate_size,
        "HSDP replicas R: the world is R x (world/R), sharded within a replica");
  f.add("context-parallel-size", &p.context_parallel_size,
        "must be 1 with the FSDP backend (kept for miles launch scripts)");
  f.add("distributed-backend", &p.distributed_backend,
        "collectives: auto (NCCL with CUDA, else Gloo), gloo or nccl")
      .choices = {"auto", "gloo", "nccl"};
  f.add("distributed-timeout-minutes", &p.distributed_timeout_minutes,
        "a collective that does not complete in this time ends the run with an error");
  f.add("distributed-heartbeat-timeout", &p.distributed_heartbeat_timeout,
        "seconds a rank's heartbeat may be silent (stopped, hung) before the job ends naming it, "
        "instead of waiting for the collective timeout (0 = no heartbeat)");
  f.add("fsdp-prefetch", &p.fsdp_prefetch,
        "issue the next unit's all-gather before computing the current one");
  f.add("fsdp-reshard-after-forward", &p.fsdp_reshard_after_forward,
        "free each block's gathered parameters after its forward (re-gather for backward)");
  f.add("fp16", &q.fp16, "compute in fp16 instead of bf16 (no loss scaling, as miles)");
  f.add_enum<ComputeDtype>(
      "compute-dtype", &q.compute_dtype, compute_dtype_choices(), parse_compute_dtype_choice,
      "compute dtype: auto (bfloat16 where the hardware computes it natively, else float32), "
      "bfloat16, float16 or float32; --fp16 wins");
  f.add("keep-fp32-master", &q.keep_fp32_master,
        "keep fp32 master weights and optimizer state (else the checkpoint's dtype)");
  f.add("fsdp-cpu-offload", &q.fsdp_cpu_offload,
        "keep shards and optimizer state in host memory and step there (GPU runs)");
}

void add_optimizer_flags(config::FlagSet& f, train::OptimizerOptions& o) {
  f.set_group("Optimizer and learning rate");
  f.add_enum<backend::OptimizerKind>(
      "optimizer", &o.optimizer, {"adam"},
      [](const std::string&) { return backend::OptimizerKind::kAdam; },  // the choices: adam
      "only adam (AdamW) is supported");
  f.add("lr", &o.lr, "peak learning rate");
  f.add("min-lr", &o.min_lr, "learning rate floor after decay");
  f.add("lr-warmup-init", &o.lr_warmup_init, "learning rate at the start of warmup");
  f.add_enum<optim::LrDecayStyle>(
      "lr-decay-style", &o.lr_decay_style, optim::lr_decay_styles(),
      [](const std::string& name) { return optim::parse_lr_decay_style(name); },
      "decay after warmup");
  f.add("lr-decay-iters", &o.lr_decay_iters, "decay length in steps (default: the whole run)");
  f.add("lr-warmup-iters", &o.lr_warmup_iters, "warmup steps");
  f.add("lr-warmup-fraction", &o.lr_warmup_fraction,
        "warmup as a fraction of the decay steps (wins over --lr-warmup-iters)");
  f.add("lr-wsd-decay-iters", &o.lr_wsd_decay_iters, "WSD: length of the final anneal");
  f.add_enum<optim::WsdDecayStyle>(
      "lr-wsd-decay-style", &o.lr_wsd_decay_style,
      [](const std::string& name) { return optim::parse_lr_wsd_decay_style(name); },
      optim::lr_wsd_decay_style_name, "WSD: shape of the final anneal");
  f.add("use-checkpoint-lr-scheduler", &o.use_checkpoint_lr_scheduler,
        "on resume, take the LR schedule from the checkpoint");
  f.add("override-lr-scheduler", &o.override_lr_scheduler,
        "on resume, keep the LR schedule of the flags");
  f.add("weight-decay", &o.weight_decay, "AdamW decoupled weight decay (all parameters)");
  f.add("adam-beta1", &o.adam_beta1, "AdamW beta1");
  f.add("adam-beta2", &o.adam_beta2, "AdamW beta2");
  f.add("adam-eps", &o.adam_eps, "AdamW epsilon");
  f.add("clip-grad", &o.clip_grad, "global gradient-norm clipping (0 = off)");
}

void add_guard_flags(config::FlagSet& f, train::TrainingGuardOptions& g) {
  f.add("skip-nonfinite-steps", &g.skip_nonfinite_steps,
        "skip an optimizer step whose gradient norm is NaN or inf (default: stop the run "
        "naming the step); non-finite weights are never saved or synced either way");
}

void add_batch_flags(config::FlagSet& f, train::BatchOptions& b, train::DataOptions& d) {
  f.set_group("Batches and loss");
  f.add("global-batch-size", &b.global_batch_size, "samples per optimizer step (all ranks)");
  f.add("micro-batch-size", &b.micro_batch_size,
        "samples per forward/backward (default: none, micro-batches are packed by tokens)");
  f.add("use-dynamic-batch-size", &b.use_dynamic_batch_size,
        "form micro-batches by token count (needs --max-tokens-per-gpu); the default when "
        "--micro-batch-size is not given");
  f.add("max-tokens-per-gpu", &b.max_tokens_per_gpu,
        "token budget of a packed micro-batch (default 4096 when packing by default)");
  f.add("pack-shared-prompts", &b.pack_shared_prompts,
        "samples with the same prompt compute it once in every forward and backward (the "
        "trainer's and the engines' exact log-probs): same model function, fewer FLOPs; "
        "--no-pack-shared-prompts packs each sample whole");
  f.add("calculate-per-token-loss", &b.calculate_per_token_loss,
        "sum the loss over tokens instead of averaging per sample");
  f.add_enum<train::LossType>("loss-type", &b.loss_type, {"sft_loss", "sft", "policy_loss"},
                              train::parse_loss_type,
                              "policy_loss (RL) or sft_loss (alias sft: supervised fine-tuning)");
  f.add("rollout-batch-size", &d.rollout_batch_size,
        "prompts per rollout (SFT: samples per rollout; default: the global batch size)");
  f.add("n-samples-per-prompt", &d.n_samples_per_prompt, "samples generated per prompt");
  f.add("num-steps-per-rollout", &d.num_steps_per_rollout,
        "optimizer steps per rollout (derives --global-batch-size)");
  f.add("num-rollout", &d.num_rollout, "rollouts to run (default: from --num-epoch)");
  f.add("num-epoch", &d.num_epoch, "passes over the data when --num-rollout is unset");
}

void add_data_flags(config::FlagSet& f, train::DataOptions& d) {
  f.set_group("Data");
  f.add("prompt-data", &d.prompt_data, "JSONL data file");
  f.add("input-key", &d.input_key, "field holding the prompt (text or messages)");
  f.add("response-key", &d.response_key, "SFT: field holding the response text");
  f.add("label-key", &d.label_key, "field holding the reference answer");
  f.add("tool-key", &d.tool_key,
        "field holding the tools (a list, or a JSON string of one) the chat template gets");
  f.add("apply-chat-template", &d.apply_chat_template,
        "render prompts with the tokenizer's chat template");
  f.add("apply-chat-template-kwargs", &d.apply_chat_template_kwargs,
        "JSON object of extra chat-template variables, e.g. {\"enable_thinking\": false}");
  f.add("chat-template-path", &d.chat_template_path,
        "Jinja chat template file used instead of the tokenizer's (prompts and SFT samples)");
  f.add("rollout-shuffle", &d.rollout_shuffle, "shuffle the data once per epoch");
  f.add("rollout-seed", &d.rollout_seed, "seed of the data order");
  f.add("seed", &d.seed, "random seed of the run");
  f.add("max-length", &d.max_length, "SFT: drop samples longer than this many tokens (0 = keep)");
}

void add_rollout_flags(config::FlagSet& f, train::RolloutOptions& r) {
  f.set_group("Rollout (generation)");
  f.add("rollout-temperature", &r.rollout_temperature,
        "sampling temperature (the trainer scores log-probs at the same temperature)");
  f.add("rollout-top-p", &r.rollout_top_p, "nucleus sampling threshold (1 = off)");
  f.add("rollout-top-k", &r.rollout_top_k, "top-k sampling (-1 = off)");
  f.add("rollout-max-response-len", &r.rollout_max_response_len, "max new tokens per sample");
  f.add("rollout-max-context-len", &r.rollout_max_context_len,
        "cap prompt + response tokens (caps max new tokens per prompt)");
  f.add("rollout-max-prompt-len", &r.rollout_max_prompt_len,
        "drop prompts longer than this many tokens at load");
  f.add("rollout-stop", &r.rollout_stop, "stop strings");
  f.add("rollout-stop-token-ids", &r.rollout_stop_token_ids, "extra stop token ids");
  f.add("rollout-skip-special-tokens", &r.rollout_skip_special_tokens,
        "leave special tokens (e.g. eos) out of each sample's response text (multi-turn "
        "history, --rm-url and custom rewards); built-in --rm-type graders never see them");
  f.add("over-sampling-batch-size", &r.over_sampling_batch_size,
        "prompts pulled per refill with dynamic sampling (default: --rollout-batch-size)");
  f.add("dynamic-sampling-filter-path", &r.dynamic_sampling_filter_path,
        "drop finished groups: check_reward_nonzero_std (all-equal rewards) or "
        "check_no_aborted (miles' dotted paths accepted)");
  f.add("metadata-key", &r.metadata_key, "field holding per-prompt metadata");
  f.add("check-weight-update-equal", &r.check_weight_update_equal,
        "after each weight sync, check the engines hold the trainer's exact bits (digest)");
  f.add("update-weight-buffer-size", &r.update_weight_buffer_size, "bytes per weight-sync bucket");
  f.add("debug-exit-after-rollout", &r.debug_exit_after_rollout, "stop after N rollouts");
  f.set_group("Rewards");
  f.add_enum<reward::RewardType>(
      "rm-type", &r.rm_type,
      [](const std::string& name) { return reward::parse_reward_type(name, "--rm-type"); },
      reward::reward_type_name,
      "built-in reward: math, deepscaler, dapo, f1, exact_match, final_number");
  f.add("rm-url", &r.rm_url, "remote reward server (POST JSON per sample)");
  f.add("reward-key", &r.reward_key, "key to read when a reward is a dict");
  f.add("rm-timeout-seconds", &r.rm_timeout_seconds, "timeout of one remote reward request");
  f.add("rm-max-retries", &r.rm_max_retries, "retries of a failed remote reward request");
  f.set_group("Layout");
  f.add("colocate", &r.colocate,
        "run the engine inside the training processes (sleep/wake between phases)");
  f.add("rollout-num-engines", &r.rollout_num_engines,
        "disaggregated: engine servers furlong starts (ignored with --rollout-engine-urls)");
  f.add("rollout-engine-urls", &r.rollout_engine_urls,
        "disaggregated: already running `furlong serve` engines (http://host:port)");
  f.add("engine-max-total-tokens", &r.engine_max_total_tokens,
        "KV-cache capacity of each engine in tokens (0 = sized from "
        "--engine-mem-fraction-static)");
  f.add("engine-mem-fraction-static", &r.engine_mem_fraction_static,
        "each engine's --mem-fraction-static: share of memory for weights + KV cache (0 = 0.7 "
        "on CPU, 0.85 on CUDA)");
  f.add("engine-num-threads", &r.engine_num_threads,
        "CPU threads of each engine server (0 = default)");
  f.add("sglang-mem-fraction-static", &r.engine_mem_fraction_static,
        "miles' name of --engine-mem-fraction-static (the same field)");
  f.add("sglang-chunked-prefill-size", &r.engine_chunked_prefill_size,
        "each engine prefills longer prompts in chunks of this many tokens (<= 0: never)");
  f.add("sglang-decode-log-interval", &r.engine_decode_log_interval,
        "each engine logs one progress line every this many decode steps (0 = never)");
  f.add("sglang-max-total-tokens", &r.engine_max_total_tokens,
        "miles' name of --engine-max-total-tokens (the same field)");
  f.add("sglang-max-running-requests", &r.engine_max_running_requests,
        "requests each engine decodes together at most");
  f.add("sglang-max-prefill-tokens", &r.engine_max_prefill_tokens,
        "prompt tokens each engine prefills per step");
  f.add("sglang-context-length", &r.engine_context_length,
        "each engine's max prompt + generated tokens (0 = the model's max_position_embeddings)");
  f.add("sglang-disable-radix-cache", &r.engine_disable_radix_cache,
        "engines do not share the KV blocks of same-prompt requests (furlong's prefix sharing)");
  config::record_given(
      f.add("engine-exact-logprobs", &r.engine_exact_logprobs,
            "rollout log-probs from the trainer's code path on the finished sequence "
            "(bit-identical scoring; one extra prefill per sample), else from decoding; unless "
            "given, on only where the trainer uses them as pi_old (--use-rollout-logprobs, "
            "--true-on-policy-mode)"),
      &r.engine_exact_logprobs_set);
  f.add("engine-startup-timeout", &r.engine_startup_timeout,
        "seconds an engine server may take to answer /health (a server furlong started fails "
        "at once if its process exits)");
  f.add("rollout-engine-request-timeout", &r.rollout_engine_request_timeout,
        "seconds a request to an engine server may go unanswered before the run fails naming "
        "the engine (0 = no bound); a long wait is logged every 30 s (or a quarter of the bound)");
}

void add_eval_flags(config::FlagSet& f, train::EvalOptions& e) {
  f.set_group("Eval");
  f.add("eval-interval", &e.eval_interval, "evaluate every N rollouts");
  f.add("eval-prompt-data", &e.eval_prompt_data, "eval JSONL: PATH, or NAME PATH [NAME PATH...]");
  f.add("n-samples-per-eval-prompt", &e.n_samples_per_eval_prompt, "samples per eval prompt");
  f.add("eval-temperature", &e.eval_temperature, "eval temperature (default: rollout's)");
  f.add("eval-top-p", &e.eval_top_p, "eval top-p (default: rollout's)");
  f.add("eval-top-k", &e.eval_top_k, "eval top-k (default: rollout's)");
  f.add("eval-max-response-len", &e.eval_max_response_len,
        "eval max new tokens (default: rollout's)");
  f.add("skip-eval-before-train", &e.skip_eval_before_train, "no baseline eval at the start");
}

void add_algorithm_flags(config::FlagSet& f, train::AlgorithmOptions& a) {
  f.set_group("Algorithm");
  f.add_enum<rl::AdvantageEstimator>(
      "advantage-estimator", &a.advantage_estimator,
      {"grpo", "gspo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"},
      rl::parse_advantage_estimator, "advantages from rewards");
  f.add("disable-rewards-normalization", &a.disable_rewards_normalization,
        "use raw rewards (no group mean/std normalization)");
  f.add("disable-grpo-std-normalization", &a.disable_grpo_std_normalization,
        "GRPO without dividing by the group std (Dr.GRPO)");
  f.add("normalize-advantages", &a.normalize_advantages,
        "whiten advantages over the batch (required by reinforce_plus_plus*)");
  f.add("gamma", &a.gamma, "discount of reinforce_plus_plus returns");
  f.add("eps-clip", &a.eps_clip, "PPO clip range (lower)");
  f.add("eps-clip-high", &a.eps_clip_high, "PPO clip range (upper; default --eps-clip)");
  f.add("eps-clip-c", &a.eps_clip_c, "dual-clip constant (> 1) for negative advantages");
  f.add("use-kl-loss", &a.use_kl_loss, "add a KL loss to the reference model");
  f.add("kl-loss-coef", &a.kl_loss_coef, "weight of the KL loss (0 = monitor only)");
  f.add_enum<rl::KlType>(
      "kl-loss-type", &a.kl_loss_type, {"k1", "k2", "k3", "low_var_kl"},
      [](const std::string& name) { return rl::parse_kl_type(name); }, "KL estimator");
  f.add("use-unbiased-kl", &a.use_unbiased_kl,
        "weight the KL loss by the importance ratio pi/pi_old (unbiased under off-policy data)");
  f.add("kl-coef", &a.kl_coef, "reward-level KL coefficient (reinforce_plus_plus*)");
  f.add("entropy-coef", &a.entropy_coef, "entropy bonus coefficient");
  f.add("use-rollout-logprobs", &a.use_rollout_logprobs,
        "use the engine's log-probs as the old policy instead of a trainer pass");
  f.add_enum<train::OldLogprobs>(
      "old-logprobs", &a.old_logprobs, {"auto", "recompute"}, train::parse_old_logprobs,
      "auto: no old-policy pass when the rollout trains in one optimizer step (its forward, "
      "detached, gives the same bits); recompute: always run it (miles)");
  f.add("use-tis", &a.use_tis, "truncated importance sampling (rollout vs trainer log-probs)");
  f.add("tis-clip", &a.tis_clip, "upper clip of the TIS weight");
  f.add("tis-clip-low", &a.tis_clip_low, "lower clip of the TIS weight");
  f.add("use-opsm", &a.use_opsm,
        "off-policy sequence masking: drop the loss of negative-advantage tokens in samples "
        "whose mean (old - current) log-prob exceeds --opsm-delta");
  f.add("opsm-delta", &a.opsm_delta, "OPSM threshold on a sample's mean log-prob drift");
}

void add_moe_flags(config::FlagSet& f, train::MoeOptions& m) {
  f.set_group("Mixture of experts");
  f.add("use-routing-replay", &m.use_routing_replay,
        "R2: record the trainer's expert choices in the old-policy log-prob pass and replay "
        "them in the training forwards of the rollout (MoE models only)");
  f.add("use-rollout-routing-replay", &m.use_rollout_routing_replay,
        "R3: the engines record every token's experts and the trainer replays them in the "
        "old-policy and training forwards; implies --use-routing-replay (MoE models only)");
  f.add("moe-aux-loss-coeff", &m.moe_aux_loss_coeff,
        "weight of the load-balancing loss added to the training loss (0 = off, as in miles' "
        "RL recipes; MoE models only when non-zero)");
}

void add_checkpoint_flags(config::FlagSet& f, train::CheckpointOptions& c,
                          train::LoggingOptions& l) {
  f.set_group("Checkpoints and logging");
  f.add("save", &c.save, "directory for checkpoints (iter_XXXXXXX/ + tracker)");
  f.add("save-interval", &c.save_interval, "save every N rollouts (and at the last one)");
  f.add("load", &c.load, "resume from this --save directory when it holds a checkpoint");
  f.add("save-trigger-sentinel", &c.save_trigger_sentinel,
        "save after the current rollout when this file exists (then delete it)");
  f.add("save-optim", &c.save_optim, "include the optimizer state in checkpoints");
  f.add("load-optim", &c.load_optim, "restore the optimizer state on resume");
  f.add("load-rng", &c.load_rng, "restore the random number generators on resume");
  f.add("metrics-file", &l.metrics_file, "append per-step metrics to this JSONL file");
  f.add("tensorboard-dir", &l.tensorboard_dir, "write TensorBoard event files here");
  f.add("report", &l.report, "RL: write a self-contained HTML report of the run here");
  f.add("num-threads", &l.num_threads, "CPU threads per rank (0 = libtorch default)");
}

// miles flags whose mechanism furlong does not have: accepted so miles' launch scripts run as
// written; train::prepare_options_before_launch logs what is used instead, or fails naming the
// flag where its value asks for something furlong cannot do.
void add_miles_compat_flags(config::FlagSet& f, MilesCompatOptions& c) {
  f.set_group("miles compatibility (accepted, logged; see docs/training.md)");
  f.add("sglang-attention-backend", &c.sglang_attention_backend,
        "SGLang attention kernels (fa3, flashinfer, ...): the engine runs sdpa");
  f.add("sglang-enable-metrics", &c.sglang_enable_metrics,
        "SGLang's Prometheus endpoint: engine metrics go to the run's metrics instead");
  f.add("sglang-enable-deterministic-inference", &c.sglang_enable_deterministic_inference,
        "SGLang's batch-invariant kernels: see --engine-exact-logprobs");
  f.add("sglang-rl-on-policy-target", &c.sglang_rl_on_policy_target,
        "SGLang's true-on-policy target (fsdp): see --engine-exact-logprobs");
  f.add("sglang-true-on-policy-contract", &c.sglang_true_on_policy_contract,
        "SGLang's true-on-policy contract name: see --engine-exact-logprobs");
  f.add("true-on-policy-mode", &c.true_on_policy_mode,
        "rollout log-probs equal the trainer's: what --engine-exact-logprobs (on) gives");
  f.add("deterministic-mode", &c.deterministic_mode,
        "libtorch's deterministic algorithms for the trainer's kernels");
  f.add("use-fault-tolerance", &c.use_fault_tolerance,
        "miles' Ray fault tolerance: furlong ends the run on a failure; --load resumes it");
  f.add("use-wandb", &c.use_wandb,
        "furlong cannot reach wandb: metrics go to --metrics-file / --tensorboard-dir / --report");
  for (auto [name, field] : std::initializer_list<std::pair<const char*, std::string*>>{
           {"wandb-project", &c.wandb_project},
           {"wandb-group", &c.wandb_group},
           {"wandb-key", &c.wandb_key},
           {"wandb-team", &c.wandb_team},
           {"wandb-host", &c.wandb_host},
           {"wandb-mode", &c.wandb_mode},
           {"wandb-dir", &c.wandb_dir},
           {"wandb-run-id", &c.wandb_run_id}}) {
    f.add(name, field, "accepted with --use-wandb; nothing is sent");
  }
  f.add("disable-wandb-random-suffix", &c.disable_wandb_random_suffix,
        "accepted with --use-wandb; no effect");
  f.add("wandb-always-use-train-step", &c.wandb_always_use_train_step,
        "accepted; furlong logs train/* at train/step and the rest at rollout/step");
  f.add("train-env-vars", &c.train_env_vars,
        "JSON object of environment variables set in every rank before anything starts");
  f.add("update-weight-transfer-mode", &c.update_weight_transfer_mode,
        "how weights reach the engines: broadcast (furlong's only mode; p2p and disk-delta are "
        "errors)")
      .choices = {"broadcast", "p2p", "disk-delta"};
  f.add("update-weight-disk-dir", &c.update_weight_disk_dir, "disk-delta only (not available)");
  f.add("update-weight-local-checkpoint-dir", &c.update_weight_local_checkpoint_dir,
        "disk-delta only (not available)");
  f.add("ci-test", &c.ci_test,
        "miles' CI mode: turns on --check-weight-update-equal and, with routing replay, the "
        "replay check (ci/r3_mismatch_fraction <= 1%); miles' other CI assertions are not run");
  f.add("ci-disable-kl-checker", &c.ci_disable_kl_checker, "accepted with --ci-test");
  f.add("ci-disable-logprobs-checker", &c.ci_disable_logprobs_checker, "accepted with --ci-test");
  f.add("ci-disable-weight-update-checker", &c.ci_disable_weight_update_checker,
        "with --ci-test: leave --check-weight-update-equal as given");
  f.add("ci-metric-checker-key", &c.ci_metric_checker_key, "accepted; not checked");
  f.add("ci-metric-checker-threshold", &c.ci_metric_checker_threshold, "accepted; not checked");
  for (auto [name, field] :
       std::initializer_list<std::pair<const char*, std::optional<std::string>*>>{
           {"ci-save-grad-norm", &c.ci_save_grad_norm},
           {"ci-load-grad-norm", &c.ci_load_grad_norm},
           {"eval-config", &c.eval_config},
           {"custom-tis-function-path", &c.custom_tis_function_path},
           {"custom-config-path", &c.custom_config_path},
           {"rollout-function-path", &c.rollout_function_path},
           {"save-debug-event-data", &c.save_debug_event_data},
           {"multimodal-keys", &c.multimodal_keys},
           {"tis-level", &c.tis_level},
           {"rs-level", &c.rs_level},
           {"tis-mode", &c.tis_mode}}) {
    f.add(name, field, "not available in furlong: an error when given");
  }
  f.add("use-rs", &c.use_rs, "not available in furlong: an error when given");
  f.add("dump-details", &c.dump_details,
        "each rollout's samples go to DIR/rollout_data/{rollout_id}.json "
        "(--save-debug-rollout-data); miles' other dumps are not written");
  f.add("save-retain-interval", &c.save_retain_interval,
        "accepted; furlong deletes no checkpoint, so every one is retained");
  f.add("diffusion-freeze-router", &c.diffusion_freeze_router,
        "not available in furlong: an error when given");
  f.add("bf16", &c.bf16, "compute in bfloat16 (the same as --compute-dtype bfloat16)");
  f.add("disable-compute-advantages-and-returns", &c.disable_compute_advantages_and_returns,
        "SFT: accepted (SFT computes none); RL: an error (the policy loss needs advantages)");
  f.add("qkv-format", &c.qkv_format,
        "thd: furlong packs sequences (its only layout); bshd is an error, as in miles' FSDP")
      .choices = {"thd", "bshd"};
  f.add("num-gpus-per-node", &c.num_gpus_per_node,
        "miles' rollout GPUs per node: not used (engines follow --rollout-num-gpus)");
  f.add("tis-batch-normalize", &c.tis_batch_normalize,
        "not available in furlong: an error when given");
  for (auto [name, field] : std::initializer_list<std::pair<const char*, std::optional<double>*>>{
           {"tis-lower-bound", &c.tis_lower_bound},
           {"tis-upper-bound", &c.tis_upper_bound},
           {"rs-veto-threshold", &c.rs_veto_threshold},
           {"diffusion-noise-epsilon", &c.diffusion_noise_epsilon},
           {"diffusion-self-conditioning-probability", &c.diffusion_self_conditioning_probability},
           {"diffusion-encoder-loss-weight", &c.diffusion_encoder_loss_weight}}) {
    f.add(name, field, "not available in furlong: an error when given");
  }
}

}  // namespace

void register_flags(config::FlagSet& f, TrainCommandOptions& command) {
  auto& o = command.train;
  add_model_flags(f, o.model, o.parallel);
  add_parallel_flags(f, o.parallel, o.precision);
  add_optimizer_flags(f, o.optimizer);
  add_guard_flags(f, o.training_guard);
  add_batch_flags(f, o.batch, o.data);
  add_data_flags(f, o.data);
  add_rollout_flags(f, o.rollout);
  add_rollout_layout_flags(f, o.rollout);
  add_agent_flags(f, o.agent);
  add_partial_and_async_flags(f, o.rollout);
  add_eval_flags(f, o.eval);
  add_algorithm_flags(f, o.algorithm);
  add_moe_flags(f, o.moe);
  add_checkpoint_flags(f, o.checkpoint, o.logging);
  add_miles_compat_flags(f, command.compat);
  add_placement_flags(f, o.placement);
  register_migration_flags(f, o);
}

void register_flags(config::FlagSet& f, ExportHfOptions& o) {
  f.set_group("Export");
  f.add("load", &o.load, "a training run's --save directory").required = true;
  f.add("iteration", &o.iteration, "which iteration (default: the latest)");
  f.add("out", &o.out, "output directory (a HF model directory)").required = true;
  f.add("dtype", &o.dtype,
        "dtype to write (default: the trained policy's, the master cast to the compute dtype)");
}

void register_flags(config::FlagSet& f, LaunchFlags& o) {
  f.enable_yaml_config(false);
  f.set_group("Launch");
  f.add("nproc-per-node", &o.nproc_per_node, "ranks to start on this machine");
  f.add("master-addr", &o.master_addr, "rendezvous address");
  f.add("master-port", &o.master_port, "rendezvous port (0 = pick a free one)");
}

}  // namespace furlong::app
