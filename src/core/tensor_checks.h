// Checks over whole tensors that read them once and allocate nothing of their size.
#pragma once

#include <ATen/core/Tensor.h>

namespace furlong {

// True when no element is NaN, inf or -inf (integer and empty tensors: true). One pass over
// the tensor (at::aminmax: NaN propagates into both results, an infinity shows in one), where
// at::isfinite(t).all() first writes a bool per element, and faulting in the fresh pages of
// that temporary costs far more than the read itself.
bool all_finite(const at::Tensor& t);

}  // namespace furlong
