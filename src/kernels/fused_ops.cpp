#include "kernels/fused_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/causal_conv.h"
#include "kernels/cpu_kernels.h"

namespace furlong::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            double eps) {
    auto [y, rstd] = rms_norm_forward(x, w, eps);
    ctx->save_for_backward({x, w, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [dx, dw] = rms_norm_backward(grads[0], saved[0], saved[1], saved[2]);
    return {dx, dw.to(saved[1].scalar_type()), at::Tensor()};
  }
};

struct RopeFunction : torch::autograd::Function<RopeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rope_forward(x, cos, sin);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {rope_backward(grads[0], saved[0], saved[1]), at::Tensor(), at::Tensor()};
  }
};

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return swiglu_forward(gate, up);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [dg, du] = swiglu_backward(grads[0], saved[0], saved[1]);
    return {dg, du};
  }
};

struct CausalConvFunction : torch::autograd::Function<CausalConvFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& window) {
    const auto none = window.numel() == 0 ? at::Tensor() : window;
    ctx->save_for_backward({x, w, window});
    return causal_conv_forward(x, w, none);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto window = saved[2].numel() == 0 ? at::Tensor() : saved[2];
    auto [dx, dw] = causal_conv_backward(grads[0], saved[0], saved[1], window);
    return {dx, dw, at::Tensor()};
  }
};

}  // namespace

at::Tensor causal_conv(const at::Tensor& x_BTC, const at::Tensor& w_CW,
                       const at::Tensor& window_BCW) {
  // autograd functions take defined tensors: no window is an empty one.
  return CausalConvFunction::apply(
      x_BTC, w_CW, window_BCW.defined() ? window_BCW : at::empty({0}, x_BTC.options()));
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return RmsNormFunction::apply(x, w, eps);
}

at::Tensor rope(const at::Tensor& x_PNH, const at::Tensor& cos_PH, const at::Tensor& sin_PH) {
  return RopeFunction::apply(x_PNH, cos_PH, sin_PH);
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  return SwigluFunction::apply(gate, up);
}

}  // namespace furlong::kernels
