// Packing a micro-batch of samples into one packed forward pass.
//
// Response token p of a sample (p >= prompt length) is predicted by the hidden state of the
// packed row that holds its token p - 1 (models::pack_sequences: with share_prompts, samples
// with the same prompt hold it once); `rows_T` lists those rows for every response token of every
// sample, in sample order, so T = total response tokens. `layout` is the rl layer's view of
// the same T tokens (loss mask, owning sample, per-sample denominators): the losses reduce
// over it (rl::reduce_tokens), so SFT and RL share one per-sample reduction.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "models/packed_batch.h"
#include "rl/layout.h"
#include "rl/sample.h"

namespace furlong::backend {

struct MicroBatch {
  models::PackedBatch batch;
  at::Tensor rows_T;          // int64 packed positions that predict response tokens
  at::Tensor targets_T;       // int64 the response tokens
  rl::ResponseLayout layout;  // R tokens; the mask is all zeros for removed samples
  int64_t num_samples() const { return layout.num_samples(); }
};

// An empty list gives a one-token placeholder batch with no rows (so every rank still runs a
// forward/backward and FSDP's collectives line up).
MicroBatch pack_micro_batch(const std::vector<const rl::Sample*>& samples, bool share_prompts);

}  // namespace furlong::backend
