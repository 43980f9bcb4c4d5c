#include "backend/fsdp_backend.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "backend/batching.h"
#include "backend/checkpoint.h"
#include "backend/loss.h"
#include "core/device_memory.h"
#include "core/dtype.h"
#include "core/host_block_cache.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/tensor_checks.h"
#include "dist/process_group.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
#include "models/registry.h"
#include "optim/clip_grad.h"

namespace furlong::backend {
namespace {

// "auto" is bf16 where the device computes it natively, else fp32 (core/dtype.h), the rule
// the engine applies to the checkpoint's dtype.
c10::ScalarType compute_dtype(const PrecisionOptions& p, const c10::Device& device) {
  if (p.fp16) return c10::kHalf;
  std::string reason;
  auto dtype = resolve_compute_dtype(p.compute_dtype, c10::kBFloat16, device, &reason);
  LOG_INFO("trainer compute dtype: ", reason);
  return dtype;
}

optim::LrScheduleOptions lr_schedule_options(const OptimizerOptions& o) {
  return {.lr = o.lr,
          .min_lr = o.min_lr,
          .lr_warmup_init = o.lr_warmup_init,
          .lr_decay_style = o.lr_decay_style,
          .lr_decay_iters = o.lr_decay_iters,
          .lr_warmup_iters = o.lr_warmup_iters,
          .lr_warmup_fraction = o.lr_warmup_fraction,
          .lr_wsd_decay_iters = o.lr_wsd_decay_iters,
          .lr_wsd_decay_style = o.lr_wsd_decay_style,
          .use_checkpoint_lr_scheduler = o.use_checkpoint_lr_scheduler,
          .override_lr_scheduler = o.override_lr_scheduler};
}

}  // namespace

FsdpBackend::FsdpBackend(const BackendOptions& options, dist::ProcessGroups& groups)
    : options_(options), groups_(&groups) {}

FsdpBackend::~FsdpBackend() = default;

models::ForwardOptions FsdpBackend::forward_options(std::shared_ptr<models::MoeTrace> moe) const {
  return {
      .attn = models::parse_attn_impl(options_.model.attn_implementation, "--attn-implementation"),
      .activation_checkpointing = options_.model.gradient_checkpointing,
      .fused_kernels = options_.model.fused_kernels,
      .moe = std::move(moe)};
}

int64_t FsdpBackend::init() {
  mesh_ = dist::Mesh::build(*groups_, static_cast<int>(options_.parallel.dp_replicate_size));
  const auto& hf = options_.model.hf_checkpoint;
  auto model = models::create_model(models::read_hf_config(hf), hf + "/config.json");
  fsdp::FsdpOptions fsdp_options{
      .param_dtype = compute_dtype(options_.precision, groups_->device()),
      .reduce_dtype = c10::kFloat,
      .keep_fp32_master = options_.precision.keep_fp32_master,
      .reshard_after_forward = options_.parallel.fsdp_reshard_after_forward,
      .prefetch = options_.parallel.fsdp_prefetch,
      .cpu_offload = options_.precision.fsdp_cpu_offload};
  if (options_.precision.fsdp_cpu_offload && groups_->device().is_cpu() &&
      groups_->world().rank() == 0) {
    LOG_INFO(
        "--fsdp-cpu-offload: the trainer computes on the CPU, so its shards and optimizer "
        "state are in host memory already; the flag changes nothing here");
  }
  model_ =
      std::make_unique<fsdp::FsdpModel>(std::move(model), *mesh_, fsdp_options, groups_->device());
  check_moe_options();
  const auto& o = options_.optimizer;
  optimizer_ = std::make_unique<optim::AdamW>(model_->parameters(),
                                              optim::AdamWOptions{.lr = o.lr,
                                                                  .beta1 = o.adam_beta1,
                                                                  .beta2 = o.adam_beta2,
                                                                  .eps = o.adam_eps,
                                                                  .weight_decay = o.weight_decay});
  scheduler_ = std::make_unique<optim::LrScheduler>(lr_schedule_options(options_.optimizer),
                                                    options_.train_iters);

  int64_t start_rollout = 0;
  auto loaded = options_.checkpoint.load
                    ? load_checkpoint(*options_.checkpoint.load, *this, options_.checkpoint)
                    : std::nullopt;
  if (loaded) {
    start_rollout = loaded->next_rollout_id;
    global_step_ = loaded->global_step;
    loaded_driver_state_ = loaded->extra;
  } else {
    auto t0 = std::chrono::steady_clock::now();
    model_->load_hf(models::open_hf_weights(hf, model_->model().config()));
    LOG_INFO("loaded ", model_->model().config().architecture, " (",
             model_->model().num_parameters(), " parameters) from ", hf, " in ",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
             " s; sharded over ", mesh_->shard_size(), " rank(s), replicated ",
             mesh_->replicate_size(), "x");
  }
  if (policy_loss_mode() && (options_.algorithm.use_kl_loss || options_.algorithm.kl_coef != 0.0)) {
    load_reference_model();
  }
  return start_rollout;
}

std::vector<StepMetrics> FsdpBackend::train(int64_t rollout_id,
                                            const std::vector<rl::Sample>& samples) {
  FURLONG_CHECK(!asleep_, "train() called while the backend is asleep; call wake_up() first");
  current_rollout_ = rollout_id;
  auto& dp = mesh_->dp();
  std::vector<int64_t> total_lengths;
  for (const auto& s : samples) total_lengths.push_back(static_cast<int64_t>(s.tokens.size()));
  auto indices = options_.batch.balance_data
                     ? balanced_dp_shard_indices(total_lengths, dp.rank(), dp.size())
                     : dp_shard_indices(samples.size(), dp.rank(), dp.size());
  std::vector<const rl::Sample*> local;
  std::vector<int64_t> lengths;
  for (size_t i : indices) {
    local.push_back(&samples[i]);
    lengths.push_back(static_cast<int64_t>(samples[i].tokens.size()));
  }
  BatchingOptions batching{.global_batch_size = options_.global_batch_size,
                           .micro_batch_size = options_.batch.micro_batch_size.value_or(1),
                           .dynamic = options_.batch.use_dynamic_batch_size,
                           .max_tokens_per_gpu = options_.batch.max_tokens_per_gpu.value_or(0)};
  std::optional<SharedPrompts> shared;
  if (share_prompts()) {
    std::vector<std::vector<int64_t>> prompts;
    shared.emplace();
    for (const auto* s : local) {
      prompts.emplace_back(s->tokens.begin(), s->tokens.begin() + s->prompt_length());
      shared->prompt_length.push_back(s->prompt_length());
    }
    shared->prompt_id = prompt_ids(prompts);
  }
  auto plan = plan_batches(
      lengths, static_cast<int64_t>(samples.size()), dp.size(), batching,
      [&](int64_t v) { return dp.all_reduce_max(v); }, shared ? &*shared : nullptr);
  std::optional<PolicyData> policy;
  if (policy_loss_mode()) policy = prepare_policy_data(samples, indices, local, plan);
  std::optional<ProgressBar> bar;
  if (groups_->world().rank() == 0) {
    int64_t micro_batches = 0;
    for (const auto& step : plan) micro_batches += static_cast<int64_t>(step.size());
    bar.emplace("train", micro_batches, "micro-batches");
  }
  progress_ = bar ? &*bar : nullptr;
  std::vector<StepMetrics> metrics;
  for (const auto& step : plan) {
    metrics.push_back(train_step(local, step, policy ? &*policy : nullptr));
    metrics.back().values["rollout_id"] = static_cast<double>(rollout_id);
  }
  if (policy && !metrics.empty()) {
    if (policy->old_is_current) finish_old_is_current(*policy, local.size());
    for (const auto& [k, v] : policy->metrics) metrics.front().values[k] = v;
  }
  if (routing_replay() && options_.ci_test) {
    std::map<std::string, double> check;
    finish_replay_check(check);
    if (!metrics.empty()) metrics.back().values.insert(check.begin(), check.end());
  }
  if (bar) bar->finish();
  progress_ = nullptr;
  return metrics;
}

void FsdpBackend::train_micro_batch(const MicroBatch& mb, const std::vector<size_t>& items,
                                    const PolicyData* policy, std::map<std::string, double>& sums) {
  const bool replay = policy != nullptr && !policy->routing_TLK.empty();
  auto trace = make_trace(items, replay ? &policy->routing_TLK : nullptr, /*record=*/false,
                          /*collect_router_probs=*/true);
  auto out = model_->forward(mb.batch, forward_options(trace));
  if (trace && moe_observer_) moe_observer_("train_forward", items, *trace);
  const bool per_token = options_.batch.calculate_per_token_loss;
  at::Tensor scaled;
  if (mb.rows_T.numel() == 0) {
    // An empty micro-batch still runs forward and backward so the collectives line up.
    scaled = out.hidden_PD.sum() * 0.0 + out.head_VD.sum() * 0.0;
  } else {
    auto device = out.hidden_PD.device();
    auto lp = models::token_logprobs(out.hidden_PD.index_select(0, mb.rows_T.to(device)),
                                     out.head_VD, mb.targets_T.to(device),
                                     {.temperature = policy ? options_.rollout_temperature : 1.0,
                                      .with_entropy = policy != nullptr});
    auto loss = policy ? policy_loss(mb, items, lp, *policy) : sft_loss(mb, lp, per_token);
    // The load-balancing loss enters as the micro-batch's share of the step: weighted by its
    // samples (per-sample loss) or its loss tokens (per-token loss), as the policy loss is.
    if (trace) {
      const double weight = per_token ? mb.layout.loss_mask_T.sum().item<double>()
                                      : static_cast<double>(mb.num_samples());
      add_moe_loss_and_metrics(*trace, weight, loss.loss, sums);
    }
    for (const auto& [k, v] : loss.metrics) sums[k] += v;
    // FSDP averages gradients over the W ranks. Per sample: scaling by W / GBS makes the step's
    // gradient that of (1 / GBS) * sum over the step's samples of their per-sample mean loss
    // (miles). Per token (miles' FSDP backend): the micro-batch's token sum goes back unscaled,
    // so the step's gradient is that of (1 / W) * the token sum over all ranks and
    // micro-batches, not normalized by the number of tokens.
    scaled = per_token ? loss.loss
                       : loss.loss * (static_cast<double>(mesh_->world_size()) /
                                      static_cast<double>(options_.global_batch_size));
  }
  sums["count"] += per_token ? mb.layout.loss_mask_T.sum().item<double>()
                             : static_cast<double>(mb.num_samples());
  scaled.backward();
  model_->end_step();
  if (trace) {
    count_replay_check(*trace);
    if (moe_observer_) moe_observer_("train_backward", items, *trace);
  }
}

StepMetrics FsdpBackend::train_step(const std::vector<const rl::Sample*>& local,
                                    const std::vector<std::vector<size_t>>& micro_batches,
                                    const PolicyData* policy) {
  auto t0 = std::chrono::steady_clock::now();
  optimizer_->zero_grad();
  step_tokens_per_expert_.clear();
  std::map<std::string, double> sums{{"count", 0.0}, {"loss", 0.0}};
  int64_t tokens = 0;
  for (const auto& items : micro_batches) {
    std::vector<const rl::Sample*> samples;
    for (size_t i : items) {
      samples.push_back(local[i]);
      tokens += static_cast<int64_t>(local[i]->tokens.size());
    }
    train_micro_batch(pack_micro_batch(samples, share_prompts()), items, policy, sums);
    if (progress_) progress_->advance();
  }
  auto& shard_group = mesh_->dp_shard();
  double grad_norm = optim::clip_grad_norm(model_->parameters(), options_.optimizer.clip_grad,
                                           [&](double v) { return shard_group.all_reduce_sum(v); });
  // The loss before the update: every rank's micro-batch sums, over the step's count.
  auto totals = mesh_->dp().all_reduce_sum(
      std::map<std::string, double>{{"count", sums["count"]}, {"loss", sums["loss"]}});
  const double step_loss = totals["loss"] / std::max(1.0, totals["count"]);
  const bool skipped = skip_nonfinite_step(grad_norm, step_loss);
  if (skipped) {
    optimizer_->zero_grad();
  } else {
    optimizer_->options().lr = scheduler_->current_lr();
    optimizer_->step();
  }
  scheduler_->advance();
  ++global_step_;
  // miles logs the LR read after the scheduler step (the next step's LR) as train/lr-pg_0.
  const double lr = scheduler_->current_lr();

  // Metric sums over all ranks, then per-sample (or per-token) means.
  sums["tokens"] = static_cast<double>(tokens);
  sums = mesh_->dp().all_reduce_sum(std::move(sums));
  StepMetrics m;
  m.step = global_step_;
  const double count = std::max(1.0, sums["count"]);
  for (const auto& [key, total] : sums) {
    if (key != "count" && key != "tokens") m.values[key] = total / count;
  }
  m.values["tokens"] = sums["tokens"];
  m.values["grad_norm"] = grad_norm;
  m.values["lr-pg_0"] = lr;  // miles' name: the LR of parameter group 0
  if (options_.training_guard.skip_nonfinite_steps) m.values["skipped_step"] = skipped ? 1.0 : 0.0;
  if (moe_model()) finish_moe_step_metrics(m.values);
  m.values["step_time"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

bool FsdpBackend::skip_nonfinite_step(double grad_norm, double loss) {
  const bool root = groups_->world().rank() == 0;
  const int64_t step = global_step_ + 1;
  if (!std::isfinite(loss) && std::isfinite(grad_norm) && !warned_nonfinite_loss_ && root) {
    LOG_WARN("step ", step, " (rollout ", current_rollout_, "): the loss is ", loss,
             " while the gradient norm is finite (", grad_norm,
             "); training goes on (warned once)");
  }
  if (!std::isfinite(loss)) warned_nonfinite_loss_ = true;
  if (std::isfinite(grad_norm)) return false;
  // Every rank computed the same global norm, so every rank takes the same branch.
  if (options_.training_guard.skip_nonfinite_steps) {
    if (root) {
      LOG_WARN("step ", step, " (rollout ", current_rollout_, "): gradient norm ", grad_norm,
               ", loss ", loss, "; the update is skipped (--skip-nonfinite-steps)");
    }
    return true;
  }
  FURLONG_FAIL("step ", step, " (rollout ", current_rollout_, "): the gradient norm is ", grad_norm,
               " (loss ", loss,
               "); stopping before the update, so the weights and the last checkpoint stay "
               "finite. Common causes: non-finite weights in the checkpoint, a learning rate too "
               "high for --fp16 or bf16, or overflowing inputs. --skip-nonfinite-steps drops such "
               "steps instead of stopping");
}

void FsdpBackend::check_weights_finite(const std::string& what) {
  std::string first_bad;
  for (auto& unit : model_->units()) {
    const auto& shards = unit->shards();
    for (size_t i = 0; i < shards.size() && first_bad.empty(); ++i) {
      if (!all_finite(shards[i])) {
        first_bad = unit->layouts()[i].name;
      }
    }
  }
  const auto names = groups_->world().all_gather_strings(first_bad);
  for (size_t rank = 0; rank < names.size(); ++rank) {
    FURLONG_CHECK(names[rank].empty(), "refusing to ", what, ": parameter ", names[rank],
                  " holds NaN or inf values (seen on rank ", rank, ", after ", global_step_,
                  " optimizer steps). The weights are not finite, so nothing was written or sent");
  }
}

void FsdpBackend::update_weights(const WeightSink& sink) {
  check_weights_finite("sync weights to the rollout engines");
  // The engines compute in the trainer's dtype (rl_engine_dtype), and the weights are sent in
  // it: each engine then holds exactly the weights the trainer computes with (bf16 compute on
  // an fp32 checkpoint: the rounded bf16 values, half the bytes; fp32 compute on a bf16
  // checkpoint, as `auto` picks on a CPU without native bf16: the fp32 master weights, not
  // their bf16 rounding), and --check-weight-update-equal compares like with like. Only an
  // fp16 trainer (the engine has no fp16 path) sends the checkpoint's dtype.
  auto dtype = model_->model().config().dtype;
  const auto engine_dtype = rl_engine_dtype(options_.precision, groups_->device().str());
  if (engine_dtype != "auto") dtype = parse_dtype(engine_dtype, "the engine dtype");
  // Colocated engines live in every engine group's rank: each rank takes its gathered copy.
  const bool deliver = groups_->world().rank() == 0 || options_.colocate;
  const int64_t bucket_bytes = std::max<int64_t>(1, options_.update_weight_buffer_size);
  std::vector<std::pair<std::string, at::Tensor>> bucket;
  int64_t bytes = 0;
  auto flush = [&] {
    if (deliver && sink && !bucket.empty()) sink(bucket);
    bucket.clear();
    bytes = 0;
  };
  model_->for_each_full_parameter(dtype, [&](const std::string& name, const at::Tensor& t) {
    if (!deliver) return;
    bucket.emplace_back(name, t);
    bytes += static_cast<int64_t>(t.nbytes());
    if (bytes >= bucket_bytes) flush();
  });
  flush();
}

void FsdpBackend::save_model(int64_t rollout_id, const Json& driver_state) {
  FURLONG_CHECK(options_.checkpoint.save, "save_model needs --save");
  check_weights_finite("save the checkpoint of rollout " + std::to_string(rollout_id));
  save_checkpoint(*options_.checkpoint.save, rollout_id, *this, options_.checkpoint, driver_state);
}

void FsdpBackend::sleep() {
  if (asleep_) return;
  if (!groups_->device().is_cpu()) {
    model_->to(c10::kCPU);
    optimizer_->to(c10::kCPU, /*pin_memory=*/true);
    return_freed_memory(groups_->device());  // the allocator's freed blocks too
  }
  asleep_ = true;
  HostBlockCache::instance().trim();  // host blocks freed by training go back to the system
  groups_->world().barrier();
}

void FsdpBackend::wake_up() {
  if (!asleep_) return;
  if (!groups_->device().is_cpu()) {
    model_->to(groups_->device());
    optimizer_->to(groups_->device());
  }
  asleep_ = false;
  groups_->world().barrier();
}

std::unique_ptr<TrainBackend> make_backend(const BackendOptions& options,
                                           dist::ProcessGroups& groups) {
  switch (options.parallel.train_backend) {
    case TrainBackendKind::kFsdp:
      return std::make_unique<FsdpBackend>(options, groups);
  }
  FURLONG_ASSERT(false, "make_backend: unknown backend kind");
  return nullptr;
}

}  // namespace furlong::backend
