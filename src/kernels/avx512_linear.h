// y = x W^T (+ b) for up to a few hundred input rows on AVX-512 CPUs: the decode steps of the
// rollout engine (B sequences times every [F, D] weight of the model), in the weight's own
// row-major layout, so no packed copy of the weights exists and a weight update needs no
// re-layout.
//
// Each output element is a dot product of one input row with one weight row, computed with the
// same instruction sequence whatever M, the tile it falls in or the thread count: 16 (fp32) or
// 16 pair-wise (bf16) lane sums over d in order, a masked tail, then a fixed lane reduction.
// So a row's result does not depend on the other rows of the batch (batch invariance).
// - fp32 inputs: fp32 FMAs; bf16 weights widen to fp32 exactly. Error within gamma_D *
//   sum_d |x_d w_d|.
// - bf16 inputs and bf16 weights on CPUs with AVX512-BF16: vdpbf16ps, products exact in fp32,
//   fp32 sums; the result is rounded to bf16 once (as oneDNN's bf16 GEMM).
// Register tile: 4 weight rows x 6 input rows (24 accumulators; bf16: x 4 rows, 16); the 4
// weight rows (at most 4 * D elements) stay in L1 while every input row passes over them, so
// weights are read from memory once per call. With one input row the tile is 8 weight rows (8
// independent FMA chains, which a lone row's chain would leave waiting on the FMA latency).
// The lane sums of four weight rows are reduced together (reduce4 in the .cpp), the same
// additions for every position.
//
// inference_linear (inference_linear.h) routes here on AVX-512 CPUs at the shapes its table of
// thresholds gives: small bf16 weights (an MoE expert's projections), dense weights and the
// vocabulary head up to a row count; beyond it oneDNN's packed GEMM is as fast
// (Avx512Linear.DISABLED_ReportThroughput compares them).
//
// Shapes (legend in docs/architecture.md): M = input rows, D = input width, F = output width.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace furlong::kernels {

// The CPU has AVX-512 F/BW (and, for the bf16 x bf16 path, AVX512-BF16), and ATen is not
// capped below AVX-512 by ATEN_CPU_CAPABILITY (so an AVX2 run takes the AVX2 paths throughout).
bool avx512_linear_available();
bool avx512_bf16_dot_available();

// CPU, 2-D, matching D, fp32 or bf16 operands, contiguous weight, no autograd, and
// avx512_linear_available(); bf16 x with fp32 W is widened.
bool avx512_linear_supported(const at::Tensor& x_MD, const at::Tensor& w_FD);

// [M, F] in x's dtype; b_F may be undefined.
at::Tensor avx512_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F);

// bf16 inputs against bf16 weights per row group (group g: the rows_G[g] rows after the
// previous groups'; every W_g the same shape), in one parallel loop over groups and weight
// tiles; needs avx512_bf16_dot_available(). Each output element takes the same instructions as
// in avx512_linear, so each group's rows equal avx512_linear(its rows, W_g) bit for bit.
at::Tensor avx512_grouped_bf16_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                                      const std::vector<int64_t>& rows_G);

}  // namespace furlong::kernels
