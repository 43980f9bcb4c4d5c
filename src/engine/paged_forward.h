// One engine step through the model: the new tokens of several sequences, packed, run through
// the model's own blocks (models::CausalLM::block) with attention replaced by attention over
// each sequence's paged KV cache. A sequence with nothing cached (a fresh prompt) attends
// exactly as the trainer does (models::attention over one document); a sequence with a cached
// prefix (decode, one token) attends over the cache.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "engine/kv_cache.h"
#include "kernels/packed_linear.h"
#include "models/causal_lm.h"

namespace furlong::engine {

// One layer of a sequence's Gated DeltaNet state: the conv window [C, W-1] and the recurrent
// state [Hv, dk, dv] (fp32) after the tokens it has run, and `spare`, a buffer of the state's
// shape that a decode step writes the next state into (the two swap when the step commits).
struct LinearLayerState {
  at::Tensor window, state, spare;
};
// A sequence's DeltaNet state (hybrid models such as Qwen3.5), per layer; empty before its
// first step, and unused entries for softmax layers.
using LinearState = std::vector<LinearLayerState>;

struct StepSequence {
  const int64_t* new_tokens = nullptr;  // `num_new` ids
  int64_t num_new = 0;
  int64_t start = 0;  // position of the first new token = tokens already cached
  at::Tensor slots;   // int64 [>= start + num_new], on the host: cache slot of every position
  LinearState* linear_state = nullptr;  // the sequence's DeltaNet state (hybrid models only)
};

// The DeltaNet states a step computed, given to its sequences by commit() once the whole step
// has succeeded: a step that fails and is retried starts from the states it started from.
struct StagedLinearStates {
  std::function<void()> commit;  // unset when the model has no DeltaNet layers
};

// Writes the K/V of every new token into `cache` and returns the final hidden states (after
// the final norm) of each sequence's last new token, [B, D] in the model's dtype. Its indices
// (tokens, positions, slots) are built on the host and reach a CUDA device as non-blocking
// copies from pinned memory, so a decode step queues its kernels without waiting for the GPU. When
// the cache records routing, the new tokens' expert ids (-1 in dense layers) go into its routing
// pool at the same slots.
// `packed` (may be null): the model's weights in oneDNN's layout, for the GEMMs
// kernels::inference_linear would leave to at::linear (kernels/packed_linear.h).
// Models with DeltaNet layers also need every sequence's `linear_state` and `staged` (their
// new states, to commit).
at::Tensor paged_forward(const models::CausalLM& model, KvCache& cache,
                         const std::vector<StepSequence>& seqs,
                         const models::ForwardOptions& options,
                         const kernels::PackedWeights* packed = nullptr,
                         StagedLinearStates* staged = nullptr);

// Logits [B, V] (model dtype) of final hidden states, as the model's lm_head computes them.
at::Tensor lm_head_logits(const models::CausalLM& model, const at::Tensor& hidden_BD,
                          const kernels::PackedWeights* packed = nullptr);

}  // namespace furlong::engine
