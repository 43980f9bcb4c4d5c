// Token selection from one row of logits: greedy (temperature 0) or a draw from
// softmax(logits / T) restricted by top-k, top-p and min-p, using the request's own random
// stream (so a request's tokens depend only on its seed and its logits, never on the batch).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace furlong::engine {

// The set of tokens a draw may pick, with their probabilities renormalized (fp64, summing to
// 1), in descending order of probability. logits_V: fp32 [V] on the CPU.
struct Candidates {
  std::vector<int64_t> ids;
  std::vector<double> probs;
};
Candidates sampling_candidates(const at::Tensor& logits_V, const SamplingParams& params);

// One token: argmax when temperature is 0 (logits of any dtype; kernels::argmax_row on a
// CPU fp32/bf16 row), else a draw from sampling_candidates with one uniform number from `rng`
// (fp32 CPU logits).
int64_t sample_token(const at::Tensor& logits_V, const SamplingParams& params,
                     std::mt19937_64& rng);

// SGLang's penalties on one row of fp32 logits, in place, in SGLang's order: repetition
// (scaling: a seen token's logit < 0 is multiplied by the penalty, else divided), then
// frequency and presence (subtracted), then min_new_tokens (eos and stop ids set to -inf
// while fewer than min_new_tokens tokens were generated). `counts` holds each generated
// token's count; `stop_ids` are the ids min_new_tokens masks. A no-op when
// !params.penalized().
void apply_penalties(at::Tensor& logits_V, const SamplingParams& params,
                     const std::unordered_map<int64_t, int64_t>& counts, int64_t generated,
                     const std::vector<int64_t>& stop_ids);

// The top_n tokens of one row of logits (any dtype/device, [V]) with their log-probs at
// temperature T (0 = 1), computed by the same function as the sampled tokens' log-probs.
TopLogprobs top_logprobs(const at::Tensor& logits_V, double temperature, int64_t top_n);

}  // namespace furlong::engine
