// AdamW: the three update paths mirror torch/optim/adam.py's _fused_adam, _multi_tensor_adam
// and _single_tensor_adam (decoupled weight decay, no amsgrad, not capturable): the same ATen
// ops in the same order with the same scalar arguments. Host-side scalars (bias corrections,
// step sizes) are computed in double exactly as Python computes them (`x ** y` is libm pow),
// which is what makes the results bit-identical rather than merely close.
#include "optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_set>

#include "core/error.h"

namespace furlong::optim {

struct AdamW::Group {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
};

namespace {

std::string shape_str(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << sizes;
  return os.str();
}

// A Python float given to a Tensor method (`t.mul_(0.95)`): PyTorch binds it to the Tensor
// overload as a wrapped-number tensor. The C++-only Scalar overloads are not equivalent for
// bf16: mul_(Scalar) rounds the scalar to bf16 before multiplying, where the wrapped-number path
// multiplies by it in fp32. The for-loop path uses this to stay bit-identical for bf16 params.
at::Tensor py_float(double value) {
  return at::native::wrapped_scalar_tensor(value);
}

// Copies `t` to `device` (CPU page-locked when `pin`); returns `t` itself when it is already
// where it should be. Copies are exact, so moving back and forth is bit-identical.
at::Tensor move_to(const at::Tensor& t, c10::Device device, bool pin) {
  if (!device.is_cpu() || !pin) return t.to(device);
  if (t.is_cpu() && t.is_pinned()) return t;
  auto out = at::empty_like(t, t.options().device(device).pinned_memory(true));
  out.copy_(t);
  return out;
}

// The parameter index and field of a state-dict key "<i>.<field>".
std::pair<size_t, std::string> parse_state_key(const std::string& key, size_t num_params) {
  auto dot = key.find('.');
  FURLONG_CHECK(dot != std::string::npos && dot > 0, "optimizer state: key '", key,
                "' is not of the form <parameter index>.<exp_avg|exp_avg_sq|step>");
  std::string index_text = key.substr(0, dot), field = key.substr(dot + 1);
  FURLONG_CHECK(index_text.find_first_not_of("0123456789") == std::string::npos,
                "optimizer state: key '", key, "' does not start with a parameter index");
  size_t index = std::stoull(index_text);
  FURLONG_CHECK(index < num_params, "optimizer state: key '", key, "' names parameter ", index,
                " but this optimizer has ", num_params,
                " parameters (was the checkpoint written for another model?)");
  FURLONG_CHECK(field == "exp_avg" || field == "exp_avg_sq" || field == "step",
                "optimizer state: unknown field '", field, "' in key '", key,
                "' (expected exp_avg, exp_avg_sq or step)");
  return {index, field};
}

// Validates a loaded moment against its parameter and converts it to the parameter's dtype and
// device (as torch's Optimizer.load_state_dict does).
at::Tensor adopt_moment(const at::Tensor& t, const at::Tensor& param, size_t index,
                        const char* field) {
  FURLONG_CHECK(t.defined() && t.is_floating_point(), "optimizer state: ", index, ".", field,
                " must be a floating-point tensor");
  FURLONG_CHECK(t.sizes() == param.sizes(), "optimizer state: ", index, ".", field, " has shape ",
                shape_str(t.sizes()), " but parameter ", index, " on this rank has shape ",
                shape_str(param.sizes()),
                "; a checkpoint written at another sharding must be resharded before loading");
  // A fresh tensor laid out like the parameter (the fused kernel needs matching layouts, and
  // `t` may be a read-only view of a mapped checkpoint file).
  return at::empty_like(param, at::MemoryFormat::Preserve).copy_(t);
}

at::Tensor adopt_step(const at::Tensor& t, size_t index, c10::Device device) {
  FURLONG_CHECK(t.defined() && t.numel() == 1, "optimizer state: ", index,
                ".step must hold one number");
  double step = t.to(at::kCPU).to(at::kDouble).item<double>();
  FURLONG_CHECK(std::isfinite(step) && step >= 0 && step == std::floor(step),
                "optimizer state: ", index, ".step is ", step,
                "; expected a non-negative whole number");
  return at::full({}, step, at::TensorOptions(at::kFloat).device(device));
}

}  // namespace

void check_optimizer_name(const std::string& name) {
  FURLONG_CHECK(
      name == "adam", "--optimizer '", name,
      "' is not supported; the only option is 'adam' (AdamW with decoupled weight decay)");
}

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions options)
    : params_(std::move(params)), state_(params_.size()), options_(options) {
  validate_options();
  std::unordered_set<const void*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    FURLONG_CHECK(p.defined(), "AdamW: parameter ", i, " is an undefined tensor");
    FURLONG_CHECK(p.is_floating_point(), "AdamW: parameter ", i, " has dtype ", p.scalar_type(),
                  "; only floating-point parameters can be optimized");
    FURLONG_CHECK(seen.insert(p.unsafeGetTensorImpl()).second, "AdamW: parameter ", i,
                  " is listed twice; each parameter must be passed once");
  }
}

