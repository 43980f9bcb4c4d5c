// y = x W^T (+ b) for a few input rows against a large weight: the decode steps of the rollout
// engine, where a batch of B sequences multiplies [B, D] by every [F, D] weight of the model
// (inference_linear.h decides where it runs). MKL's sgemm re-packs the whole weight on every call
// in this layout, so at B = 1..16 it reads and writes the weight several times; this kernel streams
// each weight row from memory once (a 4-row tile stays in L1 while every input row passes over it)
// and accumulates in fp32.
//
// Weights may be fp32 or bf16 (bf16 widens to fp32 exactly, so bf16 weights cost half the
// bandwidth); inputs fp32 or bf16 (widened once). The result has the input's dtype: bf16
// outputs are fp32 sums rounded once, as oneDNN's bf16 GEMM does. Summation order: 8 strided
// lane sums over d (four such sets interleaved for a single input row), then a fixed pairwise
// sum of the lanes; the error of each output is within
// the deterministic bound gamma_D * sum_d |x_d w_d| for D terms (any order satisfies it).
//
// Shapes (legend in docs/architecture.md): M = input rows, D = input width, F = output width.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace furlong::kernels {

// CPU, 2-D, matching D, fp32/bf16, contiguous weight, no autograd (inference only).
bool skinny_linear_supported(const at::Tensor& x_MD, const at::Tensor& w_FD);

// [M, F] in x's dtype; b_F may be undefined.
at::Tensor skinny_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F);

// Row groups against their own weights, y[rows of g] = x[rows of g] W_g^T (group g: the rows_G[g]
// rows after the previous groups'; every W_g of one shape and dtype, each as skinny_linear
// supports), in one parallel loop over (group, weight tile). Every output element is computed
// by the same tile routine as skinny_linear on the group's rows alone, so the results are equal
// bit for bit (grouped_inference_linear in inference_linear.h decides when to call it).
at::Tensor grouped_skinny_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                                 const std::vector<int64_t>& rows_G);

}  // namespace furlong::kernels
