#include "rl/kl.h"

#include <ATen/ATen.h>

#include "core/error.h"

namespace furlong::rl {

KlType parse_kl_type(const std::string& name, const std::string& flag) {
  if (name == "k1") return KlType::kK1;
  if (name == "k2") return KlType::kK2;
  if (name == "k3") return KlType::kK3;
  if (name == "low_var_kl") return KlType::kLowVarKl;
  FURLONG_FAIL(flag, ": unknown KL estimator '", name, "'; expected one of k1, k2, k3, low_var_kl");
}

const char* kl_type_name(KlType type) {
  switch (type) {
    case KlType::kK1:
      return "k1";
    case KlType::kK2:
      return "k2";
    case KlType::kK3:
      return "k3";
    case KlType::kLowVarKl:
      return "low_var_kl";
  }
  return "unknown";
}

at::Tensor compute_approx_kl(const at::Tensor& logp, const at::Tensor& logp_base, KlType type) {
  FURLONG_CHECK(logp.sizes() == logp_base.sizes(), "compute_approx_kl: log-prob shapes differ (",
                logp.sizes(), " vs ", logp_base.sizes(), ")");
  auto d = logp - logp_base;
  switch (type) {
    case KlType::kK1:
      return d;
    case KlType::kK2:
      return d * d / 2.0;
    case KlType::kK3: {
      auto e = -d;
      return at::exp(e) - 1.0 - e;
    }
    case KlType::kLowVarKl: {
      auto e = at::clamp(-d, -20.0, 20.0);
      return at::clamp(at::exp(e) - 1.0 - e, -10.0, 10.0);
    }
  }
  FURLONG_ASSERT(false, "unhandled KlType");
  return d;
}

}  // namespace furlong::rl
