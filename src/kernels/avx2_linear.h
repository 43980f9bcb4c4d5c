// y = x W^T (+ b) for a few dozen fp32 input rows on CPUs with AVX2 and FMA but no AVX-512: the
// decode steps of the rollout engine at batch 2..64 (B sequences times every [F, D] weight of
// the model), in the weight's own row-major layout (no packed copy, no re-layout on a weight
// update). avx512_linear.h is the same design for AVX-512 CPUs.
//
// Register tile: 4 weight rows x 3 input rows, 12 ymm accumulators of 8 fp32 lanes plus 3 input
// vectors and 1 weight vector, the 16 registers AVX2 has. The 4 weight rows (16 KB at D = 1024)
// stay in L1 while every input row passes over them, so weights are read from memory once per
// call; per 8 elements of d it loads 7 vectors for 12 FMAs, where skinny_linear's 4 x 2 tile
// loads 6 for 8 (Avx2Linear.DISABLED_ReportThroughput times the two).
//
// Each output element is the same instruction sequence whatever M, the tile it falls in or the
// thread count: 8 lane sums over d in order (FMAs), a zero-padded tail, then a fixed lane
// reduction (reduce4 in the .cpp). So a row's result does not depend on the other rows of the
// batch (batch invariance), and its error is within gamma_D * sum_d |x_d w_d| (+1 term for the
// bias). bf16 weights widen to fp32 exactly.
//
// inference_linear (inference_linear.h) routes fp32 inputs here on such CPUs, at the shapes its
// table of thresholds gives. Shapes (legend in docs/architecture.md): M = input rows, D = input
// width, F = output width.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace furlong::kernels {

// The CPU has AVX2 and FMA, and ATen is not capped to its baseline by
// ATEN_CPU_CAPABILITY=default.
bool avx2_linear_available();

// CPU, 2-D, fp32 input, matching D, fp32 or bf16 contiguous weight, no autograd, and
// avx2_linear_available().
bool avx2_linear_supported(const at::Tensor& x_MD, const at::Tensor& w_FD);

// [M, F] fp32; b_F may be undefined.
at::Tensor avx2_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F);

// fp32 inputs against a weight per row group (group g: the rows_G[g] rows after the previous
// groups'; every W_g the same shape and dtype), in one parallel loop over groups and weight
// tiles. Each group's rows equal avx2_linear(its rows, W_g) bit for bit.
at::Tensor avx2_grouped_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                               const std::vector<int64_t>& rows_G);

}  // namespace furlong::kernels
