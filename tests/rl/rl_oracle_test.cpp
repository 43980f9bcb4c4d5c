// Parity of src/rl against scripts/oracles/rl_reference.py, an independent torch
// implementation of the spec's formulas (sample by sample, not over the flat layout). Inputs
// are random fp32 values drawn here; one plan with every case goes to the oracle once per
// build tree (cached_oracle), and each test compares one family of cases.
//
// Tolerances (tests/common/tolerances.h). Elementwise quantities run the same ATen kernels on
// both sides, but the oracle works on per-sample slices, so vectorized and scalar exp paths can
// meet; the reductions add the same terms in a different order. Every compared value is O(1) or
// a sum or mean of at most kMaxTerms = 56 (all tokens) O(1) terms, normalized so that the
// absolute sum of the terms is at the scale max(|ref|, 1) (the floor 1 is the scale of the
// summed terms: log-probs, ratios and advantages are O(1)). Per side: a reduction of 56 terms,
// gamma_prob(56) = 6 sqrt(56) u = 2.7e-6 (worst case gamma_56 = 3.3e-6), two exps (ratio and
// TIS/OPSM weight, kExpRelErr each) and ~4 more roundings; twice that for two implementations:
// kTol = 7.1e-6 relative to max(|ref|, 1). Observed <= 1e-7.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "common/test_util.h"
#include "common/tolerances.h"
#include "core/json_util.h"
#include "rl/advantages.h"
#include "rl/kl.h"
#include "rl/losses.h"

