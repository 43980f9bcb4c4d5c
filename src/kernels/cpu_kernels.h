// Fused CPU kernels for the element-wise chains of Llama-family models. Each replaces several
// ATen ops (and their temporaries) by one pass over the data, split over rows with
// at::parallel_for and vectorized per CPU (AVX-512, AVX2 or baseline, chosen at load time).
// cpu_kernels.cpp is built with -fopenmp (kernels/CMakeLists.txt), so the rows run on ATen's
// intra-op threads; a row's result does not depend on the thread count or the split.
//
// Numerics: fp32 inputs give the same math as the ATen reference to rounding (sums may be
// ordered differently). bf16 inputs reproduce transformers' rounding steps (e.g. RMSNorm rounds
// the normalized value to bf16 before multiplying by the weight), computing in fp32 between
// them. All tensors are CPU, contiguous, and float32 or bfloat16 (see supported()).
//
// Shapes (legend in docs/architecture.md): R = rows of a 2-D view, D = row width, P = packed
// tokens, N = heads, H = head dim, V = vocabulary.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace furlong::kernels {

// CPU tensor of dtype float32 or bfloat16.
bool supported(const at::Tensor& t);

// y = w * cast(x * rstd), rstd = 1 / sqrt(mean(x^2) + eps) per row. x_RD, w_D same dtype.
// Returns y_RD and rstd_R (fp32).
std::pair<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x_RD, const at::Tensor& w_D,
                                                   double eps);
// dx_RD (x's dtype) and dw_D (fp32).
std::pair<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy_RD, const at::Tensor& x_RD,
                                                    const at::Tensor& w_D,
                                                    const at::Tensor& rstd_R);

// y = x * cos + rotate_half(x) * sin; x_PNH, cos_PH / sin_PH in x's dtype.
at::Tensor rope_forward(const at::Tensor& x_PNH, const at::Tensor& cos_PH,
                        const at::Tensor& sin_PH);
// dx = dy * cos + rotate_half^T(dy * sin), with rotate_half^T([a, b]) = [b, -a].
at::Tensor rope_backward(const at::Tensor& dy_PNH, const at::Tensor& cos_PH,
                         const at::Tensor& sin_PH);

// h = silu(gate) * up.
at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up);
// (d gate, d up).
std::pair<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dh, const at::Tensor& gate,
                                                  const at::Tensor& up);

// Per row of logits_RV (z = logits / temperature, in fp32): shift m = max z, log s with
// s = sum exp(z - m), the target's log-prob z_t - m - log s, and the entropy
// log s - sum(exp(z - m) (z - m)) / s (null entropy pointer: not computed).
struct SoftmaxStats {
  at::Tensor max_R;      // fp32
  at::Tensor log_sum_R;  // fp32
  at::Tensor logprob_R;  // fp32
  at::Tensor entropy_R;  // fp32, undefined without entropy
};
SoftmaxStats softmax_stats(const at::Tensor& logits_RV, const at::Tensor& targets_R,
                           double temperature, bool with_entropy);
// Gradient w.r.t. the logits (in their dtype) of sum(g_lp * logprob + g_ent * entropy):
// (g_lp (onehot - p) - g_ent p (log p + H)) / temperature. Undefined g_lp / g_ent count as 0.
at::Tensor softmax_stats_backward(const at::Tensor& logits_RV, const at::Tensor& targets_R,
                                  double temperature, const SoftmaxStats& stats,
                                  const at::Tensor& grad_logprob_R,
                                  const at::Tensor& grad_entropy_R);

}  // namespace furlong::kernels
