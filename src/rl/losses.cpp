#include "rl/losses.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <optional>

#include "core/error.h"

namespace furlong::rl {

namespace {

// Bounds of the log-ratio before exp (keeps the ratio finite).
constexpr double kLogRatioClamp = 20.0;

void check_finite(double value, const char* flag) {
  FURLONG_CHECK(std::isfinite(value), flag, " must be finite, got ", value);
}

void check_tokens(const at::Tensor& x_T, const ResponseLayout& layout, const char* what) {
  FURLONG_CHECK(x_T.defined(), "policy loss: ", what, " are required but were not given");
  FURLONG_CHECK(x_T.dim() == 1 && x_T.size(0) == layout.loss_mask_T.size(0), "policy loss: ", what,
                " must have one value per response token (", layout.loss_mask_T.size(0),
                "), got shape ", x_T.sizes());
}

}  // namespace

void validate_loss_options(const LossOptions& o) {
  check_finite(o.eps_clip, "--eps-clip");
  FURLONG_CHECK(o.eps_clip >= 0.0, "--eps-clip must be >= 0, got ", o.eps_clip);
  FURLONG_CHECK(o.clip_high() >= 0.0, "--eps-clip-high must be >= 0, got ", o.clip_high());
  if (o.eps_clip_c) {
    FURLONG_CHECK(*o.eps_clip_c > 1.0, "--eps-clip-c (dual clip) must be > 1, got ", *o.eps_clip_c);
  }
  FURLONG_CHECK(o.tis_clip_low >= 0.0 && o.tis_clip_low <= o.tis_clip,
                "--tis-clip-low must be in [0, --tis-clip], got ", o.tis_clip_low,
                " with --tis-clip ", o.tis_clip);
  check_finite(o.entropy_coef, "--entropy-coef");
  check_finite(o.kl_loss_coef, "--kl-loss-coef");
  FURLONG_CHECK(o.use_kl_loss || o.kl_loss_coef == 0.0,
                "--kl-loss-coef is set but --use-kl-loss is not");
  FURLONG_CHECK(std::isfinite(o.opsm_delta) && o.opsm_delta >= 0.0,
                "--opsm-delta must be a finite value >= 0, got ", o.opsm_delta);
}

void validate_algorithm_options(const AdvantageOptions& a, const LossOptions& l) {
  validate_advantage_options(a);
  validate_loss_options(l);
  FURLONG_CHECK(a.kl_coef == 0.0 || l.kl_loss_coef == 0.0,
                "--kl-coef and --kl-loss-coef cannot both be non-zero (got ", a.kl_coef, " and ",
                l.kl_loss_coef, ")");
  const bool gspo = a.estimator == AdvantageEstimator::kGspo;
  FURLONG_CHECK(gspo == l.sequence_level_ratio,
                "the sequence-level ratio must be on exactly for --advantage-estimator gspo (got ",
                advantage_estimator_name(a.estimator),
                " with sequence_level_ratio=", l.sequence_level_ratio, ")");
}

PolicyLossTerms compute_policy_loss(const at::Tensor& log_probs_T,
                                    const at::Tensor& old_log_probs_T,
                                    const at::Tensor& advantages_T, const ResponseLayout& layout,
                                    const LossOptions& o) {
  check_tokens(log_probs_T, layout, "log-probs");
  check_tokens(old_log_probs_T, layout, "old log-probs");
  check_tokens(advantages_T, layout, "advantages");
  auto old_T = old_log_probs_T.detach();
  auto adv_T = advantages_T.detach();
  // Masked first, so NaN/inf at masked (or broken) positions all end up as 0.
  auto ppo_kl_T = at::nan_to_num((old_T - log_probs_T) * layout.loss_mask_T, 0.0, 0.0, 0.0);
  if (o.sequence_level_ratio) {
    ppo_kl_T = broadcast_to_tokens(masked_mean_per_sample(ppo_kl_T, layout), layout);
  }
  auto ratio_T = at::exp(at::clamp(-ppo_kl_T, -kLogRatioClamp, kLogRatioClamp));
  auto unclipped_T = -ratio_T * adv_T;
  auto clipped_T = -at::clamp(ratio_T, 1.0 - o.eps_clip, 1.0 + o.clip_high()) * adv_T;
  auto loss_T = at::maximum(unclipped_T, clipped_T);
  PolicyLossTerms terms;
  terms.clipfrac_T = at::gt(clipped_T, unclipped_T).to(at::kFloat).detach();
  if (o.eps_clip_c) {
    auto dual_T = -(*o.eps_clip_c) * adv_T;
    loss_T = at::where(adv_T < 0, at::minimum(dual_T, loss_T), loss_T);
  }
  terms.pg_loss_T = loss_T;
  terms.ppo_kl_T = ppo_kl_T.detach();
  return terms;
}

TisWeights compute_tis_weights(const at::Tensor& old_log_probs_T,
                               const at::Tensor& rollout_log_probs_T, const LossOptions& o) {
  at::NoGradGuard no_grad;
  FURLONG_CHECK(old_log_probs_T.defined() && rollout_log_probs_T.defined() &&
                    old_log_probs_T.sizes() == rollout_log_probs_T.sizes(),
                "--use-tis needs the rollout log-probs of every response token");
  auto raw_T = at::exp(old_log_probs_T - rollout_log_probs_T);
  TisWeights w;
  w.weight_T = at::clamp(raw_T, o.tis_clip_low, o.tis_clip);
  w.clipfrac_T = at::ne(w.weight_T, raw_T).to(at::kFloat);
  w.abs_T = at::abs(raw_T - 1.0);
  return w;
}

namespace {

at::Tensor kl_loss_per_token(const LossInputs& in, const ResponseLayout& layout,
                             const LossOptions& o) {
  check_tokens(in.ref_log_probs_T, layout, "reference log-probs (--use-kl-loss)");
  auto kl_T = compute_approx_kl(in.log_probs_T, in.ref_log_probs_T.detach(), o.kl_loss_type);
  if (o.use_unbiased_kl) kl_T = kl_T * at::exp(in.log_probs_T - in.old_log_probs_T.detach());
  return kl_T;
}

// Per-sample effective sample size ratio of the importance weights w = exp(-ppo_kl) over the
// sample's masked tokens, broadcast to its tokens (0 for a sample without masked tokens).
at::Tensor ess_ratio_per_token(const at::Tensor& ppo_kl_T, const ResponseLayout& layout) {
  auto w_T = at::exp(-ppo_kl_T) * layout.loss_mask_T;
  auto zeros_S = at::zeros({layout.num_samples()}, w_T.options());
  auto sum_w_S = zeros_S.index_add(0, layout.sample_T, w_T);
  auto sum_w2_S = zeros_S.index_add(0, layout.sample_T, w_T * w_T);
  auto count_S = zeros_S.index_add(0, layout.sample_T, layout.loss_mask_T);
  auto denom_S = count_S * sum_w2_S;
  auto ess_S = at::where(denom_S > 0, sum_w_S * sum_w_S / denom_S.clamp_min(1e-30), zeros_S);
  return broadcast_to_tokens(ess_S, layout);
}

// OPSM keep-mask: 0 where A < 0 in a sample whose masked mean of (logp_old - logp) > delta.
at::Tensor opsm_keep_mask(const at::Tensor& ppo_kl_T, const at::Tensor& advantages_T,
                          const ResponseLayout& layout, double delta) {
  auto seq_kl_T = broadcast_to_tokens(masked_mean_per_sample(ppo_kl_T, layout), layout);
  auto negative_T = advantages_T < 0;
  auto drifted_T = seq_kl_T > delta;
  return 1.0 - at::logical_and(negative_T, drifted_T).to(at::kFloat);
}

}  // namespace

LossResult policy_loss(const LossInputs& in, const ResponseLayout& layout, const LossOptions& o,
                       double normalizer) {
  FURLONG_CHECK(normalizer > 0.0, "policy loss: the normalizer must be > 0, got ", normalizer);
  const bool per_token = o.calculate_per_token_loss;
  auto reduce = [&](const at::Tensor& x_T) { return reduce_tokens(x_T, layout, per_token); };
  LossResult out;
  auto metric = [&](const char* name, const at::Tensor& value) {
    out.metrics.emplace_back(name, value.detach());
  };

  auto terms = compute_policy_loss(in.log_probs_T, in.old_log_probs_T, in.advantages_T, layout, o);
  auto pg_T = terms.pg_loss_T;
  at::Tensor opsm_keep_T;
  if (o.use_opsm) {
    // Per token, from the per-token log-ratio (also under GSPO, where ppo_kl_T is already the
    // sample mean, the mean of it is the same value).
    opsm_keep_T = opsm_keep_mask(terms.ppo_kl_T, in.advantages_T.detach(), layout, o.opsm_delta);
    pg_T = pg_T * opsm_keep_T;
  }
  std::optional<TisWeights> tis;
  if (o.use_tis) {
    tis = compute_tis_weights(in.old_log_probs_T.detach(), in.rollout_log_probs_T.detach(), o);
    pg_T = pg_T * tis->weight_T;
  }
  auto pg_loss = reduce(pg_T);
  auto total = pg_loss;
  metric("pg_loss", pg_loss);
  metric("pg_clipfrac", reduce(terms.clipfrac_T));
  metric("ppo_kl", reduce(terms.ppo_kl_T));
  metric("ess_ratio", reduce(ess_ratio_per_token(terms.ppo_kl_T, layout)));

  if (o.entropy_coef != 0.0 || in.entropy_T.defined()) {
    check_tokens(in.entropy_T, layout, "entropies (--entropy-coef)");
    auto entropy_T = o.entropy_coef != 0.0 ? in.entropy_T : in.entropy_T.detach();
    auto entropy_loss = reduce(entropy_T);
    if (o.entropy_coef != 0.0) total = total - o.entropy_coef * entropy_loss;
    metric("entropy_loss", entropy_loss);
  }
  if (o.use_kl_loss) {
    auto kl_T = kl_loss_per_token(in, layout, o);
    if (o.kl_loss_coef == 0.0) kl_T = kl_T.detach();
    auto kl_loss = reduce(kl_T);
    if (o.kl_loss_coef != 0.0) total = total + o.kl_loss_coef * kl_loss;
    metric("kl_loss", kl_loss);
  }
  if (o.use_opsm) metric("opsm_clipfrac", reduce(1.0 - opsm_keep_T));
  if (in.rollout_log_probs_T.defined()) {
    check_tokens(in.rollout_log_probs_T, layout, "rollout log-probs");
    auto old_T = in.old_log_probs_T.detach();
    auto rollout_T = in.rollout_log_probs_T.detach();
    metric("train_rollout_logprob_abs_diff", reduce(at::abs(old_T - rollout_T)));
    metric("train_rollout_kl", reduce(compute_approx_kl(rollout_T, old_T, KlType::kLowVarKl)));
  }
  if (tis) {
    metric("tis", reduce(tis->weight_T));
    metric("tis_clipfrac", reduce(tis->clipfrac_T));
    metric("tis_abs", reduce(tis->abs_T));
    metric("ois", reduce(at::exp(-terms.ppo_kl_T)));
  }
  out.metrics.insert(out.metrics.begin(), {"loss", total.detach()});
  out.loss = total / normalizer;
  return out;
}

}  // namespace furlong::rl
