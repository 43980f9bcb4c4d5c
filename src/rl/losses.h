// The policy-gradient loss of a micro-batch (miles' policy_loss_function and loss_function),
// over the flat response layout of rl/layout.h.
//
// Per token (masked tokens count for nothing):
//   ppo_kl_t = logp_old - logp (0 at masked tokens, NaN/inf -> 0); GSPO: the sample's masked
//              mean of it, broadcast to all its tokens
//   ratio    = exp(clamp(-ppo_kl, -20, 20))
//   L        = max(-ratio*A, -clip(ratio, 1-eps_clip, 1+eps_clip_high)*A); clipfrac = [L2 > L1]
//   dual clip (c > 1): where A < 0, L = min(-c*A, L)
//   OPSM:    L = 0 where A < 0 and the sample's masked mean of ppo_kl > opsm_delta
//   TIS:     L *= clip(exp(logp_old - logp_rollout), tis_clip_low, tis_clip)
// Reduced per sample (sum of sample means) or per token, then
//   loss = pg_loss - entropy_coef * entropy + kl_loss_coef * kl_loss(pi vs pi_ref).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rl/advantages.h"
#include "rl/kl.h"
#include "rl/layout.h"

namespace furlong::rl {

struct LossOptions {
  double eps_clip = 0.2;                  // --eps-clip
  std::optional<double> eps_clip_high{};  // --eps-clip-high (unset: eps_clip)
  std::optional<double> eps_clip_c{};     // --eps-clip-c (dual clip, > 1)
  bool sequence_level_ratio = false;      // GSPO (--advantage-estimator gspo)
  bool use_tis = false;                   // --use-tis
  double tis_clip = 2.0;                  // --tis-clip
  double tis_clip_low = 0.0;              // --tis-clip-low
  double entropy_coef = 0.0;              // --entropy-coef
  bool use_kl_loss = false;               // --use-kl-loss
  double kl_loss_coef = 0.0;              // --kl-loss-coef (0 = monitor only)
  KlType kl_loss_type = KlType::kK1;      // --kl-loss-type
  bool use_unbiased_kl = false;           // --use-unbiased-kl: KL_t *= exp(logp - logp_old)
  bool calculate_per_token_loss = false;  // --calculate-per-token-loss
  bool use_opsm = false;                  // --use-opsm (off-policy sequence masking)
  double opsm_delta = 1e-4;               // --opsm-delta

  double clip_high() const { return eps_clip_high.value_or(eps_clip); }
};

// Checks ranges (eps_clip >= 0, eps_clip_c > 1, 0 <= tis_clip_low <= tis_clip, finite coefs).
void validate_loss_options(const LossOptions& options);

// Both validators, plus the rules that span them: --kl-coef and --kl-loss-coef cannot both be
// non-zero, and the sequence-level ratio is on exactly for --advantage-estimator gspo.
void validate_algorithm_options(const AdvantageOptions& advantages, const LossOptions& loss);

// Per-token terms of the clipped policy loss, fp32 [T]; pg_loss_T is differentiable in logp.
struct PolicyLossTerms {
  at::Tensor pg_loss_T{};   // before TIS
  at::Tensor clipfrac_T{};  // 1 where the clipped branch won
  at::Tensor ppo_kl_T{};    // logp_old - logp (per-sequence for GSPO), detached
};
PolicyLossTerms compute_policy_loss(const at::Tensor& log_probs_T,
                                    const at::Tensor& old_log_probs_T,
                                    const at::Tensor& advantages_T, const ResponseLayout& layout,
                                    const LossOptions& options);

// Truncated importance sampling between the trainer's old log-probs and the rollout engine's.
struct TisWeights {
  at::Tensor weight_T{};    // clip(exp(old - rollout), low, high), no grad
  at::Tensor clipfrac_T{};  // 1 where the clip changed the weight
  at::Tensor abs_T{};       // |exp(old - rollout) - 1|
};
TisWeights compute_tis_weights(const at::Tensor& old_log_probs_T,
                               const at::Tensor& rollout_log_probs_T, const LossOptions& options);

// What the loss reads; undefined tensors are allowed where the options do not need them.
struct LossInputs {
  at::Tensor log_probs_T{};          // current policy; requires grad in training
  at::Tensor old_log_probs_T{};      // pi_old (6.2)
  at::Tensor advantages_T{};         // from compute_advantages (+ whitening)
  at::Tensor ref_log_probs_T{};      // pi_ref; needed by use_kl_loss
  at::Tensor rollout_log_probs_T{};  // engine's; needed by use_tis (diagnostics when given)
  at::Tensor entropy_T{};            // per-token entropy; needed when entropy_coef != 0
};

struct LossResult {
  // Scalar to back-propagate: the reduced total divided by `normalizer`.
  at::Tensor loss{};
  // Detached 0-dim tensors, in miles' names (loss, pg_loss, pg_clipfrac, ppo_kl, ess_ratio,
  // entropy_loss, kl_loss, opsm_clipfrac, tis, tis_clipfrac, tis_abs, ois, and with rollout
  // log-probs train_rollout_logprob_abs_diff, train_rollout_kl), each the reduced SUM over this
  // micro-batch (not divided by `normalizer`): sum them over micro-batches and ranks, then
  // divide by the number of samples (or tokens, per-token mode) in the step. ess_ratio is the
  // per-sample (sum w)^2 / (N sum w^2), w = exp(-ppo_kl) over the N masked tokens, reduced as
  // a value every token of the sample carries.
  std::vector<std::pair<std::string, at::Tensor>> metrics;
};

// The full loss of one micro-batch. `normalizer` is the global number of samples in the step
// (or of loss tokens with calculate_per_token_loss), so that summing the micro-batches' losses
// gives miles' objective; 1 returns the plain reduced sum.
LossResult policy_loss(const LossInputs& inputs, const ResponseLayout& layout,
                       const LossOptions& options, double normalizer = 1.0);

}  // namespace furlong::rl
