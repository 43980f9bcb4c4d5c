// Global gradient-norm clipping over sharded gradients (miles: clip_grad_norm_(params,
// --clip-grad) after the last micro-batch, before optimizer.step()).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace furlong::optim {

// Sums a double over the ranks that hold distinct gradient shards (the dp_shard group: HSDP
// replicas hold identical reduced grads and must not be counted twice). It is a collective:
// every rank calls it exactly once per clip_grad_norm, whatever it holds. An empty function
// means a single rank (the local sum is the global one).
using AllReduceSum = std::function<double(double)>;

// Sum over the defined grads of `params` of the squared elements. Each tensor's L2 norm is
// accumulated in fp32 (bf16 grads included; at::_foreach_norm, one multi-tensor kernel on
// CUDA), the squares are summed in double. One host sync per device.
double local_grad_sq_sum(const std::vector<at::Tensor>& params);

// Global L2 norm of all grads: sqrt(all_reduce_sum(local_grad_sq_sum)) in double. If
// max_norm > 0 and coef = max_norm / (norm + 1e-6) is below 1, every grad is scaled in place
// by coef. Returns the pre-clip norm, as torch.nn.utils.clip_grad_norm_ does. A non-finite
// norm is neither an error nor skipped (miles does not skip): coef is then 0 or NaN and the
// grads follow, as in PyTorch. max_norm <= 0 disables clipping (PyTorch would zero the grads)
// but still returns the norm, for logging. Parameters without a grad are ignored.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm,
                      const AllReduceSum& all_reduce_sum);

}  // namespace furlong::optim
