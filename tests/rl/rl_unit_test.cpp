// Hand-computed cases and error messages for src/rl (the random-input parity against the
// Python oracle is in rl_oracle_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/test_util.h"
#include "common/tolerances.h"
#include "rl/advantages.h"
#include "rl/kl.h"
#include "rl/losses.h"

namespace furlong::rl {
namespace {

using testing::error_of;

at::Tensor f32(std::vector<float> v) {
  return at::tensor(v, at::kFloat).reshape({static_cast<int64_t>(v.size())}).clone();
}

std::vector<float> values(const at::Tensor& t) {
  auto c = t.detach().to(at::kFloat).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

double metric(const LossResult& r, const std::string& name) {
  for (const auto& [k, v] : r.metrics) {
    if (k == name) return v.item<double>();
  }
  ADD_FAILURE() << "no metric " << name;
  return NAN;
}

TEST(RewardNorm, AllEqualGroupGetsExactlyZero) {
  RewardNormOptions o{.n_samples_per_prompt = 3};
  // 0.1 * 3 / 3 != 0.1 in floating point; the spec's "all equal -> 0" must still hold exactly.
  auto r = normalize_group_rewards({0.1, 0.1, 0.1}, {5, 5, 5}, {}, o);
  for (double v : r) EXPECT_EQ(v, 0.0);
}

TEST(RewardNorm, StdGuardAndEpsilon) {
  RewardNormOptions o{.n_samples_per_prompt = 2};
  auto r = normalize_group_rewards({0.0, 1.0}, {0, 0}, {}, o);
  const double std = std::sqrt(0.5);  // unbiased: ((-.5)^2 + .5^2) / (2 - 1)
  EXPECT_DOUBLE_EQ(r[0], -0.5 / (std + 1e-6));
  EXPECT_DOUBLE_EQ(r[1], 0.5 / (std + 1e-6));
  o.grpo_std_normalization = false;  // Dr.GRPO: mean only
  r = normalize_group_rewards({0.0, 1.0}, {0, 0}, {}, o);
  EXPECT_DOUBLE_EQ(r[0], -0.5);
  o.grpo_std_normalization = true;
  o.estimator = AdvantageEstimator::kReinforcePlusPlusBaseline;  // mean only as well
  r = normalize_group_rewards({0.0, 1.0}, {0, 0}, {}, o);
  EXPECT_DOUBLE_EQ(r[1], 0.5);
  o.estimator = AdvantageEstimator::kReinforcePlusPlus;  // raw
  r = normalize_group_rewards({0.0, 1.0}, {0, 0}, {}, o);
  EXPECT_DOUBLE_EQ(r[1], 1.0);
}

TEST(RewardNorm, SiblingsMustAgree) {
  RewardNormOptions o{.n_samples_per_prompt = 2};
  auto msg = error_of([&] { normalize_group_rewards({1.0, 0.0}, {0, 0}, {3, 3}, o); });
  EXPECT_NE(msg.find("share rollout id 3"), std::string::npos) << msg;
  msg = error_of([&] { normalize_group_rewards({1.0, 0.0}, {0}, {}, o); });
  EXPECT_NE(msg.find("1 group indices for 2 rewards"), std::string::npos) << msg;
}

TEST(RewardNorm, SamplesGetRewardFromRawReward) {
  std::vector<Sample> samples(4);
  const double raw[] = {1.0, 0.0, 0.5, 0.5};
  for (int i = 0; i < 4; ++i) {
    samples[i].raw_reward = raw[i];
    samples[i].group_index = i / 2;
  }
  normalize_sample_rewards(samples, {.grpo_std_normalization = false, .n_samples_per_prompt = 2});
  EXPECT_DOUBLE_EQ(samples[0].reward, 0.5);
  EXPECT_DOUBLE_EQ(samples[1].reward, -0.5);
  EXPECT_EQ(samples[2].reward, 0.0);
  EXPECT_EQ(samples[3].raw_reward, 0.5);  // raw kept
}

TEST(Kl, HandValuesAndClamps) {
  auto logp = f32({-1.0f, -1.0f, -1.0f});
  auto base = f32({-1.5f, -31.0f, 29.0f});  // d = 0.5, 30, -30
  auto k1 = values(compute_approx_kl(logp, base, KlType::kK1));
  EXPECT_FLOAT_EQ(k1[0], 0.5f);
  auto k2 = values(compute_approx_kl(logp, base, KlType::kK2));
  EXPECT_FLOAT_EQ(k2[0], 0.125f);
  auto k3 = values(compute_approx_kl(logp, base, KlType::kK3));
  // Hand values against exact doubles: tol::fp32_chain_bound(scale, roundings, exps) counts the
  // fp32 roundings and exps of each formula (tests/common/tolerances.h). k3 = e^-d - 1 + d:
  // one exp of 0.61, two additions at scale 1.
  EXPECT_NEAR(k3[0], std::exp(-0.5) - 1 + 0.5, testing::tol::fp32_chain_bound(1.0, 2, 1));
  auto lv = values(compute_approx_kl(logp, base, KlType::kLowVarKl));
  EXPECT_NEAR(lv[0], k3[0], 2 * testing::tol::fp32_chain_bound(1.0, 3, 1));  // two fp32 paths
  EXPECT_FLOAT_EQ(lv[1], 10.0f);  // e = -30 -> -20: exp(-20) + 19 clamped to 10
  EXPECT_FLOAT_EQ(lv[2], 10.0f);  // e = 30 -> 20: exp(20) - 21 clamped to 10
  // Beyond the clamps the estimate is flat: zero gradient, and never inf/NaN for extreme d.
  auto lp = f32({-1.0f, -1.0f, -1.0f}).requires_grad_(true);
  auto far = f32({-1.5f, -1001.0f, 999.0f});
  compute_approx_kl(lp, far, KlType::kLowVarKl).sum().backward();
  auto g = values(lp.grad());
  EXPECT_NEAR(
      g[0], 1.0 - std::exp(-0.5),
      testing::tol::fp32_chain_bound(1.0, 4, 1));  // d/dlogp (exp(-d) - 1 + d) = 1 - exp(-d)
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_EQ(g[2], 0.0f);
}

TEST(Kl, ParseErrorsNameTheFlag) {
  auto msg = error_of([] { parse_kl_type("k4"); });
  EXPECT_NE(msg.find("--kl-loss-type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("low_var_kl"), std::string::npos) << msg;
  EXPECT_EQ(parse_kl_type("low_var_kl"), KlType::kLowVarKl);
  EXPECT_STREQ(kl_type_name(KlType::kK3), "k3");
}

TEST(Layout, ReductionsPerSampleAndPerToken) {
  auto layout = make_response_layout({2, 0, 3}, f32({1, 1, 1, 0, 1}));
  auto x = f32({1, 3, 2, 100, 4});
  EXPECT_FLOAT_EQ(sum_of_sample_mean(x, layout).item<float>(), 2.0f + 3.0f);
  EXPECT_FLOAT_EQ(sum_of_token_values(x, layout).item<float>(), 10.0f);
  // Compact siblings: a caller-given denominator replaces the sample's own mask sum.
  auto shared = make_response_layout({2, 0, 3}, f32({1, 1, 1, 0, 1}), std::vector<double>{4, 1, 4});
  EXPECT_FLOAT_EQ(sum_of_sample_mean(x, shared).item<float>(), 1.0f + 1.5f);
  auto msg = error_of([] { make_response_layout({2, 2}, f32({1, 1, 1})); });
  EXPECT_NE(msg.find("sum to 4"), std::string::npos) << msg;
}

TEST(Advantages, ReinforceReturnsByHand) {
  auto layout = make_response_layout({3, 2}, f32({1, 1, 0, 0, 0}));
  AdvantageOptions o{.estimator = AdvantageEstimator::kReinforcePlusPlus, .gamma = 0.5};
  auto a = values(compute_advantages({.rewards_S = f32({2, 7})}, layout, o));
  // R added at the last mask-1 position (index 1), discounted back; sample 2 fully masked:
  // its reward has no position and everything stays 0.
  std::vector<float> want = {1.0f, 2.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(a, want);
}

TEST(Advantages, GrpoBroadcastAndWhitening) {
  auto layout = make_response_layout({2, 1}, f32({1, 1, 1}));
  AdvantageOptions o;
  auto a = values(compute_advantages({.rewards_S = f32({0.5, -1})}, layout, o));
  EXPECT_EQ(a, (std::vector<float>{0.5f, 0.5f, -1.0f}));
  o.normalize_advantages = true;
  auto w = values(compute_and_whiten_advantages({.rewards_S = f32({0.5, -1})}, layout, o));
  // mean 0, unbiased var = (0.25 + 0.25 + 1) / 2 = 0.75
  // mean (3 terms), unbiased var (3 squares, 3 adds, 1 division), + eps, sqrt, division: ~12.
  EXPECT_NEAR(w[0], 0.5 / std::sqrt(0.75 + 1e-8), testing::tol::fp32_chain_bound(1.2, 12));
  EXPECT_NEAR(w[2], -1.0 / std::sqrt(0.75 + 1e-8), testing::tol::fp32_chain_bound(1.2, 12));
  // One masked token: no unbiased variance, var = 0 -> (A - mean) / sqrt(1e-8).
  auto one = make_response_layout({2}, f32({0, 1}));
  auto s = values(whiten_advantages(f32({3, 2}), advantage_moments(f32({3, 2}), one.loss_mask_T)));
  // float(1e-8), sqrt, division: 3 roundings at scale 1e4 (fp32 1e-8 itself: relative u).
  EXPECT_NEAR(s[0], 1.0 / std::sqrt(1e-8), testing::tol::fp32_chain_bound(1e4, 4));
  EXPECT_EQ(s[1], 0.0f);
}

TEST(Advantages, OptionErrors) {
  auto msg = error_of([] { parse_advantage_estimator("ppo"); });
  EXPECT_NE(msg.find("critic"), std::string::npos) << msg;
  msg = error_of([] { parse_advantage_estimator("grpoo"); });
  EXPECT_NE(msg.find("--advantage-estimator"), std::string::npos) << msg;
  msg = error_of(
      [] { validate_advantage_options({.estimator = AdvantageEstimator::kReinforcePlusPlus}); });
  EXPECT_NE(msg.find("requires --normalize-advantages"), std::string::npos) << msg;
  auto layout = make_response_layout({1}, f32({1}));
  msg = error_of([&] {
    compute_advantages(
        {.rewards_S = f32({1})}, layout,
        {.estimator = AdvantageEstimator::kReinforcePlusPlusBaseline, .kl_coef = 0.1});
  });
  EXPECT_NE(msg.find("reference log-probs"), std::string::npos) << msg;
}

TEST(PolicyLoss, ClipAndDualClipByHand) {
  auto layout = make_response_layout({3}, f32({1, 1, 1}));
  const float l15 = std::log(1.5f);
  auto lp = f32({l15, l15, -l15});  // ratios 1.5, 1.5, 1/1.5 (old log-probs 0)
  auto old = f32({0, 0, 0});
  auto adv = f32({1, -1, -1});
  LossOptions o;
  auto t = compute_policy_loss(lp, old, adv, layout, o);
  auto l = values(t.pg_loss_T);
  // log(1.5f), exp, the clip bounds 1 +- eps as floats, one product: 4 roundings + exp at 1.5.
  const double clip_tol = testing::tol::fp32_chain_bound(1.5, 4, 1);
  EXPECT_NEAR(l[0], -1.2, clip_tol);  // max(-1.5, -1.2): clipped
  EXPECT_NEAR(l[1], 1.5, clip_tol);   // max(1.5, 1.2): unclipped (pessimistic)
  EXPECT_NEAR(l[2], 0.8, clip_tol);   // max(0.667, 0.8): clipped from below
  EXPECT_EQ(values(t.clipfrac_T), (std::vector<float>{1, 0, 1}));
  o.eps_clip_c = 1.4;
  l = values(compute_policy_loss(lp, old, adv, layout, o).pg_loss_T);
  EXPECT_NEAR(l[1], 1.4, clip_tol);  // A < 0: min(-c*A, L)
  EXPECT_NEAR(l[2], 0.8, clip_tol);
  o.eps_clip_high = 0.6;  // 1.5 < 1 + 0.6: no longer clipped
  EXPECT_NEAR(values(compute_policy_loss(lp, old, adv, layout, o).pg_loss_T)[0], -1.5, clip_tol);
}

TEST(PolicyLoss, RatioClampAndNonFiniteOldLogProbs) {
  auto layout = make_response_layout({2}, f32({1, 0}));
  const float inf = std::numeric_limits<float>::infinity();
  auto lp = f32({-1, -1});
  auto old = f32({-26, std::nanf("")});  // log-ratio 25 (clamped to 20); NaN where masked
  auto t = compute_policy_loss(lp, old, f32({-1, 1}), layout, LossOptions{});
  auto l = values(t.pg_loss_T);
  // ratio clamped at e^20: one exp and the product, relative to e^20.
  EXPECT_NEAR(l[0], 1.0 * std::exp(20.0), testing::tol::fp32_chain_bound(std::exp(20.0), 2, 1));
  EXPECT_EQ(l[1], -1.0f);  // masked: ppo_kl 0, ratio 1
  EXPECT_EQ(values(t.ppo_kl_T)[1], 0.0f);
  auto t2 = compute_policy_loss(f32({-1, -1}), f32({inf, -1}), f32({1, 1}), layout, {});
  EXPECT_EQ(values(t2.ppo_kl_T)[0], 0.0f);  // inf -> 0
}

TEST(PolicyLoss, EmptyMaskSampleContributesNothing) {
  auto layout = make_response_layout({2, 2}, f32({1, 1, 0, 0}));
  auto lp = f32({-1, -2, -3, -4}).requires_grad_(true);
  LossInputs in{.log_probs_T = lp,
                .old_log_probs_T = f32({-1, -2, -9, -9}),
                .advantages_T = f32({1, 1, 5, 5})};
  auto r = policy_loss(in, layout, LossOptions{}, 2.0);
  r.loss.backward();
  EXPECT_FLOAT_EQ(r.loss.item<float>(), -0.5f);  // sample 1: mean(-1, -1) = -1; /2
  auto g = values(lp.grad());
  EXPECT_EQ(g[2], 0.0f);
  EXPECT_EQ(g[3], 0.0f);
  EXPECT_FLOAT_EQ(g[0], -0.25f);  // d(-ratio*A)/dlogp = -1 at ratio 1, / 2 tokens / 2
  EXPECT_FLOAT_EQ(metric(r, "pg_clipfrac"), 0.0f);
}

TEST(PolicyLoss, TisWeightsByHand) {
  LossOptions o{.use_tis = true, .tis_clip = 2.0, .tis_clip_low = 0.5};
  auto w = compute_tis_weights(f32({0, 1, -1, 0}), f32({0, 0, 0, 0.1f}), o);
  auto v = values(w.weight_T);
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(v[1], 2.0f);  // e clipped to 2
  EXPECT_FLOAT_EQ(v[2], 0.5f);  // 1/e clipped up to 0.5
  EXPECT_NEAR(v[3], std::exp(-0.1), testing::tol::fp32_chain_bound(1.0, 2, 1));  // 0.1f, exp
  EXPECT_EQ(values(w.clipfrac_T), (std::vector<float>{0, 1, 1, 0}));
  EXPECT_NEAR(values(w.abs_T)[1], std::exp(1.0) - 1, testing::tol::fp32_chain_bound(2.8, 2, 1));
}

TEST(PolicyLoss, TotalCombinesEntropyAndKl) {
  auto layout = make_response_layout({2}, f32({1, 1}));
  LossInputs in{.log_probs_T = f32({-1, -1}),
                .old_log_probs_T = f32({-1, -1}),
                .advantages_T = f32({2, 2}),
                .ref_log_probs_T = f32({-1.5, -0.5}),
                .entropy_T = f32({3, 1})};
  LossOptions o{.entropy_coef = 0.1, .use_kl_loss = true, .kl_loss_coef = 0.5};
  auto r = policy_loss(in, layout, o);
  // pg = -2, entropy = 2, k1 kl = mean(0.5, -0.5) = 0: loss = -2 - 0.2 + 0
  // Means of two terms and products with the float coefficients: ~8 roundings at scale 2.2.
  const double total_tol = testing::tol::fp32_chain_bound(2.2, 8, 1);
  EXPECT_NEAR(r.loss.item<double>(), -2.2, total_tol);
  EXPECT_NEAR(metric(r, "entropy_loss"), 2.0, total_tol);
  EXPECT_NEAR(metric(r, "kl_loss"), 0.0, total_tol);
}

TEST(PolicyLoss, OpsmAndEssByHand) {
  // Sample 0 drifted (mean log-ratio 0.5 > delta) with A < 0: its loss is zeroed. Sample 1 has
  // A > 0 and stays. ESS of sample 0's weights {e^-1, 1}: (e^-1 + 1)^2 / (2 (e^-2 + 1)).
  auto layout = make_response_layout({2, 1}, f32({1, 1, 1}));
  LossInputs in{.log_probs_T = f32({-2, -1, -1}),
                .old_log_probs_T = f32({-1, -1, -1}),
                .advantages_T = f32({-1, -1, 1})};
  LossOptions o{.use_opsm = true, .opsm_delta = 0.1};
  auto r = policy_loss(in, layout, o);
  // Per sample: mean log-ratio, exp for the weights, sums, squares, a division: <= 12
  // roundings and 2 exps at scale 2 (ess_ratio sums two samples' values).
  const double opsm_tol = testing::tol::fp32_chain_bound(2.0, 12, 2);
  EXPECT_NEAR(r.loss.item<double>(), -1.0, opsm_tol);  // only sample 1: -ratio*A = -1
  EXPECT_NEAR(metric(r, "opsm_clipfrac"), 1.0, opsm_tol);
  const double e = std::exp(-1.0);
  EXPECT_NEAR(metric(r, "ess_ratio"), (e + 1) * (e + 1) / (2 * (e * e + 1)) + 1.0, opsm_tol);
}

TEST(PolicyLoss, AlgorithmOptionRules) {
  AdvantageOptions a{.kl_coef = 0.1};
  LossOptions l{.use_kl_loss = true, .kl_loss_coef = 0.1};
  auto msg = error_of([&] { validate_algorithm_options(a, l); });
  EXPECT_NE(msg.find("cannot both be non-zero"), std::string::npos) << msg;
  a.kl_coef = 0.0;
  validate_algorithm_options(a, l);
  a.estimator = AdvantageEstimator::kGspo;
  msg = error_of([&] { validate_algorithm_options(a, l); });
  EXPECT_NE(msg.find("gspo"), std::string::npos) << msg;
  l.sequence_level_ratio = true;
  validate_algorithm_options(a, l);
}

TEST(PolicyLoss, OptionAndInputErrors) {
  auto msg = error_of([] { validate_loss_options({.eps_clip_c = 0.5}); });
  EXPECT_NE(msg.find("--eps-clip-c"), std::string::npos) << msg;
  msg = error_of([] { validate_loss_options({.tis_clip = 1.0, .tis_clip_low = 2.0}); });
  EXPECT_NE(msg.find("--tis-clip-low"), std::string::npos) << msg;
  auto layout = make_response_layout({2}, f32({1, 1}));
  msg = error_of([&] {
    policy_loss({.log_probs_T = f32({-1, -1}),
                 .old_log_probs_T = f32({-1, -1}),
                 .advantages_T = f32({1, 1})},
                layout, {.use_kl_loss = true});
  });
  EXPECT_NE(msg.find("reference log-probs"), std::string::npos) << msg;
  msg = error_of([&] {
    policy_loss(
        {.log_probs_T = f32({-1}), .old_log_probs_T = f32({-1, -1}), .advantages_T = f32({1, 1})},
        layout, {});
  });
  EXPECT_NE(msg.find("one value per response token"), std::string::npos) << msg;
}

}  // namespace
}  // namespace furlong::rl
