// Per-token log-probabilities and entropies from final hidden states, in fp32, without
// materializing the full [T, V] fp32 logits: rows are processed in chunks (a fused linear +
// log-softmax). For backward, logits are kept in the compute dtype when small enough, else
// recomputed chunk by chunk.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace furlong::models {

struct LogProbOptions {
  // Logits are divided by this before the softmax (the rollout's sampling temperature).
  double temperature = 1.0;
  bool with_entropy = true;
  // Upper bound on the fp32 logits held at once; sets the chunk size as rows per chunk.
  int64_t chunk_bytes = int64_t{256} << 20;
  // Logits (in the hidden states' dtype) up to this size are kept from forward for backward;
  // larger ones are recomputed chunk by chunk in backward (one extra matmul, no [T, V] memory).
  int64_t saved_logits_bytes = int64_t{1} << 30;
};

struct TokenLogProbs {
  at::Tensor logprobs_T;  // fp32 [T]: log softmax(logits / temperature)[target]
  at::Tensor entropy_T;   // fp32 [T]: entropy of that distribution (undefined without entropy)
};

// hidden_TD: final hidden states (after the final norm) of the rows to score; head_VD: the
// lm_head weight; targets_T: int64 token ids. Logits are computed in the hidden states' dtype
// (as the model does), then upcast to fp32. Differentiable w.r.t. hidden_TD and head_VD.
TokenLogProbs token_logprobs(const at::Tensor& hidden_TD, const at::Tensor& head_VD,
                             const at::Tensor& targets_T, const LogProbOptions& options = {});

// The same per-row log-probabilities from logits already computed (rows [R, V] in the model's
// dtype, as at::linear(hidden, head) gives them): fp32 [R], bit-identical to what
// token_logprobs computes for the same logits. No autograd.
at::Tensor logprobs_from_logits(const at::Tensor& logits_RV, const at::Tensor& targets_R,
                                double temperature);

}  // namespace furlong::models
