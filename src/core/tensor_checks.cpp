#include "core/tensor_checks.h"

#include <ATen/ops/aminmax.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/stack.h>

namespace furlong {

bool all_finite(const at::Tensor& t) {
  if (t.numel() == 0 || !at::isFloatingType(t.scalar_type())) return true;
  const auto [lo, hi] = at::aminmax(t);
  return at::isfinite(at::stack({lo, hi})).all().item<bool>();
}

}  // namespace furlong
