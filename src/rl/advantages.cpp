#include "rl/advantages.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "core/error.h"

namespace furlong::rl {

AdvantageEstimator parse_advantage_estimator(const std::string& name) {
  if (name == "grpo") return AdvantageEstimator::kGrpo;
  if (name == "gspo") return AdvantageEstimator::kGspo;
  if (name == "reinforce_plus_plus") return AdvantageEstimator::kReinforcePlusPlus;
  if (name == "reinforce_plus_plus_baseline") {
    return AdvantageEstimator::kReinforcePlusPlusBaseline;
  }
  FURLONG_CHECK(name != "ppo",
                "--advantage-estimator ppo needs a critic model, which furlong does not "
                "implement; use grpo, gspo, reinforce_plus_plus or reinforce_plus_plus_baseline");
  FURLONG_FAIL("--advantage-estimator: unknown value '", name,
               "'; expected one of grpo, gspo, reinforce_plus_plus, "
               "reinforce_plus_plus_baseline");
}

const char* advantage_estimator_name(AdvantageEstimator estimator) {
  switch (estimator) {
    case AdvantageEstimator::kGrpo:
      return "grpo";
    case AdvantageEstimator::kGspo:
      return "gspo";
    case AdvantageEstimator::kReinforcePlusPlus:
      return "reinforce_plus_plus";
    case AdvantageEstimator::kReinforcePlusPlusBaseline:
      return "reinforce_plus_plus_baseline";
  }
  return "unknown";
}

namespace {

bool is_grpo_like(AdvantageEstimator e) {
  return e == AdvantageEstimator::kGrpo || e == AdvantageEstimator::kGspo;
}

bool normalizes_rewards(AdvantageEstimator e) {
  return is_grpo_like(e) || e == AdvantageEstimator::kReinforcePlusPlusBaseline;
}

// One group's K rollout rewards, normalized in place (6.1).
void normalize_one_group(std::vector<double>& r, bool divide_by_std) {
  const size_t k = r.size();
  bool all_equal = true;
  for (double v : r) all_equal = all_equal && v == r.front();
  if (all_equal) {  // exactly 0, independent of rounding in the mean
    for (double& v : r) v = 0.0;
    return;
  }
  double mean = 0.0;
  for (double v : r) mean += v;
  mean /= static_cast<double>(k);
  for (double& v : r) v -= mean;
  if (!divide_by_std || k < 2) return;
  double ss = 0.0;
  for (double v : r) ss += v * v;
  const double std = std::sqrt(ss / static_cast<double>(k - 1));
  if (std > 0.0) {
    for (double& v : r) v /= std + kGroupStdEpsilon;
  }
}

}  // namespace

std::vector<double> normalize_group_rewards(const std::vector<double>& raw_rewards,
                                            const std::vector<int64_t>& group_index,
                                            const std::vector<int64_t>& rollout_id,
                                            const RewardNormOptions& options) {
  const size_t n = raw_rewards.size();
  FURLONG_CHECK(group_index.size() == n, "reward normalization: ", group_index.size(),
                " group indices for ", n, " rewards");
  FURLONG_CHECK(rollout_id.empty() || rollout_id.size() == n,
                "reward normalization: ", rollout_id.size(), " rollout ids for ", n, " rewards");
  if (!options.rewards_normalization || !normalizes_rewards(options.estimator)) {
    return raw_rewards;
  }
  const bool divide_by_std = is_grpo_like(options.estimator) && options.grpo_std_normalization &&
                             options.n_samples_per_prompt > 1;
  // group -> ordered rollouts (first-seen order) -> the sample indices of each rollout.
  std::map<int64_t, std::vector<std::pair<int64_t, std::vector<size_t>>>> groups;
  for (size_t i = 0; i < n; ++i) {
    const int64_t rid = rollout_id.empty() ? static_cast<int64_t>(i) : rollout_id[i];
    auto& rollouts = groups[group_index[i]];
    auto it = rollouts.begin();
    while (it != rollouts.end() && it->first != rid) ++it;
    if (it == rollouts.end()) {
      rollouts.push_back({rid, {i}});
    } else {
      FURLONG_CHECK(raw_rewards[it->second.front()] == raw_rewards[i],
                    "reward normalization: samples ", it->second.front(), " and ", i,
                    " share rollout id ", rid, " but have different rewards (",
                    raw_rewards[it->second.front()], " vs ", raw_rewards[i], ")");
      it->second.push_back(i);
    }
  }
  std::vector<double> out(n, 0.0);
  for (auto& [group, rollouts] : groups) {
    std::vector<double> r;
    for (const auto& [rid, members] : rollouts) r.push_back(raw_rewards[members.front()]);
    normalize_one_group(r, divide_by_std);
    for (size_t k = 0; k < rollouts.size(); ++k) {
      for (size_t i : rollouts[k].second) out[i] = r[k];
    }
  }
  return out;
}

void normalize_sample_rewards(std::vector<Sample>& samples, const RewardNormOptions& options) {
  std::vector<double> raw;
  std::vector<int64_t> groups;
  for (const auto& s : samples) {
    raw.push_back(s.raw_reward);
    groups.push_back(s.group_index);
  }
  auto normalized = normalize_group_rewards(raw, groups, {}, options);
  for (size_t i = 0; i < samples.size(); ++i) samples[i].reward = normalized[i];
}

void validate_advantage_options(const AdvantageOptions& o) {
  const bool plus_plus = o.estimator == AdvantageEstimator::kReinforcePlusPlus ||
                         o.estimator == AdvantageEstimator::kReinforcePlusPlusBaseline;
  FURLONG_CHECK(!plus_plus || o.normalize_advantages, "--advantage-estimator ",
                advantage_estimator_name(o.estimator), " requires --normalize-advantages");
  FURLONG_CHECK(o.gamma >= 0.0 && o.gamma <= 1.0, "--gamma must be in [0, 1], got ", o.gamma);
  FURLONG_CHECK(std::isfinite(o.kl_coef), "--kl-coef must be finite, got ", o.kl_coef);
}

namespace {

// -kl_coef * KL_t(pi_old vs pi_ref), zero at masked tokens (and everywhere when kl_coef == 0).
at::Tensor kl_token_rewards(const AdvantageInputs& in, const ResponseLayout& layout,
                            const AdvantageOptions& o) {
  if (o.kl_coef == 0.0) return at::zeros_like(layout.loss_mask_T);
  FURLONG_CHECK(in.log_probs_T.defined() && in.ref_log_probs_T.defined(), "advantages: --kl-coef ",
                o.kl_coef, " needs the old and the reference log-probs of every response token");
  auto kl_T = compute_approx_kl(in.log_probs_T.to(at::kFloat), in.ref_log_probs_T.to(at::kFloat),
                                o.kl_type);
  return -o.kl_coef * (kl_T * layout.loss_mask_T);
}

// Discounted returns per sample, with R_i added at the sample's last position with mask 1.
at::Tensor reinforce_returns(const at::Tensor& token_rewards_T, const at::Tensor& rewards_S,
                             const ResponseLayout& layout, double gamma) {
  auto r_T = token_rewards_T.to(at::kCPU).contiguous().clone();
  auto mask_T = layout.loss_mask_T.to(at::kCPU).contiguous();
  auto reward_S = rewards_S.to(at::kCPU).to(at::kFloat).contiguous();
  float* r = r_T.data_ptr<float>();
  const float* m = mask_T.data_ptr<float>();
  const float g = static_cast<float>(gamma);
  int64_t start = 0;
  for (int64_t i = 0; i < layout.num_samples(); ++i) {
    const int64_t end = start + layout.lengths[i];
    for (int64_t t = end - 1; t >= start; --t) {
      if (m[t] != 0.0f) {
        r[t] += reward_S.data_ptr<float>()[i];
        break;
      }
    }
    float ret = 0.0f;
    for (int64_t t = end - 1; t >= start; --t) {
      ret = r[t] + g * ret;
      r[t] = ret;
    }
    start = end;
  }
  return r_T.to(layout.loss_mask_T.device());
}

}  // namespace

at::Tensor compute_advantages(const AdvantageInputs& in, const ResponseLayout& layout,
                              const AdvantageOptions& o) {
  at::NoGradGuard no_grad;
  FURLONG_CHECK(in.rewards_S.defined() && in.rewards_S.dim() == 1 &&
                    in.rewards_S.size(0) == layout.num_samples(),
                "advantages: expected one reward per sample (", layout.num_samples(), ")");
  auto rewards_S = in.rewards_S.to(at::kFloat).to(layout.loss_mask_T.device());
  switch (o.estimator) {
    case AdvantageEstimator::kGrpo:
    case AdvantageEstimator::kGspo:
      return broadcast_to_tokens(rewards_S, layout);
    case AdvantageEstimator::kReinforcePlusPlusBaseline:
      return broadcast_to_tokens(rewards_S, layout) + kl_token_rewards(in, layout, o);
    case AdvantageEstimator::kReinforcePlusPlus:
      return reinforce_returns(kl_token_rewards(in, layout, o), rewards_S, layout, o.gamma);
  }
  FURLONG_ASSERT(false, "unhandled AdvantageEstimator");
  return {};
}

at::Tensor advantage_moments(const at::Tensor& advantages_T, const at::Tensor& loss_mask_T) {
  // float64 so that the one-pass variance (E[A^2] - mean^2) loses nothing that matters in fp32.
  auto a = advantages_T.detach().to(at::kDouble);
  auto m = loss_mask_T.to(at::kDouble);
  return at::stack({(a * m).sum(), (a * a * m).sum(), m.sum()});
}

at::Tensor whiten_advantages(const at::Tensor& advantages_T, const at::Tensor& moments) {
  FURLONG_CHECK(moments.numel() == 3, "whiten_advantages: moments must hold 3 values");
  auto mom = moments.to(at::kCPU).to(at::kDouble);
  const double sum = mom[0].item<double>();
  const double sum_sq = mom[1].item<double>();
  const double count = mom[2].item<double>();
  if (count <= 0.0) return advantages_T;
  const double mean = sum / count;
  const double var = count > 1.0 ? std::max(0.0, (sum_sq - sum * mean) / (count - 1.0)) : 0.0;
  const double inv_std = 1.0 / std::sqrt(var + kWhitenEpsilon);
  return (advantages_T - mean) * inv_std;
}

at::Tensor compute_and_whiten_advantages(const AdvantageInputs& inputs,
                                         const ResponseLayout& layout,
                                         const AdvantageOptions& options) {
  auto a_T = compute_advantages(inputs, layout, options);
  if (!options.normalize_advantages) return a_T;
  return whiten_advantages(a_T, advantage_moments(a_T, layout.loss_mask_T));
}

RolloutAdvantages compute_rollout_advantages(
    const RolloutAdvantageInputs& in, const RewardNormOptions& reward_options,
    const AdvantageOptions& options, const std::function<void(at::Tensor&)>& sum_over_ranks) {
  FURLONG_CHECK(in.rollout != nullptr, "advantages: no rollout given");
  const auto& rollout = *in.rollout;
  std::vector<double> raw;
  std::vector<int64_t> group_index;
  for (const auto& s : rollout) {
    raw.push_back(s.raw_reward);
    group_index.push_back(s.group_index);
  }
  const auto normalized = normalize_group_rewards(raw, group_index, {}, reward_options);

  RolloutAdvantages out;
  std::vector<int64_t> lengths;
  std::vector<float> mask, rewards;
  for (size_t i : in.local) {
    const auto& s = rollout.at(i);
    lengths.push_back(s.response_length);
    for (float m : s.loss_mask) mask.push_back(s.remove ? 0.0f : m);
    out.rewards.push_back(normalized[i]);
    rewards.push_back(static_cast<float>(normalized[i]));
  }
  auto layout = make_response_layout(lengths, fp32_tensor(mask));
  AdvantageInputs inputs{.rewards_S = fp32_tensor(rewards),
                         .log_probs_T = concat_tokens(in.old_log_probs),
                         .ref_log_probs_T = concat_tokens(in.ref_log_probs)};
  auto advantages_T = compute_advantages(inputs, layout, options);
  if (options.normalize_advantages) {
    auto moments = advantage_moments(advantages_T, layout.loss_mask_T).to(at::kDouble);
    sum_over_ranks(moments);
    advantages_T = whiten_advantages(advantages_T, moments.to(at::kFloat));
  }
  for (auto& piece : advantages_T.split_with_sizes(lengths))
    out.advantages.push_back(piece.clone());
  return out;
}

}  // namespace furlong::rl
