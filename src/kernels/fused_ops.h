// Differentiable fused ops on top of cpu_kernels.h (custom autograd functions). Callers use
// them when kernels::supported(x) holds and fall back to the ATen reference otherwise (e.g. on
// CUDA); see models/layers.cpp.
#pragma once

#include <ATen/core/Tensor.h>

namespace furlong::kernels {

// w * cast(x / rms(x)) over the last dim; x and w of the same dtype.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);
// x_TNH * cos_TH + rotate_half(x_TNH) * sin_TH (cos/sin are not differentiated).
at::Tensor rope(const at::Tensor& x_TNH, const at::Tensor& cos_TH, const at::Tensor& sin_TH);
// silu(gate) * up.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace furlong::kernels
