#include "models/logprobs.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "core/error.h"

namespace furlong::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t rows_per_chunk(int64_t vocab, int64_t chunk_bytes) {
  // fp32 logits plus the same again for probabilities / gradients.
  return std::max<int64_t>(1, chunk_bytes / (vocab * 4 * 2));
}

// fp32 logits / temperature from logits in the compute dtype.
at::Tensor scale(const at::Tensor& logits, double temperature) {
  auto z = logits.to(at::kFloat);
  return temperature == 1.0 ? z : z / temperature;
}

struct FusedLogProbs : torch::autograd::Function<FusedLogProbs> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden_TD,
                               const at::Tensor& head_VD, const at::Tensor& targets_T,
                               double temperature, bool with_entropy, int64_t chunk_bytes,
                               int64_t saved_logits_bytes) {
    const int64_t T = hidden_TD.size(0), V = head_VD.size(0);
    const int64_t chunk = rows_per_chunk(V, chunk_bytes);
    auto logprobs = at::empty({T}, hidden_TD.options().dtype(at::kFloat));
    auto entropy = at::zeros({T}, hidden_TD.options().dtype(at::kFloat));
    bool keep = T * V * static_cast<int64_t>(hidden_TD.element_size()) <= saved_logits_bytes;
    at::Tensor saved_logits_TV = keep ? at::empty({T, V}, hidden_TD.options()) : at::Tensor();
    for (int64_t start = 0; start < T; start += chunk) {
      int64_t len = std::min(chunk, T - start);
      auto logits = at::linear(hidden_TD.narrow(0, start, len), head_VD);
      if (keep) saved_logits_TV.narrow(0, start, len).copy_(logits);
      // Shifted by the row max: zs <= 0, e = exp(zs), s = sum e. Then
      //   log p[target] = zs[target] - log s,   H = log s - sum(e * zs) / s,
      // which avoids the cancellation of lse - sum(p z) (more accurate than transformers'
      // -sum(p log p) in fp32 for large vocabularies).
      auto zs = scale(logits, temperature);
      zs.sub_(std::get<0>(zs.max(-1, /*keepdim=*/true)));
      auto e = zs.exp();
      auto s = e.sum(-1);
      auto log_s = s.log();
      auto target_zs = zs.gather(1, targets_T.narrow(0, start, len).unsqueeze(1)).squeeze(1);
      logprobs.narrow(0, start, len).copy_(target_zs - log_s);
      if (with_entropy) entropy.narrow(0, start, len).copy_(log_s - (e * zs).sum(-1) / s);
    }
    ctx->save_for_backward({hidden_TD, head_VD, targets_T, entropy, saved_logits_TV});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["chunk_bytes"] = chunk_bytes;
    return {logprobs, entropy};
  }

  // With z = logits / temperature, p = softmax(z), H = -sum p log p:
  //   d logp[t] / dz_j = onehot_j - p_j,   dH / dz_j = -p_j (log p_j + H).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& hidden_TD = saved[0];
    const auto& head_VD = saved[1];
    const auto& targets_T = saved[2];
    const auto& entropy_T = saved[3];
    const auto& saved_logits_TV = saved[4];
    double temperature = ctx->saved_data["temperature"].toDouble();
    int64_t chunk_bytes = ctx->saved_data["chunk_bytes"].toInt();
    at::Tensor grad_lp = grads[0], grad_ent = grads[1];

    const int64_t T = hidden_TD.size(0);
    const int64_t chunk = rows_per_chunk(head_VD.size(0), chunk_bytes);
    auto grad_hidden = at::empty_like(hidden_TD);
    auto grad_head = at::zeros(head_VD.sizes(), head_VD.options().dtype(at::kFloat));
    for (int64_t start = 0; start < T; start += chunk) {
      int64_t len = std::min(chunk, T - start);
      auto logits = saved_logits_TV.defined()
                        ? saved_logits_TV.narrow(0, start, len)
                        : at::linear(hidden_TD.narrow(0, start, len), head_VD);
      auto z = scale(logits, temperature);
      auto log_p = at::log_softmax(z, -1);
      auto p = log_p.exp();
      at::Tensor grad_z = at::zeros_like(z);
      if (grad_lp.defined()) {
        auto g = grad_lp.narrow(0, start, len).unsqueeze(1);
        grad_z -= g * p;
        grad_z.scatter_add_(1, targets_T.narrow(0, start, len).unsqueeze(1), g);
      }
      if (grad_ent.defined()) {
        auto g = grad_ent.narrow(0, start, len).unsqueeze(1);
        auto H = entropy_T.narrow(0, start, len).unsqueeze(1);
        grad_z -= g * p * (log_p + H);
      }
      if (temperature != 1.0) grad_z /= temperature;
      auto grad_logits = grad_z.to(hidden_TD.scalar_type());
      grad_hidden.narrow(0, start, len).copy_(at::mm(grad_logits, head_VD));
      auto h = hidden_TD.narrow(0, start, len);
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

}  // namespace furlong::models