void AdamW::validate_options() const {
  const auto& o = options_;
  FURLONG_CHECK(std::isfinite(o.lr) && o.lr >= 0, "--lr must be a finite number >= 0, got ", o.lr);
  FURLONG_CHECK(o.beta1 >= 0 && o.beta1 < 1, "--adam-beta1 must be in [0, 1), got ", o.beta1);
  FURLONG_CHECK(o.beta2 >= 0 && o.beta2 < 1, "--adam-beta2 must be in [0, 1), got ", o.beta2);
  FURLONG_CHECK(std::isfinite(o.eps) && o.eps >= 0, "--adam-eps must be a finite number >= 0, got ",
                o.eps);
  FURLONG_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
                "--weight-decay must be a finite number >= 0, got ", o.weight_decay);
}

c10::Device AdamW::step_device(const at::Tensor& param) const {
  // PyTorch keeps `step` on the parameter's device only for fused/capturable; the other paths
  // read it on the host every step, so it lives on the CPU.
  return options_.impl == AdamWImpl::kFused ? param.device() : c10::Device(c10::kCPU);
}

void AdamW::check_grad(size_t i) const {
  const auto& p = params_[i];
  const auto& g = p.grad();
  FURLONG_CHECK(
      g.sizes() == p.sizes() && g.scalar_type() == p.scalar_type() && g.device() == p.device(),
      "AdamW: parameter ", i, " is ", p.scalar_type(), shape_str(p.sizes()), " on ", p.device(),
      " but its grad is ", g.scalar_type(), shape_str(g.sizes()), " on ", g.device(),
      "; the grad must match the local shard it belongs to");
  // The CPU fused kernel walks memory linearly: if parameter, grad and state are laid out
  // differently it silently pairs the wrong elements (torch 2.13's does too).
  FURLONG_CHECK(options_.impl != AdamWImpl::kFused || (p.is_contiguous() && g.is_contiguous()),
                "AdamW: parameter ", i,
                " or its grad is not contiguous, which the fused "
                "implementation cannot handle; make the shard contiguous or use the foreach "
                "implementation");
}

AdamW::State& AdamW::state_for(size_t i) {
  const auto& p = params_[i];
  State& s = state_[i];
  if (!s.step.defined()) {  // lazily, as torch does: zeros in the parameter's dtype and layout
    s.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
    s.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
    s.step = at::zeros({}, at::TensorOptions(at::kFloat).device(step_device(p)));
  }
  FURLONG_CHECK(s.exp_avg.device() == p.device(), "AdamW: the state of parameter ", i, " is on ",
                s.exp_avg.device(), " but the parameter is on ", p.device(),
                "; call AdamW::to() after moving the parameters");
  if (s.step.device() != step_device(p)) s.step = s.step.to(step_device(p));  // impl changed
  return s;
}

std::vector<AdamW::Group> AdamW::collect() {
  std::vector<Group> groups;
  std::vector<std::pair<c10::Device, c10::ScalarType>> keys;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i];
    if (!p.grad().defined()) continue;  // PyTorch skips parameters without a grad
    check_grad(i);
    const State& s = state_for(i);
    std::pair key{p.device(), p.scalar_type()};
    size_t k = std::find(keys.begin(), keys.end(), key) - keys.begin();
    if (k == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    Group& group = groups[k];
    group.params.push_back(p);
    group.grads.push_back(p.grad());
    group.exp_avgs.push_back(s.exp_avg);
    group.exp_avg_sqs.push_back(s.exp_avg_sq);
    group.steps.push_back(s.step);
  }
  return groups;
}

void AdamW::step() {
  at::NoGradGuard no_grad;  // in-place updates of leaves that require grad
  validate_options();       // lr changes every step
  for (auto& group : collect()) {
    switch (options_.impl) {
      case AdamWImpl::kFused:
        step_fused(group);
        break;
      case AdamWImpl::kForeach:
        step_foreach(group);
        break;
      case AdamWImpl::kForLoop:
        step_for_loop(group);
        break;
    }
  }
}

// _fused_adam: the steps advance on the device, then one kernel reads each tensor once.
void AdamW::step_fused(Group& g) const {
  const auto& o = options_;
  at::_foreach_add_(g.steps, 1);
  at::_fused_adamw_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, g.steps,
                    o.lr, o.beta1, o.beta2, o.weight_decay, o.eps, /*amsgrad=*/false,
                    /*maximize=*/false);
}

