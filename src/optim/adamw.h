// AdamW on local parameter shards, with torch.optim.AdamW's semantics (miles' only optimizer).
//
// The optimizer sees the tensors one rank owns: FSDP shards (each possibly a slice of a larger
// parameter) or whole parameters, with their .grad(). Everything it does is elementwise, so it
// needs no communication. Elements get the same update wherever shards are cut, except that
// PyTorch's fused CPU kernel rounds the scalar tail of each tensor (numel % vector width)
// differently from its vectorized body, rarely by 1 ulp, so kFused results can depend on the
// sharding at that level, as in PyTorch.
//
// Semantics (PyTorch's AdamW with amsgrad=False, maximize=False, one parameter group):
//   step += 1;  p *= 1 - lr * weight_decay  (decoupled, every parameter, norms and biases too)
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// State is created lazily on a parameter's first step with a grad; a parameter whose grad is
// undefined is skipped entirely (its step counter does not advance), as PyTorch does.
//
// Precision: state has the parameter's dtype (torch.zeros_like), the step counter is an fp32
// 0-dim tensor. With fp32 master weights (the default) everything is fp32. With
// --no-keep-fp32-master the parameters are bf16 and so are exp_avg / exp_avg_sq: that is what
// torch.optim.AdamW (hence miles) does for bf16 parameters, and furlong keeps it so runs agree.
//
// Implementations: PyTorch has three AdamW code paths whose results differ by a few ulp. Each
// AdamWImpl reproduces one of them op for op (same ATen kernels, same order, the same scalar
// arithmetic in double), so it is bit-identical to torch.optim.AdamW with the matching flag on
// the same device. kFused is the default: one read and one write of each tensor per step
// (a multi-tensor kernel on CUDA), the fastest of the three on CPU too
// (AdamWPerf.DISABLED_StepCost).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <utility>
#include <vector>

namespace furlong::optim {

enum class AdamWImpl {
  kFused,    // torch.optim.AdamW(fused=True)
  kForeach,  // foreach=True: PyTorch's default on CUDA, i.e. what miles runs on GPUs
  kForLoop,  // foreach=False: PyTorch's default on CPU
};

struct AdamWOptions {
  double lr = 1e-6;           // --lr; the LR scheduler overwrites it before every step
  double beta1 = 0.9;         // --adam-beta1
  double beta2 = 0.95;        // --adam-beta2
  double eps = 1e-8;          // --adam-eps
  double weight_decay = 0.0;  // --weight-decay
  AdamWImpl impl = AdamWImpl::kFused;
};

// --optimizer: miles accepts only "adam" (torch.optim.AdamW); anything else is an error that
// names the flag.
void check_optimizer_name(const std::string& name);

// Named tensors in a stable order (what checkpoint writers take).
using StateTensors = std::vector<std::pair<std::string, at::Tensor>>;

class AdamW {
 public:
  // `params` are held by handle: whoever moves them between devices must keep the same tensor
  // objects (Tensor::set_data), then call to() for the optimizer state. Each must be a defined
  // floating-point tensor, listed once.
  AdamW(std::vector<at::Tensor> params, AdamWOptions options);

  // One update of every parameter that has a grad, with the current options(). A grad must
  // have its parameter's shape, dtype and device.
  void step();
  // Sets every grad to undefined (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  AdamWOptions& options() { return options_; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  // Steps taken by parameter `index` (0 before its first grad).
  int64_t steps_taken(size_t index) const;

  // The state for a checkpoint: for each parameter index i that has state, "<i>.exp_avg",
  // "<i>.exp_avg_sq" (the parameter's shape and dtype) and "<i>.step" (fp32, 0-dim), in index
  // order. Tensors alias the live state (a writer copies them). Hyperparameters are not part
  // of it: on resume the flags win (torch restores its param_groups from the checkpoint).
  StateTensors state_dict() const;
  // Replaces all state with `state` (parameters absent from it start fresh). Everything is
  // validated before anything changes: keys, indices, shapes (the shard shapes of this rank),
  // a step that is a non-negative whole number. Moments are cast to the parameter's dtype and
  // device, as torch's Optimizer.load_state_dict does.
  void load_state_dict(const StateTensors& state);

  // Moves the state (not the parameters) to `device`, bit for bit; `pin_memory` places CPU
  // state in page-locked memory (needs a CUDA build). Used by sleep/wake_up and CPU offload.
  void to(c10::Device device, bool pin_memory = false);

 private:
  struct State {
    at::Tensor exp_avg, exp_avg_sq;
    at::Tensor step;  // fp32 0-dim; on the parameter's device for kFused, else on the CPU
  };
  struct Group;  // parameters sharing a device and dtype, for the multi-tensor kernels

  c10::Device step_device(const at::Tensor& param) const;
  void validate_options() const;
  void check_grad(size_t index) const;
  // The state of parameter `index`, created if missing and checked against its device.
  State& state_for(size_t index);
  // Parameters with a grad (checked), their state created if missing, grouped.
  std::vector<Group> collect();
  void step_fused(Group& group) const;
  void step_foreach(Group& group) const;
  void step_for_loop(Group& group) const;

  std::vector<at::Tensor> params_;
  std::vector<State> state_;  // undefined tensors until the parameter's first step
  AdamWOptions options_;
};

}  // namespace furlong::optim
