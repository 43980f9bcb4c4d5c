// Token selection from one row of logits: greedy (temperature 0) or a draw from
// softmax(logits / T) restricted by top-k, top-p and min-p, using the request's own random
// stream (so a request's tokens depend only on its seed and its logits, never on the batch).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>

#include "engine/engine.h"

namespace furlong::engine {

// The set of tokens a draw may pick, with their probabilities renormalized (fp64, summing to
// 1), in descending order of probability. logits_V: fp32 [V] on the CPU.
struct Candidates {
  std::vector<int64_t> ids;
  std::vector<double> probs;
};
Candidates sampling_candidates(const at::Tensor& logits_V, const SamplingParams& params);

// One token: argmax when temperature is 0, else a draw from sampling_candidates with one
// uniform number from `rng`.
int64_t sample_token(const at::Tensor& logits_V, const SamplingParams& params,
                     std::mt19937_64& rng);

}  // namespace furlong::engine