// _multi_tensor_adam (capturable=False): one multi-tensor op per line of the update.
void AdamW::step_foreach(Group& g) const {
  const auto& o = options_;
  at::_foreach_add_(g.steps, 1);
  if (o.weight_decay != 0) at::_foreach_mul_(g.params, 1 - o.lr * o.weight_decay);
  at::_foreach_lerp_(g.exp_avgs, g.grads, 1 - o.beta1);
  at::_foreach_mul_(g.exp_avg_sqs, o.beta2);
  at::_foreach_addcmul_(g.exp_avg_sqs, g.grads, g.grads, 1 - o.beta2);
  std::vector<at::Scalar> step_size, bias_correction2_sqrt;
  for (const auto& step_t : g.steps) {
    double step = step_t.item<double>();
    double bias_correction1 = 1 - std::pow(o.beta1, step);
    double bias_correction2 = 1 - std::pow(o.beta2, step);
    step_size.emplace_back((o.lr / bias_correction1) * -1);
    bias_correction2_sqrt.emplace_back(std::pow(bias_correction2, 0.5));
  }
  auto denom = at::_foreach_sqrt(g.exp_avg_sqs);
  at::_foreach_div_(denom, bias_correction2_sqrt);
  at::_foreach_add_(denom, o.eps);
  at::_foreach_addcdiv_(g.params, g.exp_avgs, denom, step_size);
}

// _single_tensor_adam (capturable=False, differentiable=False): tensor by tensor.
void AdamW::step_for_loop(Group& g) const {
  const auto& o = options_;
  for (size_t i = 0; i < g.params.size(); ++i) {
    auto& param = g.params[i];
    const auto& grad = g.grads[i];
    auto& exp_avg = g.exp_avgs[i];
    auto& exp_avg_sq = g.exp_avg_sqs[i];
    g.steps[i].add_(1);
    if (o.weight_decay != 0) param.mul_(py_float(1 - o.lr * o.weight_decay));
    exp_avg.lerp_(grad, 1 - o.beta1);
    exp_avg_sq.mul_(py_float(o.beta2)).addcmul_(grad, grad, 1 - o.beta2);
    double step = g.steps[i].item<double>();
    double bias_correction1 = 1 - std::pow(o.beta1, step);
    double bias_correction2 = 1 - std::pow(o.beta2, step);
    double step_size = o.lr / bias_correction1;
    double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
    auto denom = exp_avg_sq.sqrt().div(py_float(bias_correction2_sqrt)).add_(py_float(o.eps));
    param.addcdiv_(exp_avg, denom, -step_size);
  }
}

void AdamW::zero_grad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
  }
}

int64_t AdamW::steps_taken(size_t index) const {
  FURLONG_ASSERT(index < state_.size(), "parameter index ", index, " out of range");
  const auto& step = state_[index].step;
  return step.defined() ? static_cast<int64_t>(step.item<double>()) : 0;
}

StateTensors AdamW::state_dict() const {
  StateTensors out;
  for (size_t i = 0; i < state_.size(); ++i) {
    const State& s = state_[i];
    if (!s.step.defined()) continue;
    auto prefix = std::to_string(i) + ".";
    out.emplace_back(prefix + "exp_avg", s.exp_avg);
    out.emplace_back(prefix + "exp_avg_sq", s.exp_avg_sq);
    out.emplace_back(prefix + "step", s.step);
  }
  return out;
}

void AdamW::load_state_dict(const StateTensors& state) {
  at::NoGradGuard no_grad;
  std::map<size_t, std::map<std::string, at::Tensor>> by_index;
  for (const auto& [key, tensor] : state) {
    auto [index, field] = parse_state_key(key, params_.size());
    FURLONG_CHECK(by_index[index].emplace(field, tensor).second, "optimizer state: key '", key,
                  "' appears twice");
  }
  std::vector<State> loaded(params_.size());
  for (const auto& [index, fields] : by_index) {
    for (const char* field : {"exp_avg", "exp_avg_sq", "step"}) {
      FURLONG_CHECK(fields.count(field) == 1, "optimizer state: parameter ", index, " lacks '",
                    index, ".", field, "' (each parameter needs exp_avg, exp_avg_sq and step)");
    }
    const auto& p = params_[index];
    loaded[index] = State{adopt_moment(fields.at("exp_avg"), p, index, "exp_avg"),
                          adopt_moment(fields.at("exp_avg_sq"), p, index, "exp_avg_sq"),
                          adopt_step(fields.at("step"), index, step_device(p))};
  }
  state_ = std::move(loaded);
}

void AdamW::to(c10::Device device, bool pin_memory) {
  at::NoGradGuard no_grad;
  for (auto& s : state_) {
    if (!s.step.defined()) continue;
    s.exp_avg = move_to(s.exp_avg, device, pin_memory);
    s.exp_avg_sq = move_to(s.exp_avg_sq, device, pin_memory);
    if (options_.impl == AdamWImpl::kFused) s.step = move_to(s.step, device, pin_memory);
  }
}

}  // namespace furlong::optim
