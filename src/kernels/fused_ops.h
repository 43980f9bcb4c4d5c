// Differentiable fused ops on top of cpu_kernels.h (custom autograd functions). Callers use
// them when kernels::supported(x) holds and fall back to the ATen reference otherwise (e.g. on
// CUDA); see models/layers.cpp.
#pragma once

#include <ATen/core/Tensor.h>

namespace furlong::kernels {

// w * cast(x / rms(x)) over the last dim; x and w of the same dtype.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);
// x_PNH * cos_PH + rotate_half(x_PNH) * sin_PH (cos/sin are not differentiated).
at::Tensor rope(const at::Tensor& x_PNH, const at::Tensor& cos_PH, const at::Tensor& sin_PH);
// silu(gate) * up.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);
// The depthwise causal conv of kernels/causal_conv.h (fp32 x [B, T, C], w [C, W], window
// [B, C, W-1] or undefined), differentiable in x and w (the window is not differentiated).
at::Tensor causal_conv(const at::Tensor& x_BTC, const at::Tensor& w_CW,
                       const at::Tensor& window_BCW);

}  // namespace furlong::kernels
