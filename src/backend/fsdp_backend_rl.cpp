// The RL side of the FSDP backend (--loss-type policy_loss): per rollout, the forward-only
// passes that give the old-policy and reference log-probs, the advantages, and per
// micro-batch the policy loss (PPO clip, TIS, entropy, KL to the reference).
//
// Invariant that makes the first step's ppo_kl exactly 0: the old-policy pass packs the same
// micro-batches as training (the same plan) and computes log-probs with the same call, so
// before the first optimizer step of a rollout both passes see identical inputs and weights.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "backend/fsdp_backend.h"
#include "core/log.h"
#include "dist/process_group.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/registry.h"
#include "rl/advantages.h"
#include "rl/kl.h"
#include "rl/layout.h"
#include "rl/losses.h"

namespace furlong::backend {
namespace {

// Sum over samples of each sample's masked mean of its per-token values (for metrics).
double sum_of_masked_means(const std::vector<at::Tensor>& per_sample,
                           const rl::ResponseLayout& layout) {
  return rl::masked_mean_per_sample(rl::concat_tokens(per_sample), layout)
      .to(at::kDouble)
      .sum()
      .item<double>();
}

}  // namespace

// --ref-load (miles): the reference model's HF directory, else --hf-checkpoint. As in miles,
// its shards always live in host memory (streamed to the device per unit); it must have the
// actor's architecture, since the KL terms compare their log-probs token by token.
void FsdpBackend::load_reference_model() {
  const auto& hf = options_.model.ref_load.value_or(options_.model.hf_checkpoint);
  FURLONG_CHECK(std::filesystem::is_directory(hf), "--ref-load ", hf,
                " is not a directory (expected a HF model directory: config.json, safetensors)");
  auto model = models::create_model(models::read_hf_config(hf), hf + "/config.json");
  FURLONG_CHECK(model->config().vocab_size == model_->model().config().vocab_size, "--ref-load ",
                hf, ": vocabulary of ", model->config().vocab_size,
                " rows, but the actor (--hf-checkpoint) has ", model_->model().config().vocab_size);
  fsdp::FsdpOptions ref_options = model_->options();
  ref_options.keep_fp32_master = false;  // frozen: the checkpoint's dtype is enough
  ref_options.cpu_offload = true;
  ref_model_ =
      std::make_unique<fsdp::FsdpModel>(std::move(model), *mesh_, ref_options, groups_->device());
  ref_model_->load_hf(models::open_hf_weights(hf, ref_model_->model().config()));
  LOG_INFO("loaded the reference model (frozen) from ", hf);
}

std::vector<at::Tensor> FsdpBackend::score_samples(fsdp::FsdpModel& model,
                                                   const std::vector<const rl::Sample*>& local,
                                                   const BatchPlan& plan,
                                                   const std::vector<at::Tensor>* replay_TLK,
                                                   std::vector<at::Tensor>* record_TLK) {
  std::vector<at::Tensor> out(local.size());
  if (record_TLK != nullptr) record_TLK->assign(local.size(), at::Tensor());
  const auto& config = model.model().config();
  at::NoGradGuard no_grad;
  for (const auto& step : plan) {
    for (const auto& items : step) {
      std::vector<const rl::Sample*> samples;
      samples.reserve(items.size());
      for (size_t i : items) samples.push_back(local[i]);
      auto mb = pack_micro_batch(samples, share_prompts());
      // The actor's MoE passes (replay or record); the reference model routes freely.
      auto trace = replay_TLK != nullptr || record_TLK != nullptr
                       ? make_trace(items, replay_TLK, record_TLK != nullptr, false)
                       : nullptr;
      auto fwd = model.forward(mb.batch, forward_options(trace));
      if (trace) {
        count_replay_check(*trace);
        if (moe_observer_) moe_observer_("log_probs", items, *trace);
      }
      if (trace && record_TLK != nullptr && !items.empty()) {
        auto recorded_PLK =
            trace->recorded_PLK(config.num_hidden_layers, config.moe.experts_per_token).cpu();
        std::vector<int64_t> sizes;
        for (const auto* s : samples) sizes.push_back(static_cast<int64_t>(s->tokens.size()));
        auto pieces = recorded_PLK.split_with_sizes(sizes);
        for (size_t k = 0; k < items.size(); ++k) (*record_TLK)[items[k]] = pieces[k].clone();
      }
      if (mb.rows_T.numel() > 0) {
        auto device = fwd.hidden_PD.device();
        // Same call as the training forward (with entropy), so the values are identical.
        auto lp = models::token_logprobs(
            fwd.hidden_PD.index_select(0, mb.rows_T.to(device)), fwd.head_VD,
            mb.targets_T.to(device),
            {.temperature = options_.rollout_temperature, .with_entropy = true});
        auto pieces = lp.logprobs_T.to(at::kCPU).split_with_sizes(mb.layout.lengths);
        for (size_t k = 0; k < items.size(); ++k) out[items[k]] = pieces[k].clone();
      }
      model.end_step();
    }
  }
  for (size_t i = 0; i < local.size(); ++i) {
    if (!out[i].defined()) out[i] = at::zeros({local[i]->response_length}, at::kFloat);
  }
  return out;
}

bool FsdpBackend::old_pass_redundant(const BatchPlan& plan) const {
  const auto& a = options_.algorithm;
  // The plan has the same number of steps on every rank (plan_batches).
  return a.old_logprobs == OldLogprobs::kAuto && plan.size() == 1 &&
         a.kl_coef == 0.0 &&  // the reward-level KL reads pi_old before training
         !routing_replay();   // R2 records its routing in the pass; R3 checks it there
}

void FsdpBackend::finish_old_is_current(PolicyData& policy, size_t local_samples) {
  const double sum = mesh_->dp().all_reduce_sum(policy.old_log_prob_mean_sum);
  const double n = mesh_->dp().all_reduce_sum(static_cast<double>(local_samples));
  policy.metrics["rollout/log_probs"] = sum / std::max(1.0, n);
}

FsdpBackend::PolicyData FsdpBackend::prepare_policy_data(
    const std::vector<rl::Sample>& rollout, const std::vector<size_t>& local_indices,
    const std::vector<const rl::Sample*>& local, const BatchPlan& plan) {
  const auto& a = options_.algorithm;
  PolicyData policy;
  std::map<std::string, double> timings;
  auto timed = [&](const char* name, auto&& fn) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    timings[std::string("perf/") + name + "_time"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (const auto* s : local) {
    FURLONG_CHECK(!(a.use_rollout_logprobs || a.use_tis) ||
                      static_cast<int64_t>(s->rollout_log_probs.size()) == s->response_length,
                  "sample ", s->index,
                  " has no rollout log-probs, which --use-rollout-logprobs / "
                  "--use-tis need");
    policy.rollout_log_probs.push_back(rl::fp32_tensor(s->rollout_log_probs));
  }
  if (ref_model_)
    timed("ref_log_probs", [&] { policy.ref_log_probs = score_samples(*ref_model_, local, plan); });
  if (routing_replay()) {
    // R3 replays the engines' routing in this pass too; R2 records it here (fsdp_backend_moe).
    timed("log_probs", [&] {
      policy.routing_TLK =
          prepare_routing(local, plan, a.use_rollout_logprobs ? nullptr : &policy.old_log_probs);
    });
  } else if (!a.use_rollout_logprobs) {
    policy.old_is_current = old_pass_redundant(plan);
    if (policy.old_is_current) {  // placeholders: nothing reads them (old_pass_redundant)
      for (const auto* s : local) policy.old_log_probs.push_back(at::zeros({s->response_length}));
    } else {
      timed("log_probs", [&] { policy.old_log_probs = score_samples(*model_, local, plan); });
    }
  }
  if (a.use_rollout_logprobs) policy.old_log_probs = policy.rollout_log_probs;
  auto advantages = rl::compute_rollout_advantages(
      {.rollout = &rollout,
       .local = local_indices,
       .old_log_probs = policy.old_log_probs,
       .ref_log_probs = policy.ref_log_probs},
      reward_norm_options(options_.algorithm, options_.n_samples_per_prompt), advantage_options(a),
      [&](at::Tensor& moments) { mesh_->dp().all_reduce_sum(moments); });
  policy.advantages = std::move(advantages.advantages);

  // Train-side rollout/* metrics: per-sample (masked) means, averaged over all samples.
  std::map<std::string, double> sums{{"count", static_cast<double>(local.size())}};
  std::vector<int64_t> lengths;
  std::vector<float> mask;
  bool all_have_rollout_log_probs = true;
  for (size_t i = 0; i < local.size(); ++i) {
    const auto& s = *local[i];
    lengths.push_back(s.response_length);
    mask.insert(mask.end(), s.loss_mask.begin(), s.loss_mask.end());
    all_have_rollout_log_probs = all_have_rollout_log_probs && !s.rollout_log_probs.empty();
    sums["rollout/raw_reward"] += s.raw_reward;
    sums["rollout/rewards"] += advantages.rewards[i];
    sums["rollout/response_lengths"] += static_cast<double>(s.response_length);
    sums["rollout/total_lengths"] += static_cast<double>(s.tokens.size());
    sums["rollout/truncated"] += s.status == rl::SampleStatus::kTruncated ? 1.0 : 0.0;
  }
  auto layout = rl::make_response_layout(lengths, rl::fp32_tensor(mask));
  if (!policy.old_is_current) {  // else from the step's forward (finish_old_is_current)
    sums["rollout/log_probs"] = sum_of_masked_means(policy.old_log_probs, layout);
  }
  sums["rollout/advantages"] = sum_of_masked_means(policy.advantages, layout);
  if (all_have_rollout_log_probs) {
    sums["rollout/rollout_log_probs"] = sum_of_masked_means(policy.rollout_log_probs, layout);
  }
  if (ref_model_) sums["rollout/ref_log_probs"] = sum_of_masked_means(policy.ref_log_probs, layout);
  sums = mesh_->dp().all_reduce_sum(std::move(sums));
  const double n = std::max(1.0, sums["count"]);
  for (const auto& [k, v] : sums) {
    if (k != "count") policy.metrics[k] = v / n;
  }
  for (const auto& [k, v] : timings) policy.metrics[k] = v;  // this rank's wall time
  return policy;
}

LossOutput FsdpBackend::policy_loss(const MicroBatch& mb, const std::vector<size_t>& items,
                                    const models::TokenLogProbs& lp,
                                    const PolicyData& policy) const {
  const auto device = lp.logprobs_T.device();
  auto gather = [&](const std::vector<at::Tensor>& per_sample) {
    std::vector<at::Tensor> parts;
    parts.reserve(items.size());
    for (size_t i : items) parts.push_back(per_sample[i]);
    return rl::concat_tokens(parts).to(device);
  };
  rl::LossInputs in{.log_probs_T = lp.logprobs_T,
                    .old_log_probs_T = policy.old_is_current ? lp.logprobs_T.detach()
                                                             : gather(policy.old_log_probs),
                    .advantages_T = gather(policy.advantages)};
  // The engine's log-probs, when every sample has them: TIS reads them, and the loss reports
  // train_rollout_logprob_abs_diff / train_rollout_kl (trainer vs engine).
  auto rollout_T = gather(policy.rollout_log_probs);
  if (rollout_T.numel() == lp.logprobs_T.numel()) in.rollout_log_probs_T = rollout_T;
  if (ref_model_) in.ref_log_probs_T = gather(policy.ref_log_probs);
  if (lp.entropy_T.defined()) in.entropy_T = lp.entropy_T;
  if (policy.old_is_current) {
    policy.old_log_prob_mean_sum +=
        rl::masked_mean_per_sample(in.old_log_probs_T, mb.layout.to(device)).sum().item<double>();
  }
  // normalizer 1: train_micro_batch applies the data-parallel scaling.
  auto result = rl::policy_loss(in, mb.layout.to(device),
                                loss_options(options_.algorithm, options_.batch), 1.0);
  LossOutput out;
  out.loss = result.loss;
  for (const auto& [k, v] : result.metrics) out.metrics[k] = v.item<double>();
  return out;
}

}  // namespace furlong::backend
