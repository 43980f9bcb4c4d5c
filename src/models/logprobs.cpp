#include "models/logprobs.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu_kernels.h"

namespace furlong::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t rows_per_chunk(int64_t vocab, int64_t chunk_bytes) {
  // fp32 logits plus the same again for probabilities / gradients.
  return std::max<int64_t>(1, chunk_bytes / (vocab * 4 * 2));
}

// Per-row statistics of a chunk of logits (z = logits / temperature in fp32), shifted by the
// row max m: log s with s = sum exp(z - m); log p[target] = z_t - m - log s;
// entropy = log s - sum(exp(z - m) (z - m)) / s. The shifted form avoids the cancellation of
// lse - sum(p z) and is more accurate than transformers' fp32 -sum(p log p).
kernels::SoftmaxStats chunk_stats(const at::Tensor& logits, const at::Tensor& targets,
                                  double temperature, bool with_entropy) {
  if (kernels::supported(logits)) {
    return kernels::softmax_stats(logits, targets, temperature, with_entropy);
  }
  auto zs = logits.to(at::kFloat);
  if (temperature != 1.0) zs = zs / temperature;
  auto max = std::get<0>(zs.max(-1, /*keepdim=*/true));
  zs.sub_(max);
  auto e = zs.exp();
  auto s = e.sum(-1);
  kernels::SoftmaxStats st;
  st.max_R = max.squeeze(1);
  st.log_sum_R = s.log();
  st.logprob_R = zs.gather(1, targets.unsqueeze(1)).squeeze(1) - st.log_sum_R;
  if (with_entropy) st.entropy_R = st.log_sum_R - (e * zs).sum(-1) / s;
  return st;
}

// d/d logits of sum(g_lp * log p[target] + g_ent * entropy), in the logits' dtype:
// (g_lp (onehot - p) - g_ent p (log p + entropy)) / temperature.
at::Tensor chunk_grad(const at::Tensor& logits, const at::Tensor& targets, double temperature,
                      const kernels::SoftmaxStats& st, const at::Tensor& g_lp,
                      const at::Tensor& g_ent) {
  if (kernels::supported(logits)) {
    return kernels::softmax_stats_backward(logits, targets, temperature, st, g_lp, g_ent);
  }
  auto log_p = logits.to(at::kFloat);
  if (temperature != 1.0) log_p = log_p / temperature;
  log_p.sub_((st.max_R + st.log_sum_R).unsqueeze(1));
  auto p = log_p.exp();
  auto grad = at::zeros_like(p);
  if (g_lp.defined()) {
    grad -= g_lp.unsqueeze(1) * p;
    grad.scatter_add_(1, targets.unsqueeze(1), g_lp.unsqueeze(1).to(at::kFloat));
  }
  if (g_ent.defined()) grad -= g_ent.unsqueeze(1) * p * (log_p + st.entropy_R.unsqueeze(1));
  if (temperature != 1.0) grad /= temperature;
  return grad.to(logits.scalar_type());
}

at::Tensor slice(const at::Tensor& t, int64_t start, int64_t len) {
  return t.defined() ? t.narrow(0, start, len) : at::Tensor();
}