namespace furlong::rl {
namespace {

using testing::max_rel_diff;

// Lengths include an empty sample; sample 3 is removed (all-zero mask).
const std::vector<int64_t> kLengths = {7, 0, 13, 6, 1, 20, 9};
// The sum of kLengths (56): no reduction adds more terms.
const double kMaxTerms = std::accumulate(kLengths.begin(), kLengths.end(), 0.0);
const double kTol = 2 * (testing::tol::gamma_prob(kMaxTerms, testing::tol::kUFp32) +
                         2 * testing::tol::kExpRelErr + 4 * testing::tol::kUFp32);
constexpr double kFloor = 1.0;

// ---------------------------------------------------------------- random inputs
struct Rng {
  std::mt19937 gen;
  explicit Rng(uint32_t seed) : gen(seed) {}
  std::vector<float> normal(size_t n, float mean, float sd) {
    std::normal_distribution<float> d(mean, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen);
    return v;
  }
  std::vector<float> mask(size_t n, float p_one) {
    std::bernoulli_distribution d(p_one);
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen) ? 1.0f : 0.0f;
    return v;
  }
};

std::vector<float> plus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

struct TokenData {
  std::vector<float> mask, log_probs, old_log_probs, ref_log_probs, rollout_log_probs, entropy;
};

TokenData token_data(uint32_t seed, float policy_drift) {
  Rng rng(seed);
  int64_t t = 0;
  for (auto n : kLengths) t += n;
  TokenData d;
  d.mask = rng.mask(t, 0.8f);
  for (int64_t i = 20; i < 26; ++i) d.mask[i] = 0.0f;  // sample 3 (offset 20, length 6)
  d.log_probs = rng.normal(t, -1.0f, 0.8f);
  for (auto& x : d.log_probs) x = -std::abs(x) - 0.01f;
  d.old_log_probs = plus(d.log_probs, rng.normal(t, 0.0f, policy_drift));
  d.ref_log_probs = plus(d.log_probs, rng.normal(t, 0.0f, 0.5f));
  d.rollout_log_probs = plus(d.old_log_probs, rng.normal(t, 0.0f, 0.6f));
  d.entropy = rng.normal(t, 1.5f, 0.5f);
  for (auto& x : d.entropy) x = std::abs(x);
  return d;
}

at::Tensor tensor_of(const std::vector<float>& v) {
  return at::tensor(v, at::kFloat).reshape({static_cast<int64_t>(v.size())}).clone();
}

at::Tensor tensor_of(const Json& j) {
  std::vector<float> v;
  for (const auto& x : j) v.push_back(x.get<float>());
  return tensor_of(v);
}

// ---------------------------------------------------------------- the plan
Json reward_norm_case(const std::string& name, const std::string& estimator, bool norm,
                      bool std_norm, int64_t n, std::vector<double> rewards,
                      std::vector<int64_t> groups, std::vector<int64_t> rollout_ids = {}) {
  return {{"name", name},
          {"kind", "reward_norm"},
          {"rewards", rewards},
          {"group_index", groups},
          {"rollout_id", rollout_ids},
          {"options",
           {{"estimator", estimator},
            {"rewards_normalization", norm},
            {"grpo_std_normalization", std_norm},
            {"n_samples_per_prompt", n}}}};
}

void add_reward_norm_cases(Json& cases) {
  // 4 groups of 4, interleaved group ids; group 2 all equal (0.7), group 3 binary.
  std::vector<double> r = {1.0,  0.0, 0.7, 1.0, 0.25,  0.5,  0.7, 0.0,
                           -2.0, 3.5, 0.7, 1.0, 0.125, 1e-3, 0.7, 0.0};
  std::vector<int64_t> g = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  for (const char* est : {"grpo", "gspo", "reinforce_plus_plus_baseline", "reinforce_plus_plus"}) {
    cases.push_back(reward_norm_case(std::string("rn_") + est, est, true, true, 4, r, g));
  }
  cases.push_back(reward_norm_case("rn_grpo_no_std", "grpo", true, false, 4, r, g));
  cases.push_back(reward_norm_case("rn_grpo_disabled", "grpo", false, true, 4, r, g));
  cases.push_back(
      reward_norm_case("rn_grpo_n1", "grpo", true, true, 1, {0.3, 1.0, -1.0}, {0, 1, 2}));
  // Rollout 7 has two siblings (samples 1, 2) counted once in group 0's statistics.
  cases.push_back(reward_norm_case("rn_siblings", "grpo", true, true, 3,
                                   {1.0, 0.5, 0.5, 0.0, 2.0, 1.0}, {0, 0, 0, 0, 1, 1},
                                   {4, 7, 7, 9, 10, 11}));
}

void add_kl_cases(Json& cases) {
  Rng rng(7);
  auto logp = rng.normal(64, -1.0f, 1.0f);
  auto base = plus(logp, rng.normal(64, 0.0f, 1.0f));
  // Beyond the low_var_kl clamps: |d| > 20 and results > 10.
  base[0] = logp[0] - 25.0f;
  base[1] = logp[1] + 30.0f;
  base[2] = logp[2] - 4.0f;
  base[3] = logp[3] + 3.0f;
  for (const char* type : {"k1", "k2", "k3", "low_var_kl"}) {
    cases.push_back({{"name", std::string("kl_") + type},
                     {"kind", "kl"},
                     {"type", type},
                     {"logp", logp},
                     {"logp_base", base}});
  }
}

void add_advantage_cases(Json& cases) {
  auto d = token_data(11, 0.2f);
  Rng rng(12);
  auto rewards = rng.normal(kLengths.size(), 0.0f, 1.0f);
  auto add = [&](const std::string& name, const std::string& est, double kl_coef,
                 const std::string& kl_type, double gamma, bool normalize) {
    cases.push_back({{"name", name},
                     {"kind", "advantages"},
                     {"lengths", kLengths},
                     {"mask", d.mask},
                     {"rewards", rewards},
                     {"log_probs", d.old_log_probs},
                     {"ref_log_probs", d.ref_log_probs},
                     {"options",
                      {{"estimator", est},
                       {"kl_coef", kl_coef},
                       {"kl_type", kl_type},
                       {"gamma", gamma},
                       {"normalize_advantages", normalize}}}});
  };
  add("adv_grpo", "grpo", 0.0, "k1", 1.0, false);
  add("adv_grpo_whiten", "grpo", 0.0, "k1", 1.0, true);
  add("adv_gspo", "gspo", 0.0, "k1", 1.0, false);
  add("adv_rpp", "reinforce_plus_plus", 0.05, "k1", 1.0, true);
  add("adv_rpp_gamma", "reinforce_plus_plus", 0.1, "k3", 0.9, true);
  add("adv_rpp_raw", "reinforce_plus_plus", 0.02, "k2", 0.95, false);
  add("adv_rppb", "reinforce_plus_plus_baseline", 0.02, "low_var_kl", 1.0, true);
  add("adv_rppb_raw", "reinforce_plus_plus_baseline", 0.3, "k1", 1.0, false);
}

Json loss_options(const Json& overrides) {
  Json o = {{"eps_clip", 0.2},
            {"eps_clip_high", nullptr},
            {"eps_clip_c", nullptr},
            {"sequence_level_ratio", false},
            {"use_tis", false},
            {"tis_clip", 2.0},
            {"tis_clip_low", 0.0},
            {"entropy_coef", 0.0},
            {"use_kl_loss", false},
            {"kl_loss_coef", 0.0},
            {"kl_loss_type", "k1"},
            {"use_unbiased_kl", false},
            {"calculate_per_token_loss", false},
            {"use_opsm", false},
            {"opsm_delta", 1e-4}};
  for (auto& [k, v] : overrides.items()) o[k] = v;
  return o;
}

void add_loss_case(Json& cases, const std::string& name, const Json& overrides, float drift,
                   bool with_entropy, uint32_t seed, bool with_rollout = true) {
  auto d = token_data(seed, drift);
  Rng rng(seed + 100);
  auto adv = rng.normal(d.mask.size(), 0.0f, 1.0f);
  auto o = loss_options(overrides);
  double tokens = 0.0;
  for (float m : d.mask) tokens += m;
  cases.push_back(
      {{"name", name},
       {"kind", "loss"},
       {"lengths", kLengths},
       {"mask", d.mask},
       {"log_probs", d.log_probs},
       {"old_log_probs", d.old_log_probs},
       {"advantages", adv},
       {"ref_log_probs", d.ref_log_probs},
       {"rollout_log_probs", with_rollout ? Json(d.rollout_log_probs) : Json::array()},
       {"entropy", with_entropy ? Json(d.entropy) : Json::array()},
       {"normalizer",
        o["calculate_per_token_loss"].get<bool>() ? tokens : static_cast<double>(kLengths.size())},
       {"options", o}});
}

void add_loss_cases(Json& cases) {
  add_loss_case(cases, "loss_ppo", {}, 0.3f, false, 21, /*with_rollout=*/false);
  add_loss_case(cases, "loss_opsm", {{"use_opsm", true}, {"opsm_delta", 0.05}}, 0.3f, false, 32);
  add_loss_case(cases, "loss_gspo_opsm_per_token",
                {{"sequence_level_ratio", true},
                 {"use_opsm", true},
                 {"opsm_delta", 1e-4},
                 {"calculate_per_token_loss", true}},
                0.3f, false, 33);
  add_loss_case(cases, "loss_clip_high_per_token",
                {{"eps_clip_high", 0.28}, {"calculate_per_token_loss", true}}, 0.3f, false, 22);
  add_loss_case(cases, "loss_dual_clip", {{"eps_clip_c", 3.0}}, 1.5f, false, 23);
  add_loss_case(cases, "loss_gspo",
                {{"sequence_level_ratio", true}, {"eps_clip", 3e-4}, {"eps_clip_high", 4e-4}},
                0.05f, false, 24);
  add_loss_case(cases, "loss_tis", {{"use_tis", true}}, 0.3f, false, 25);
  add_loss_case(cases, "loss_tis_low_per_token",
                {{"use_tis", true},
                 {"tis_clip", 1.5},
                 {"tis_clip_low", 0.5},
                 {"calculate_per_token_loss", true}},
                0.3f, false, 26);
  for (const char* type : {"k1", "k2", "k3", "low_var_kl"}) {
    add_loss_case(cases, std::string("loss_kl_entropy_") + type,
                  {{"use_kl_loss", true},
                   {"kl_loss_coef", 0.1},
                   {"kl_loss_type", type},
                   {"entropy_coef", 0.01}},
                  0.3f, true, 27);
  }
  add_loss_case(cases, "loss_unbiased_kl",
                {{"use_kl_loss", true}, {"kl_loss_coef", 0.05}, {"use_unbiased_kl", true}}, 0.3f,
                false, 28);
  add_loss_case(cases, "loss_monitor_only", {{"use_kl_loss", true}, {"kl_loss_type", "k3"}}, 0.3f,
                true, 29);
  add_loss_case(cases, "loss_everything_per_token",
                {{"eps_clip_high", 0.28},
                 {"eps_clip_c", 2.5},
                 {"use_tis", true},
                 {"entropy_coef", 0.005},
                 {"use_kl_loss", true},
                 {"kl_loss_coef", 0.02},
                 {"kl_loss_type", "low_var_kl"},
                 {"calculate_per_token_loss", true}},
                1.0f, true, 30);
  add_loss_case(cases, "loss_gspo_tis_dual",
                {{"sequence_level_ratio", true}, {"use_tis", true}, {"eps_clip_c", 3.0}}, 2.0f,
                false, 31);
}

const Json& plan() {
  static const Json p = [] {
    Json cases = Json::array();
    add_reward_norm_cases(cases);
    add_kl_cases(cases);
    add_advantage_cases(cases);
    add_loss_cases(cases);
    return Json{{"cases", cases}};
  }();
  return p;
}

const Json& case_named(const std::string& name) {
  for (const auto& c : plan()["cases"]) {
    if (c["name"] == name) return c;
  }
  throw std::runtime_error("no case " + name);
}

const Json& oracle() {
  static const Json out = [] {
    auto text = plan().dump();
    auto dir =
        testing::cached_oracle("rl_reference", "oracles/rl_reference.py", text,
                               [&](const std::filesystem::path& d) -> std::vector<std::string> {
                                 std::ofstream(d / "plan.json") << text;
                                 return {(d / "plan.json").string(), (d / "out.json").string()};
                               });
    return read_json_file(dir / "out.json");
  }();
  return out;
}

std::vector<std::string> case_names(const std::string& kind) {
  std::vector<std::string> names;
  for (const auto& c : plan()["cases"]) {
    if (c["kind"] == kind) names.push_back(c["name"]);
  }
  return names;
}

// Prints the measured error (the figures quoted in reports) and returns it.
double report(const std::string& what, double err) {
  std::printf("  %-36s max error %.2e\n", what.c_str(), err);
  return err;
}

// ---------------------------------------------------------------- C++ side of each case
ResponseLayout layout_of(const Json& c) {
  return make_response_layout(c["lengths"].get<std::vector<int64_t>>(), tensor_of(c["mask"]));
}

AdvantageEstimator estimator_of(const Json& o) {
  return parse_advantage_estimator(o["estimator"]);
}

LossOptions loss_options_of(const Json& j) {
  LossOptions o;
  o.eps_clip = j["eps_clip"];
  if (!j["eps_clip_high"].is_null()) o.eps_clip_high = j["eps_clip_high"].get<double>();
  if (!j["eps_clip_c"].is_null()) o.eps_clip_c = j["eps_clip_c"].get<double>();
  o.sequence_level_ratio = j["sequence_level_ratio"];
  o.use_tis = j["use_tis"];
  o.tis_clip = j["tis_clip"];
  o.tis_clip_low = j["tis_clip_low"];
  o.entropy_coef = j["entropy_coef"];
  o.use_kl_loss = j["use_kl_loss"];
  o.kl_loss_coef = j["kl_loss_coef"];
  o.kl_loss_type = parse_kl_type(j["kl_loss_type"]);
  o.use_unbiased_kl = j["use_unbiased_kl"];
  o.calculate_per_token_loss = j["calculate_per_token_loss"];
  o.use_opsm = j["use_opsm"];
  o.opsm_delta = j["opsm_delta"];
  validate_loss_options(o);
  return o;
}

TEST(RlOracle, RewardNormalization) {
  for (const auto& name : case_names("reward_norm")) {
    SCOPED_TRACE(name);
    const auto& c = case_named(name);
    RewardNormOptions o;
    o.estimator = estimator_of(c["options"]);
    o.rewards_normalization = c["options"]["rewards_normalization"];
    o.grpo_std_normalization = c["options"]["grpo_std_normalization"];
    o.n_samples_per_prompt = c["options"]["n_samples_per_prompt"];
    auto got = normalize_group_rewards(c["rewards"].get<std::vector<double>>(),
                                       c["group_index"].get<std::vector<int64_t>>(),
                                       c["rollout_id"].get<std::vector<int64_t>>(), o);
    auto want = oracle()[name]["rewards"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size());
    // Both sides add the same doubles in the same order (group mean, then std): each result is
    // a few roundings of u = 2^-53 = 1.1e-16 of O(1) values, divided by std + 1e-6 >= ~0.1 in
    // these cases: <= ~1e-14; 1e-12 leaves room for a different libm sqrt/division path.
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "sample " << i;
  }
}

TEST(RlOracle, KlEstimators) {
  for (const auto& name : case_names("kl")) {
    SCOPED_TRACE(name);
    const auto& c = case_named(name);
    auto got = compute_approx_kl(tensor_of(c["logp"]), tensor_of(c["logp_base"]),
                                 parse_kl_type(c["type"]));
    auto want = tensor_of(oracle()[name]["kl"]);
    // Same kernels on the same whole tensor: relative 1e-6 at the scale max(|kl|, 1).
    EXPECT_LE(report(name, max_rel_diff(got, want, kFloor)), kTol);
  }
}

TEST(RlOracle, Advantages) {
  for (const auto& name : case_names("advantages")) {
    SCOPED_TRACE(name);
    const auto& c = case_named(name);
    const auto& j = c["options"];
    AdvantageOptions o;
    o.estimator = estimator_of(j);
    o.kl_coef = j["kl_coef"];
    o.kl_type = parse_kl_type(j["kl_type"]);
    o.gamma = j["gamma"];
    o.normalize_advantages = j["normalize_advantages"];
    auto layout = layout_of(c);
    AdvantageInputs in{.rewards_S = tensor_of(c["rewards"]),
                       .log_probs_T = tensor_of(c["log_probs"]),
                       .ref_log_probs_T = tensor_of(c["ref_log_probs"])};
    auto got = compute_and_whiten_advantages(in, layout, o);
    auto want = tensor_of(oracle()[name]["advantages"]);
    EXPECT_LE(report(name, max_rel_diff(got, want, kFloor)), kTol);
  }
}

TEST(RlOracle, PolicyLossMetricsAndGradient) {
  for (const auto& name : case_names("loss")) {
    SCOPED_TRACE(name);
    const auto& c = case_named(name);
    auto layout = layout_of(c);
    auto log_probs = tensor_of(c["log_probs"]).requires_grad_(true);
    const bool with_entropy = !c["entropy"].empty();
    auto entropy = with_entropy ? tensor_of(c["entropy"]).requires_grad_(true) : at::Tensor();
    auto rollout =
        c["rollout_log_probs"].empty() ? at::Tensor() : tensor_of(c["rollout_log_probs"]);
    LossInputs in{.log_probs_T = log_probs,
                  .old_log_probs_T = tensor_of(c["old_log_probs"]),
                  .advantages_T = tensor_of(c["advantages"]),
                  .ref_log_probs_T = tensor_of(c["ref_log_probs"]),
                  .rollout_log_probs_T = rollout,
                  .entropy_T = entropy};
    auto result = policy_loss(in, layout, loss_options_of(c["options"]), c["normalizer"]);
    result.loss.backward();
    const auto& want = oracle()[name];
    auto rel = [](double a, double b) { return std::abs(a - b) / std::max(std::abs(b), kFloor); };
    EXPECT_LE(report(name + " loss", rel(result.loss.item<double>(), want["loss"].get<double>())),
              kTol);
    std::map<std::string, double> got_metrics;
    for (const auto& [k, v] : result.metrics) got_metrics[k] = v.item<double>();
    EXPECT_EQ(got_metrics.size(), want["metrics"].size());
    for (const auto& [k, v] : want["metrics"].items()) {
      ASSERT_TRUE(got_metrics.count(k)) << "metric " << k << " missing";
      EXPECT_LE(rel(got_metrics[k], v.get<double>()), kTol)
          << k << ": " << got_metrics[k] << " vs " << v.get<double>();
    }
    // The gradient is a per-token value scaled by 1/normalizer (and 1/D_i): relative to the
    // largest gradient entry, not to 1.
    auto want_grad = tensor_of(want["grad_log_probs"]);
    double scale = std::max(want_grad.abs().max().item<double>(), 1e-30);
    ASSERT_TRUE(log_probs.grad().defined());
    EXPECT_LE(report(name + " grad", testing::max_abs_diff(log_probs.grad(), want_grad) / scale),
              kTol);
    if (with_entropy) {
      auto want_ent = tensor_of(want["grad_entropy"]);
      auto got_ent = entropy.grad().defined() ? entropy.grad() : at::zeros_like(entropy);
      double s = std::max(want_ent.abs().max().item<double>(), 1e-30);
      EXPECT_LE(testing::max_abs_diff(got_ent, want_ent) / s, kTol);
    }
  }
}

}  // namespace
}  // namespace furlong::rl
