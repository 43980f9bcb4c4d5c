// Packing a micro-batch of samples into one packed forward pass, and the per-sample reductions
// of per-token values (miles' sum_of_sample_mean).
//
// Response token p of a sample (p >= prompt length) is predicted by the hidden state at packed
// position offset + p - 1; `rows_R` lists those positions for every response token of every
// sample, in sample order, so R = total response tokens.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "models/packed_batch.h"
#include "rl/sample.h"

namespace furlong::train {

struct MicroBatch {
  models::PackedBatch batch;
  at::Tensor rows_R;     // int64 packed positions that predict response tokens
  at::Tensor targets_R;  // int64 the response tokens
  at::Tensor mask_R;     // fp32 loss mask (zeros for removed samples)
  at::Tensor sample_R;   // int64 index of the sample (within the micro-batch) of each row
  std::vector<int64_t> response_lengths;
  std::vector<double> mask_sums;  // per sample, sum of the mask
  int64_t num_samples() const { return static_cast<int64_t>(response_lengths.size()); }
};

// An empty list gives a one-token placeholder batch with no rows (so every rank still runs a
// forward/backward and FSDP's collectives line up).
MicroBatch pack_micro_batch(const std::vector<const rl::Sample*>& samples);

// sum over samples of (sum_t mask * x_t) / max(sum_t mask, 1)   (per_token = false), or
// sum over samples and tokens of mask * x_t                      (per_token = true).
at::Tensor reduce_per_sample(const at::Tensor& values_R, const MicroBatch& mb, bool per_token);

}  // namespace furlong::train
