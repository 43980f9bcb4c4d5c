// The flat layout in which the trainer holds a micro-batch's response tokens, and the
// reductions of per-token values over it (miles' get_sum_of_sample_mean and the per-token sum).
//
// The responses of S samples are concatenated into T = sum(lengths) positions; every per-token
// tensor of the rl layer is fp32 [T] in that order. loss_mask_T is 0/1 (a removed sample has an
// all-zero mask). denominator_S is the per-sample loss denominator D_i: its own mask sum unless
// the caller passes another value (compact siblings share their rollout's mask sum).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace furlong::rl {

struct ResponseLayout {
  std::vector<int64_t> lengths{};  // response length per sample (each >= 0)
  at::Tensor loss_mask_T{};        // fp32 [T]
  at::Tensor sample_T{};           // int64 [T], index of the sample each token belongs to
  at::Tensor denominator_S{};      // fp32 [S], D_i (not yet clamped to >= 1)

  int64_t num_samples() const { return static_cast<int64_t>(lengths.size()); }
  int64_t num_tokens() const;
  // The same layout with its tensors on `device` (no copy when they are there already).
  ResponseLayout to(const at::Device& device) const;
};

// Builds the layout; checks that the mask has sum(lengths) entries. `denominators`, if given,
// has one entry per sample (else D_i = sum of sample i's mask). Tensors live on the mask's
// device.
// Per-sample fp32 [length] tensors concatenated into one [T] tensor in the layout's order (an
// empty fp32 [0] tensor for no samples), and a float vector as an fp32 [n] tensor.
at::Tensor concat_tokens(const std::vector<at::Tensor>& per_sample_T);
at::Tensor fp32_tensor(const std::vector<float>& values);

ResponseLayout make_response_layout(std::vector<int64_t> lengths, const at::Tensor& loss_mask_T,
                                    const std::optional<std::vector<double>>& denominators = {});

// Sum over samples of (sum_t x_t * m_t) / max(1, D_i): the "sum of sample means".
at::Tensor sum_of_sample_mean(const at::Tensor& x_T, const ResponseLayout& layout);
// Sum over all tokens of x_t * m_t (--calculate-per-token-loss).
at::Tensor sum_of_token_values(const at::Tensor& x_T, const ResponseLayout& layout);
// One of the two above.
at::Tensor reduce_tokens(const at::Tensor& x_T, const ResponseLayout& layout, bool per_token);

// Per-sample masked mean (sum_t x_t * m_t) / max(1, sum_t m_t), fp32 [S].
at::Tensor masked_mean_per_sample(const at::Tensor& x_T, const ResponseLayout& layout);
// Broadcasts a per-sample value [S] to every token of its sample [T].
at::Tensor broadcast_to_tokens(const at::Tensor& v_S, const ResponseLayout& layout);

}  // namespace furlong::rl
