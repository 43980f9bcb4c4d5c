// The rollout engine's GEMM, y = x W^T (+ b): one entry point for every linear layer of an
// engine step, which picks per shape, dtype and CPU among this folder's kernels (avx512_linear.h,
// avx2_linear.h, skinny_linear.h) and the libraries (oneDNN, MKL, ATen). The rule is written
// once, in inference_linear.cpp: a table of thresholds with the reason for each, and
// inference_linear_kernel(), which applies them in order. The kernel depends on the number of
// rows in the call, so a row's last bits can depend on the batch it runs in.
//
// Shapes (legend in docs/architecture.md): M = input rows, D = input width, F = output width.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace furlong::kernels {

// What inference_linear runs for a shape.
enum class LinearKernel {
  kAvx512Bf16Dot,  // avx512_linear's vdpbf16ps path on a small bf16 weight (an MoE expert)
  kAvx512,         // avx512_linear on a dense weight or a vocabulary head
  kAvx2,           // avx2_linear
  kSkinny,         // skinny_linear
  kMklTransposed,  // MKL's sgemm as W x^T, transposed back (the largest fp32 weights)
  kOneDnn,         // oneDNN's matmul (mkldnn::_linear_pointwise, packed_linear.h)
  kAtenLinear,     // at::linear (everything else: bf16 left over, CUDA, autograd)
};

// The kernel inference_linear runs for `rows` input rows of x_like's dtype and device against
// w_FD (x_like's own rows are not read; rows = 0 stands for an input that is not 2-D).
LinearKernel inference_linear_kernel(int64_t rows, const at::Tensor& x_like,
                                     const at::Tensor& w_FD);

// [M, F] in x's dtype; b_F may be undefined.
at::Tensor inference_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F);

class PackedWeights;  // packed_linear.h
// The same with the engine's packed weights (may be null): bf16 rows that the rule leaves to
// at::linear go to packed_linear (oneDNN's GEMM on the copy packed at load) when `weights`
// holds a current copy of w_FD; every other shape as above.
at::Tensor inference_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F,
                            const PackedWeights* weights);

// The parts of the rule, each whether its kernel takes the shape where the ones before it in
// inference_linear_kernel's order have not: bf16 dot products, avx512_linear, avx2_linear,
// skinny_linear.
bool inference_linear_takes_bf16_dot(int64_t rows, const at::Tensor& x_like,
                                     const at::Tensor& w_FD);
bool inference_linear_takes_avx512(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD);
bool inference_linear_takes_avx2(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD);
bool inference_linear_takes_skinny(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD);

// Row groups against their own weights, y[rows of g] = x[rows of g] W_g^T: group g is the
// rows_G[g] rows after the previous groups' (sum = x's rows); every W_g has the same shape and
// dtype, no bias. All groups run in one parallel region, where a per-group loop of small GEMMs
// (an MoE layer's experts at decode, a few rows each) costs more in dispatch and thread wake-ups
// than in arithmetic. Defined only when every non-empty group is taken by the same one of the
// grouped kernels (the bf16 dot path, avx2_linear or skinny_linear, asked in that order);
// otherwise an undefined tensor, and the caller runs its per-group loop. Where inference_linear
// would pick that same kernel for each group alone (always for weights under 1M elements, an
// MoE expert's), each group's rows equal inference_linear(its rows, W_g) bit for bit.
at::Tensor grouped_inference_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                                    const std::vector<int64_t>& rows_G);

}  // namespace furlong::kernels
