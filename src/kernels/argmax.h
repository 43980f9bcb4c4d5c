// The greedy pick of the rollout engine: the index of the largest logit of one row, computed
// with vector compares in two passes over the row (its maximum, then the first element equal to
// it). ATen's argmax over a vocabulary row runs a scalar compare chain; this reads the row
// twice at vector width, the second time from cache (ArgmaxRow.DISABLED_ReportThroughput times
// the two).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace furlong::kernels {

// A CPU tensor of one dimension, fp32 or bf16, contiguous, not empty.
bool argmax_row_supported(const at::Tensor& row_V);

// The index at::argmax(row_V) returns: the first position of the maximum (-0.0 and +0.0 tie),
// or the first NaN where the row holds one. Runs on the calling thread.
int64_t argmax_row(const at::Tensor& row_V);

}  // namespace furlong::kernels
