// The RL side of the FSDP backend (--loss-type policy_loss): per rollout, the forward-only
// passes that give the old-policy and reference log-probs, the advantages, and per
// micro-batch the policy loss (PPO clip, TIS, entropy, KL to the reference).
//
// Invariant that makes the first step's ppo_kl exactly 0: the old-policy pass packs the same
// micro-batches as training (the same plan) and computes log-probs with the same call, so
// before the first optimizer step of a rollout both passes see identical inputs and weights.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <chrono>

#include "core/log.h"
#include "dist/process_group.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/registry.h"
#include "rl/advantages.h"
#include "rl/kl.h"
#include "rl/layout.h"
#include "rl/losses.h"
#include "train/fsdp_backend.h"

namespace furlong::train {
namespace {

at::Tensor concat_or_empty(const std::vector<at::Tensor>& parts) {
  if (parts.empty()) return at::zeros({0}, at::kFloat);
  return at::cat(parts);
}

at::Tensor floats(const std::vector<float>& v) {
  return at::tensor(v, at::kFloat).reshape({static_cast<int64_t>(v.size())});
}

// Sums over ranks of per-sample values, then the means over all samples.
std::map<std::string, double> dp_means(std::map<std::string, double> sums, double count,
                                       dist::Group& dp) {
  std::vector<double> values{count};
  for (const auto& entry : sums) values.push_back(entry.second);
  auto totals = at::tensor(values, at::kDouble);
  dp.all_reduce_sum(totals);
  const double n = std::max(1.0, totals[0].item<double>());
  int64_t i = 1;
  for (auto& entry : sums) entry.second = totals[i++].item<double>() / n;
  return sums;
}

double masked_mean(const at::Tensor& x_T, const rl::Sample& s) {
  if (x_T.numel() == 0) return 0.0;
  auto mask = floats(s.loss_mask);
  return (x_T * mask).sum().item<double>() / std::max(1.0, mask.sum().item<double>());
}

}  // namespace

void FsdpBackend::load_reference_model() {
  const auto& hf = options_.model.hf_checkpoint;
  auto model = models::create_model(models::read_hf_config(hf), hf + "/config.json");
  fsdp::FsdpOptions ref_options = model_->options();
  ref_options.keep_fp32_master = false;  // frozen: the checkpoint's dtype is enough
  ref_options.cpu_offload = options_.precision.fsdp_cpu_offload;
  ref_model_ =
      std::make_unique<fsdp::FsdpModel>(std::move(model), *mesh_, ref_options, groups_->device());
  ref_model_->load_hf(io::HfWeights::open(hf));
  LOG_INFO("loaded the reference model (frozen) from ", hf);
}

std::vector<at::Tensor> FsdpBackend::score_samples(fsdp::FsdpModel& model,
                                                   const std::vector<const rl::Sample*>& local,
                                                   const BatchPlan& plan) {
  std::vector<at::Tensor> out(local.size());
  at::NoGradGuard no_grad;
  for (const auto& step : plan) {
    for (const auto& items : step) {
      std::vector<const rl::Sample*> samples;
      for (size_t i : items) samples.push_back(local[i]);
      auto mb = pack_micro_batch(samples);
      auto fwd = model.forward(mb.batch, forward_options());
      if (mb.rows_R.numel() > 0) {
        auto device = fwd.hidden_TD.device();
        // Same call as the training forward (with entropy), so the values are identical.
        auto lp = models::token_logprobs(
            fwd.hidden_TD.index_select(0, mb.rows_R.to(device)), fwd.head_VD,
            mb.targets_R.to(device),
            {.temperature = options_.rollout.rollout_temperature, .with_entropy = true});
        auto pieces = lp.logprobs_T.to(at::kCPU).split_with_sizes(mb.response_lengths);
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

std::map<std::string, double> FsdpBackend::prepare_policy_data(
    const std::vector<const rl::Sample*>& local, const BatchPlan& plan) {
  const auto& a = options_.algorithm;
  policy_ = {};
  std::map<std::string, double> sums, timings;
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
    policy_.rollout_log_probs.push_back(floats(s->rollout_log_probs));
  }
  if (ref_model_)
    timed("ref_log_probs",
          [&] { policy_.ref_log_probs = score_samples(*ref_model_, local, plan); });
  if (a.use_rollout_logprobs) {
    policy_.old_log_probs = policy_.rollout_log_probs;
  } else {
    timed("log_probs", [&] { policy_.old_log_probs = score_samples(*model_, local, plan); });
  }

  // Advantages over all local samples at once (whitening, if on, over the whole DP batch).
  std::vector<int64_t> lengths;
  std::vector<float> mask, rewards;
  for (const auto* s : local) {
    lengths.push_back(s->response_length);
    for (float m : s->loss_mask) mask.push_back(s->remove ? 0.0f : m);
    rewards.push_back(static_cast<float>(s->reward));
  }
  auto layout = rl::make_response_layout(lengths, floats(mask));
  rl::AdvantageOptions adv_options{
      .estimator = rl::parse_advantage_estimator(a.advantage_estimator),
      .kl_coef = a.kl_coef,
      .kl_type = rl::parse_kl_type(a.kl_loss_type),
      .gamma = a.gamma,
      .normalize_advantages = a.normalize_advantages};
  rl::AdvantageInputs inputs{.rewards_S = floats(rewards),
                             .log_probs_T = concat_or_empty(policy_.old_log_probs),
                             .ref_log_probs_T = concat_or_empty(policy_.ref_log_probs)};
  auto advantages_T = rl::compute_advantages(inputs, layout, adv_options);
  if (a.normalize_advantages) {
    auto moments = rl::advantage_moments(advantages_T, layout.loss_mask_T).to(at::kDouble);
    mesh_->dp().all_reduce_sum(moments);
    advantages_T = rl::whiten_advantages(advantages_T, moments.to(at::kFloat));
  }
  auto pieces = advantages_T.split_with_sizes(lengths);
  for (auto& p : pieces) policy_.advantages.push_back(p.clone());

  // Train-side rollout/* metrics: per-sample (masked) means, averaged over all samples.
  for (size_t i = 0; i < local.size(); ++i) {
    const auto& s = *local[i];
    sums["rollout/raw_reward"] += s.raw_reward;
    sums["rollout/rewards"] += s.reward;
    sums["rollout/response_lengths"] += static_cast<double>(s.response_length);
    sums["rollout/total_lengths"] += static_cast<double>(s.tokens.size());
    sums["rollout/truncated"] += s.status == rl::SampleStatus::kTruncated ? 1.0 : 0.0;
    sums["rollout/log_probs"] += masked_mean(policy_.old_log_probs[i], s);
    sums["rollout/advantages"] += masked_mean(policy_.advantages[i], s);
    if (!s.rollout_log_probs.empty()) {
      sums["rollout/rollout_log_probs"] += masked_mean(policy_.rollout_log_probs[i], s);
    }
    if (ref_model_) sums["rollout/ref_log_probs"] += masked_mean(policy_.ref_log_probs[i], s);
  }
  auto means = dp_means(std::move(sums), static_cast<double>(local.size()), mesh_->dp());
  for (const auto& [k, v] : timings) means[k] = v;  // this rank's wall time
  return means;
}

LossOutput FsdpBackend::policy_loss(const MicroBatch& mb, const std::vector<size_t>& items,
                                    const models::TokenLogProbs& lp) const {
  const auto& a = options_.algorithm;
  const auto device = lp.logprobs_T.device();
  auto gather = [&](const std::vector<at::Tensor>& per_sample) {
    std::vector<at::Tensor> parts;
    for (size_t i : items) parts.push_back(per_sample[i]);
    return concat_or_empty(parts).to(device);
  };
  auto layout = rl::make_response_layout(mb.response_lengths, mb.mask_R.to(device));
  const bool per_token = options_.batch.calculate_per_token_loss;
  rl::LossInputs in{.log_probs_T = lp.logprobs_T,
                    .old_log_probs_T = gather(policy_.old_log_probs),
                    .advantages_T = gather(policy_.advantages)};
  // The engine's log-probs, when every sample has them: TIS reads them, and the loss reports
  // train_rollout_logprob_abs_diff / train_rollout_kl (trainer vs engine).
  auto rollout_T = gather(policy_.rollout_log_probs);
  if (rollout_T.numel() == lp.logprobs_T.numel()) in.rollout_log_probs_T = rollout_T;
  if (ref_model_) in.ref_log_probs_T = gather(policy_.ref_log_probs);
  if (lp.entropy_T.defined()) in.entropy_T = lp.entropy_T;
  rl::LossOptions options{.eps_clip = a.eps_clip,
                          .eps_clip_high = a.eps_clip_high,
                          .eps_clip_c = a.eps_clip_c,
                          .sequence_level_ratio = a.advantage_estimator == "gspo",
                          .use_tis = a.use_tis,
                          .tis_clip = a.tis_clip,
                          .tis_clip_low = a.tis_clip_low,
                          .entropy_coef = a.entropy_coef,
                          .use_kl_loss = a.use_kl_loss,
                          .kl_loss_coef = a.kl_loss_coef,
                          .kl_loss_type = rl::parse_kl_type(a.kl_loss_type),
                          .calculate_per_token_loss = per_token};
  // normalizer 1: train_micro_batch applies the data-parallel scaling.
  auto result = rl::policy_loss(in, layout, options, 1.0);
  LossOutput out;
  out.loss = result.loss;
  for (const auto& [k, v] : result.metrics) out.metrics[k] = v.item<double>();
  return out;
}

}  // namespace furlong::train