struct FusedLogProbs : torch::autograd::Function<FusedLogProbs> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden_TD,
                               const at::Tensor& head_VD, const at::Tensor& targets_T,
                               double temperature, bool with_entropy, int64_t chunk_bytes,
                               int64_t saved_logits_bytes) {
    const int64_t T = hidden_TD.size(0), V = head_VD.size(0);
    const int64_t chunk = rows_per_chunk(V, chunk_bytes);
    auto f32 = hidden_TD.options().dtype(at::kFloat);
    auto logprobs = at::empty({T}, f32), entropy = at::zeros({T}, f32);
    auto max = at::empty({T}, f32), log_sum = at::empty({T}, f32);
    bool keep = T * V * static_cast<int64_t>(hidden_TD.element_size()) <= saved_logits_bytes;
    at::Tensor saved_logits_TV = keep ? at::empty({T, V}, hidden_TD.options()) : at::Tensor();
    for (int64_t start = 0; start < T; start += chunk) {
      int64_t len = std::min(chunk, T - start);
      auto logits = keep ? saved_logits_TV.narrow(0, start, len) : at::Tensor();
      if (keep) {
        at::mm_out(logits, hidden_TD.narrow(0, start, len), head_VD.t());
      } else {
        logits = at::linear(hidden_TD.narrow(0, start, len), head_VD);
      }
      auto st = chunk_stats(logits, targets_T.narrow(0, start, len), temperature, with_entropy);
      logprobs.narrow(0, start, len).copy_(st.logprob_R);
      max.narrow(0, start, len).copy_(st.max_R);
      log_sum.narrow(0, start, len).copy_(st.log_sum_R);
      if (with_entropy) entropy.narrow(0, start, len).copy_(st.entropy_R);
    }
    ctx->save_for_backward({hidden_TD, head_VD, targets_T, entropy, max, log_sum, saved_logits_TV});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_bytes"] = chunk_bytes;
    ctx->saved_data["with_entropy"] = with_entropy;
    return {logprobs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &hidden_TD = saved[0], &head_VD = saved[1], &targets_T = saved[2];
    const auto &entropy_T = saved[3], &max_T = saved[4], &log_sum_T = saved[5];
    const auto& saved_logits_TV = saved[6];
    double temperature = ctx->saved_data["temperature"].toDouble();
    int64_t chunk_bytes = ctx->saved_data["chunk_bytes"].toInt();
    bool with_entropy = ctx->saved_data["with_entropy"].toBool();
    at::Tensor grad_lp = grads[0], grad_ent = with_entropy ? grads[1] : at::Tensor();

    const int64_t T = hidden_TD.size(0);
    const int64_t chunk = rows_per_chunk(head_VD.size(0), chunk_bytes);
    auto grad_hidden = at::empty_like(hidden_TD);
    auto grad_head = at::zeros(head_VD.sizes(), head_VD.options().dtype(at::kFloat));
    for (int64_t start = 0; start < T; start += chunk) {
      int64_t len = std::min(chunk, T - start);
      auto h = hidden_TD.narrow(0, start, len);
      auto logits = saved_logits_TV.defined() ? saved_logits_TV.narrow(0, start, len)
                                              : at::linear(h, head_VD);
      kernels::SoftmaxStats st{slice(max_T, start, len),
                               slice(log_sum_T, start, len),
                               {},
                               with_entropy ? slice(entropy_T, start, len) : at::Tensor()};
      auto grad_logits = chunk_grad(logits, targets_T.narrow(0, start, len), temperature, st,
                                    slice(grad_lp, start, len), slice(grad_ent, start, len));
      auto grad_rows = grad_hidden.narrow(0, start, len);
      at::mm_out(grad_rows, grad_logits, head_VD);
      grad_head += at::mm(grad_logits.t(), h).to(at::kFloat);
    }
    // One gradient per forward input: hidden, head, then none for the non-differentiable ones.
    return {grad_hidden,  grad_head.to(head_VD.scalar_type()),
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

TokenLogProbs token_logprobs(const at::Tensor& hidden_TD, const at::Tensor& head_VD,
                             const at::Tensor& targets_T, const LogProbOptions& options) {
  FURLONG_CHECK(hidden_TD.dim() == 2 && head_VD.dim() == 2 && targets_T.dim() == 1 &&
                    hidden_TD.size(0) == targets_T.size(0) && hidden_TD.size(1) == head_VD.size(1),
                "token_logprobs: shapes do not agree: hidden ", hidden_TD.sizes(), ", head ",
                head_VD.sizes(), ", targets ", targets_T.sizes());
  FURLONG_CHECK(options.temperature > 0, "token_logprobs: temperature must be positive, got ",
                options.temperature);
  // Keep logits for backward only if there will be one.
  bool differentiable =
      c10::GradMode::is_enabled() && (hidden_TD.requires_grad() || head_VD.requires_grad());
  auto outputs = FusedLogProbs::apply(
      hidden_TD, head_VD, targets_T.to(at::kLong), options.temperature, options.with_entropy,
      options.chunk_bytes, differentiable ? options.saved_logits_bytes : 0);
  TokenLogProbs result;
  result.logprobs_T = outputs[0];
  if (options.with_entropy) result.entropy_T = outputs[1];
  return result;
}

at::Tensor logprobs_from_logits(const at::Tensor& logits_RV, const at::Tensor& targets_R,
                                double temperature) {
  FURLONG_CHECK(
      logits_RV.dim() == 2 && targets_R.dim() == 1 && logits_RV.size(0) == targets_R.size(0),
      "logprobs_from_logits: shapes do not agree: logits ", logits_RV.sizes(), ", targets ",
      targets_R.sizes());
  FURLONG_CHECK(temperature > 0, "logprobs_from_logits: temperature must be positive, got ",
                temperature);
  return chunk_stats(logits_RV.contiguous(), targets_R.to(at::kLong), temperature,
                     /*with_entropy=*/false)
      .logprob_R;
}

}  // namespace furlong::models
