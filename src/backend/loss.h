// Losses over a micro-batch, from the log-probs of its response tokens. Each returns the loss
// to back-propagate (before the data-parallel scaling the backend applies) and metric sums.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "backend/micro_batch.h"
#include "models/logprobs.h"

namespace furlong::backend {

struct LossOutput {
  at::Tensor loss;                        // scalar
  std::map<std::string, double> metrics;  // sums over the micro-batch's samples (or tokens)
};

// Supervised fine-tuning: -log p of the response tokens, reduced per sample (mean over the
// sample's masked tokens, summed over samples) or, with per_token, summed over tokens.
LossOutput sft_loss(const MicroBatch& mb, const models::TokenLogProbs& lp, bool per_token);

}  // namespace furlong::backend
