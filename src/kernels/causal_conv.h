// The depthwise causal conv of Gated DeltaNet layers (models/gated_delta_net.h) on fp32 rows
// laid out [B, T, C] (channels innermost), forward and backward, without the transposes,
// padding copies and per-tap temporaries of the elementwise form.
//
// y[b, t, c] = sum_{j < W} w[c, j] * x~[b, t + j, c], x~ = the W-1 window columns of b, then
// x[b]: position t sees t-W+1..t. The taps are summed in order j = 0..W-1, each product and sum
// rounded in fp32, so every output has the same bits wherever its row sits in a batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace furlong::kernels {

// x fp32 [B, T, C], w fp32 [C, W], window fp32 [B, C, W-1] or undefined (zeros); contiguous,
// CPU. Returns y fp32 [B, T, C].
at::Tensor causal_conv_forward(const at::Tensor& x_BTC, const at::Tensor& w_CW,
                               const at::Tensor& window_BCW);
// dx fp32 [B, T, C] and dw fp32 [C, W] for dy [B, T, C] (the window gets no gradient). dw sums
// over (b, t) in order, one channel per thread: the same bits for any thread count.
std::pair<at::Tensor, at::Tensor> causal_conv_backward(const at::Tensor& dy_BTC,
                                                       const at::Tensor& x_BTC,
                                                       const at::Tensor& w_CW,
                                                       const at::Tensor& window_BCW);

}  // namespace furlong::kernels
