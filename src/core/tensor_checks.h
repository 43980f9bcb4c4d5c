// Checks over whole tensors that read them once and allocate nothing of their size.
#pragma once

#include <ATen/core/Tensor.h>

namespace furlong {

// True when no element is NaN, inf or -inf (integer and empty tensors: true). One pass over
// the tensor (at::aminmax: NaN propagates into both results, an infinity shows in one), where
// at::isfinite(t).all() first writes a bool per element, and the fresh pages of that temporary
// cost more than the read: 0.16-0.75 s for a ~100M model's fp32 weights in a colocated RL run,
// where aminmax over 100M fp32 values takes about 0.01 s (2 threads, measured).
bool all_finite(const at::Tensor& t);

}  // namespace furlong
