#include "optim/clip_grad.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

namespace furlong::optim {

namespace {

// The defined grads of `params`, grouped by device (one multi-tensor norm per group).
std::vector<std::vector<at::Tensor>> grads_by_device(const std::vector<at::Tensor>& params) {
  std::vector<std::vector<at::Tensor>> groups;
  std::vector<c10::Device> devices;
  for (const auto& p : params) {
    const auto& g = p.grad();
    if (!g.defined()) continue;
    size_t k = 0;
    while (k < devices.size() && devices[k] != g.device()) ++k;
    if (k == devices.size()) {
      devices.push_back(g.device());
      groups.emplace_back();
    }
    groups[k].push_back(g);
  }
  return groups;
}

}  // namespace

double local_grad_sq_sum(const std::vector<at::Tensor>& params) {
  double total = 0;
  for (const auto& grads : grads_by_device(params)) {
    // fp32 norms (fp32 accumulation even for bf16 grads), squared and summed in double on the
    // device, then a single host sync for the group.
    auto norms = at::_foreach_norm(grads, 2, at::kFloat);
    total += at::stack(norms).to(at::kDouble).square().sum().item<double>();
  }
  return total;
}

double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm,
                      const AllReduceSum& all_reduce_sum) {
  at::NoGradGuard no_grad;
  double sq_sum = local_grad_sq_sum(params);
  if (all_reduce_sum) sq_sum = all_reduce_sum(sq_sum);  // collective: always called
  double norm = std::sqrt(sq_sum);
  if (max_norm <= 0) return norm;
  double coef = max_norm / (norm + 1e-6);
  // `!(coef >= 1)` also takes NaN (a NaN norm), so NaN spreads to the grads as in PyTorch.
  if (!(coef >= 1.0)) {
    for (auto& grads : grads_by_device(params)) at::_foreach_mul_(grads, coef);
  }
  return norm;
}

}  // namespace furlong::optim
