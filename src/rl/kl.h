// KL estimators between a policy and a base policy, per token, from log-probs only (miles'
// compute_approx_kl). With d = logp - logp_base:
//   k1         d
//   k2         d^2 / 2
//   k3         exp(e) - 1 - e, e = -d                     (unbiased, non-negative)
//   low_var_kl k3 with e clamped to [-20, 20] first and the result clamped to [-10, 10]
// The same type serves the reward-level KL (--kl-coef) and the KL loss (--kl-loss-type).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace furlong::rl {

enum class KlType { kK1, kK2, kK3, kLowVarKl };

// "k1" | "k2" | "k3" | "low_var_kl"; anything else is a furlong::Error naming `flag`.
KlType parse_kl_type(const std::string& name, const std::string& flag = "--kl-loss-type");
const char* kl_type_name(KlType type);

// Elementwise estimate of KL(pi || pi_base) at the sampled tokens; differentiable in both
// inputs; same shape as the inputs (which must match).
at::Tensor compute_approx_kl(const at::Tensor& logp, const at::Tensor& logp_base, KlType type);

}  // namespace furlong::rl
