#include "models/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

namespace furlong::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Holds the block closure until backward (autograd contexts store IValues only).
struct ClosureHolder : torch::CustomClassHolder {
  MultiBlockFn fn;
  explicit ClosureHolder(MultiBlockFn f) : fn(std::move(f)) {}
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList params,
                               c10::intrusive_ptr<ClosureHolder> closure) {
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    return closure->fn(x, params.vec());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    auto holder = ctx->saved_data["closure"].toCapsule();
    auto* closure = static_cast<ClosureHolder*>(holder.get());

    c10::AutoGradMode enable_grad(true);
    std::vector<at::Tensor> inputs;  // detached copies that require grad
    for (const auto& t : saved) {
      inputs.push_back(t.defined() ? t.detach().requires_grad_(t.requires_grad()) : t);
    }
    std::vector<at::Tensor> params(inputs.begin() + 1, inputs.end());
    std::vector<at::Tensor> outputs = closure->fn(inputs[0], params);
    std::vector<at::Tensor> differentiated, output_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (grad_outputs[i].defined() && outputs[i].requires_grad()) {
        differentiated.push_back(outputs[i]);
        output_grads.push_back(grad_outputs[i]);
      }
    }

    std::vector<at::Tensor> wrt;
    std::vector<size_t> wrt_index;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].defined() && inputs[i].requires_grad()) {
        wrt.push_back(inputs[i]);
        wrt_index.push_back(i);
      }
    }
    variable_list grads(inputs.size() + 1);  // +1 for the closure argument
    if (!wrt.empty() && !differentiated.empty()) {
      auto computed = torch::autograd::grad(differentiated, wrt, output_grads,
                                            /*retain_graph=*/false, /*create_graph=*/false,
                                            /*allow_unused=*/true);
      for (size_t j = 0; j < wrt.size(); ++j) grads[wrt_index[j]] = computed[j];
    }
    return grads;
  }
};

}  // namespace

at::Tensor checkpointed_call(BlockFn fn, const at::Tensor& x,
                             const std::vector<at::Tensor>& params) {
  auto multi = [fn = std::move(fn)](const at::Tensor& x_in, const std::vector<at::Tensor>& p) {
    return std::vector<at::Tensor>{fn(x_in, p)};
  };
  return checkpointed_call_multi(multi, x, params)[0];
}

std::vector<at::Tensor> checkpointed_call_multi(MultiBlockFn fn, const at::Tensor& x,
                                                const std::vector<at::Tensor>& params) {
  auto closure = c10::make_intrusive<ClosureHolder>(std::move(fn));
  return CheckpointFunction::apply(x, at::TensorList(params), closure);
}

}  // namespace furlong::models
