// y = x W^T (+ b) for a few input rows against a large weight: the decode steps of the rollout
// engine, where a batch of B sequences multiplies [B, D] by every [F, D] weight of the model.
// MKL's sgemm re-packs the whole weight on every call in this layout, so at B = 1..16 it reads
// and writes the weight several times; this kernel streams each weight row from memory once
// (a 4-row tile stays in L1 while every input row passes over it) and accumulates in fp32.
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

namespace furlong::kernels {

// CPU, 2-D, matching D, fp32/bf16, contiguous weight, no autograd (inference only).
bool skinny_linear_supported(const at::Tensor& x_MD, const at::Tensor& w_FD);

// [M, F] in x's dtype; b_F may be undefined.
at::Tensor skinny_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F);

}  // namespace furlong::kernels

namespace furlong::kernels {

// The engine's inference GEMM, y = x W^T (+ b), choosing per shape what measured fastest at
// decode shapes (Qwen3-0.6B, 2 threads; the DISABLED_ReportThroughput probes print them):
// - one input row (batch-1 decode) that neither avx512_linear nor avx2_linear below takes
//   (small weights, bf16 inputs without AVX512-BF16): skinny_linear (one row streams weights
//   at 32-37 GB/s, about the machine's read bandwidth);
// - bf16 weights under 1M elements (an MoE expert's projections) with bf16 inputs at up to 16
//   rows, on CPUs with AVX512-BF16: avx512_linear's vdpbf16ps path;
// - on AVX-512 CPUs, fp32 x fp32 or (with AVX512-BF16) bf16 x bf16, weights of 1M elements and
//   more: avx512_linear at 1..64 rows (bf16: 1..16), and for a vocabulary-sized head at any
//   number of rows in fp32 and up to 32 in bf16 (1.05-2x faster than oneDNN / MKL there); bf16
//   on CPUs whose oneDNN runs bf16 GEMMs on AMX tiles (core/dtype.h cpu_has_amx_bf16) only at
//   1..7 rows, dense and head alike (from 8 rows the AMX GEMM is as fast, at 32 rows 3x);
// - on CPUs with AVX2 but not AVX-512, fp32 inputs against weights of 1M elements and more
//   (fp32 or bf16): avx2_linear (avx2_linear.h) at 1..64 rows, and for a vocabulary head at
//   1..256 (1.2-1.5x oneDNN / MKL capped at AVX2 from 2 rows, level with MKL's gemv at one);
// - up to 16 rows: skinny_linear for a vocabulary-sized head (>= 32768 rows; in bf16 only
//   where the CPU lacks native bf16, else oneDNN's bf16 GEMM is faster), for weights under
//   1M elements (an MoE expert's projections, whose GEMMs are too small for oneDNN's per-call
//   cost), and on CPUs without AVX-512 for dense weights with bf16 inputs (the same kernel in
//   fp32 measured 1.2-1.6x oneDNN's AVX2 GEMM at 2..16 rows);
// - other fp32 CPU weights up to 32M elements: oneDNN's matmul (mkldnn::_linear_pointwise;
//   [3072, 1024] at 8 rows: 1.2 ms against ATen's 2.2 ms); ATen's linear when this libtorch
//   has no mkldnn ops; larger fp32 weights: MKL as W x^T (at 32 rows 1.4x faster than x W^T,
//   which re-packs the whole weight per call);
// - everything else (bf16, CUDA): at::linear.
at::Tensor inference_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F);

// Whether inference_linear sends `rows` input rows of x's dtype against w_FD to
// avx512_linear's bf16 dot products (checked first), or to skinny_linear (checked last).
bool inference_linear_takes_bf16_dot(int64_t rows, const at::Tensor& x_like,
                                     const at::Tensor& w_FD);
bool inference_linear_takes_skinny(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD);
// Whether it sends them to avx512_linear as a dense layer or vocabulary head (the rule above).
bool inference_linear_takes_avx512(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD);
// Whether it sends them to avx2_linear (checked after avx512_linear, before skinny_linear).
bool inference_linear_takes_avx2(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD);

// Row groups against their own weights, y[rows of g] = x[rows of g] W_g^T: group g is the
// rows_G[g] rows after the previous groups' (sum = x's rows); every W_g has the same shape and
// dtype, no bias. All groups run in one parallel region, where a per-group loop of small GEMMs
// (an MoE layer's experts at decode, a few rows each) costs more in dispatch and thread wake-ups
// than in arithmetic. Defined only when inference_linear would take skinny_linear for every
// group (or avx512_linear's bf16 dot path, or avx2_linear, for every group; skinny_linear.h,
// avx512_linear.h and avx2_linear.h run the groups in one loop); then each group's rows equal
// inference_linear(its rows, W_g) bit for bit. Otherwise an undefined tensor: the caller runs its
// per-group loop.
at::Tensor grouped_inference_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                                    const std::vector<int64_t>& rows_G);

}  // namespace furlong::kernels
