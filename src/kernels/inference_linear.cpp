// inference_linear's rule: the thresholds, the order the kernels are asked in, and the grouped
// form. The thresholds were set by side-by-side timings at decode shapes (Qwen3-0.6B's layers
// and head, the CPU's own threads): the DISABLED_ReportThroughput probes of tests/kernels
// (skinny_linear_test, avx512_linear_test, avx2_linear_test, packed_linear_test) and the engine
// benchmarks bench/generate_bench.py and bench/moe_bench.py (bench/results/*.json). The figures
// that set them are in docs/results/2026-12-07-engine.md.
#include "kernels/inference_linear.h"

#include <ATen/ATen.h>

#include <c10/core/GradMode.h>

#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/avx2_linear.h"
#include "kernels/avx512_linear.h"
#include "kernels/packed_linear.h"
#include "kernels/skinny_linear.h"

namespace furlong::kernels {
namespace {

// ---- the thresholds (weights in elements, rows = input rows per call) ----
// Below: an MoE expert's projection, whose GEMM is too small for oneDNN's fixed cost per call.
constexpr int64_t kSmallWeight = int64_t{1} << 20;
// From this output width a weight is a vocabulary head (a long, thin GEMM of its own).
constexpr int64_t kHeadMinRows = 32768;
// skinny_linear and the bf16 dot products up to here; beyond, the libraries' GEMMs win.
constexpr int64_t kSkinnyMaxRows = 16;
// avx512_linear on fp32 dense weights; oneDNN is level beyond (the fp32 head has no cap).
constexpr int64_t kFp32DenseMaxRows = 64;
// avx512_linear on a bf16 head (AVX512-BF16 without AMX); oneDNN's bf16 GEMM is level beyond.
constexpr int64_t kBf16HeadMaxRows = 32;
// avx512_linear in bf16 on AMX CPUs; from 8 rows oneDNN's AMX GEMM is as fast, then faster.
constexpr int64_t kBf16AmxMaxRows = 7;
// avx2_linear on dense weights; oneDNN's AVX2 GEMM is level from about twice this.
constexpr int64_t kAvx2DenseMaxRows = 64;
// avx2_linear on a vocabulary head; MKL is level beyond.
constexpr int64_t kAvx2HeadMaxRows = 256;
// Above: an fp32 weight goes to MKL as W x^T (blocked as it streams) instead of oneDNN.
constexpr int64_t kOneDnnMaxWeight = int64_t{1} << 25;

bool cpu_bf16_pair(const at::Tensor& x_like, const at::Tensor& w_FD) {
  return x_like.scalar_type() == at::kBFloat16 && w_FD.scalar_type() == at::kBFloat16;
}

}  // namespace

bool inference_linear_takes_bf16_dot(int64_t rows, const at::Tensor& x_like,
                                     const at::Tensor& w_FD) {
  // Small bf16 weights at a few rows, where the CPU has bf16 dot products: vdpbf16ps does two
  // products per lane per instruction on bf16 operands as stored, where the skinny kernel widens
  // both to fp32.
  return rows <= kSkinnyMaxRows && cpu_bf16_pair(x_like, w_FD) && w_FD.dim() == 2 &&
         w_FD.numel() < kSmallWeight && avx512_bf16_dot_available() &&
         avx512_linear_supported(x_like, w_FD);
}

bool inference_linear_takes_avx512(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD) {
  // Dense weights and the vocabulary head, fp32 x fp32 or (with AVX512-BF16) bf16 x bf16: the
  // register tiles read each weight once per call, where the libraries re-pack it. From one
  // row: a row then gets the same bits at every batch size up to the cap, and a bf16 row needs
  // no fp32 copy of the input and no rounding pass over the output (skinny_linear's two ATen
  // ops).
  if (rows < 1 || w_FD.dim() != 2 || w_FD.numel() < kSmallWeight) return false;
  const bool fp32 = x_like.scalar_type() == at::kFloat && w_FD.scalar_type() == at::kFloat;
  const bool bf16_dot = cpu_bf16_pair(x_like, w_FD) && avx512_bf16_dot_available();
  if (!fp32 && !bf16_dot) return false;
  const bool head = w_FD.size(0) >= kHeadMinRows;
  const int64_t bf16_max_rows =
      cpu_has_amx_bf16() ? kBf16AmxMaxRows : (head ? kBf16HeadMaxRows : kSkinnyMaxRows);
  const int64_t max_rows =
      fp32 ? (head ? std::numeric_limits<int64_t>::max() : kFp32DenseMaxRows) : bf16_max_rows;
  return rows <= max_rows && avx512_linear_supported(x_like, w_FD);
}

bool inference_linear_takes_avx2(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD) {
  // fp32 inputs against weights of kSmallWeight and more (fp32 or bf16) on CPUs with AVX2 but
  // not AVX-512: the same register tiling as avx512_linear for 16 ymm registers.
  if (rows < 1 || w_FD.dim() != 2 || w_FD.numel() < kSmallWeight || avx512_linear_available())
    return false;
  const int64_t max_rows = w_FD.size(0) >= kHeadMinRows ? kAvx2HeadMaxRows : kAvx2DenseMaxRows;
  return rows <= max_rows && avx2_linear_supported(x_like, w_FD);
}

bool inference_linear_takes_skinny(int64_t rows, const at::Tensor& x_like, const at::Tensor& w_FD) {
  // A bf16 vocabulary head at 2..16 rows goes to oneDNN where the CPU computes bf16 natively
  // (AVX512-BF16, AMX); without native bf16 oneDNN emulates it, and the skinny kernel, which
  // widens the weight once, is faster.
  const bool native_bf16_head =
      cpu_bf16_pair(x_like, w_FD) && x_like.is_cpu() && has_native_bf16(c10::Device(c10::kCPU));
  // Dense weights at 2..16 rows on CPUs without AVX-512 that avx2_linear does not take (bf16
  // inputs): skinny's 8-lane tiles stream the weight once, where oneDNN's AVX2 GEMM re-reads it.
  const bool dense_without_avx512 =
      !avx512_linear_available() && x_like.is_cpu() &&
      (x_like.scalar_type() == at::kFloat || !has_native_bf16(c10::Device(c10::kCPU)));
  // One row (batch-1 decode) that no kernel above takes: one stream over the weight.
  const bool skinny_shape = x_like.dim() == 2 && w_FD.dim() == 2 &&
                            (rows == 1 || (rows <= kSkinnyMaxRows &&
                                           ((w_FD.size(0) >= kHeadMinRows && !native_bf16_head) ||
                                            w_FD.numel() < kSmallWeight || dense_without_avx512)));
  return skinny_shape && skinny_linear_supported(x_like, w_FD);
}

LinearKernel inference_linear_kernel(int64_t rows, const at::Tensor& x_like,
                                     const at::Tensor& w_FD) {
  if (inference_linear_takes_bf16_dot(rows, x_like, w_FD)) return LinearKernel::kAvx512Bf16Dot;
  if (inference_linear_takes_avx512(rows, x_like, w_FD)) return LinearKernel::kAvx512;
  if (inference_linear_takes_avx2(rows, x_like, w_FD)) return LinearKernel::kAvx2;
  if (inference_linear_takes_skinny(rows, x_like, w_FD)) return LinearKernel::kSkinny;
  const bool cpu_fp32 = x_like.is_cpu() && x_like.dim() == 2 && w_FD.dim() == 2 &&
                        x_like.scalar_type() == at::kFloat && w_FD.scalar_type() == at::kFloat;
  if (!cpu_fp32) return LinearKernel::kAtenLinear;
  // A vocabulary-sized weight as MKL's A operand, which MKL blocks as it streams it; x W^T would
  // re-pack the whole weight per call.
  if (w_FD.numel() > kOneDnnMaxWeight) return LinearKernel::kMklTransposed;
  // oneDNN's matmul re-reads a weight less than ATen's linear (MKL) at a few rows.
  if (!onednn_linear_available() || at::GradMode::is_enabled()) return LinearKernel::kAtenLinear;
  return LinearKernel::kOneDnn;
}

at::Tensor inference_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F) {
  const int64_t rows = x_MD.dim() == 2 ? x_MD.size(0) : 0;
  switch (inference_linear_kernel(rows, x_MD, w_FD)) {
    case LinearKernel::kAvx512Bf16Dot:
    case LinearKernel::kAvx512:
      return avx512_linear(x_MD, w_FD, b_F);
    case LinearKernel::kAvx2:
      return avx2_linear(x_MD, w_FD, b_F);
    case LinearKernel::kSkinny:
      return skinny_linear(x_MD, w_FD, b_F);
    case LinearKernel::kMklTransposed: {
      auto y_MF = at::mm(w_FD, x_MD.t()).t().contiguous();
      return b_F.defined() ? y_MF.add_(b_F) : y_MF;
    }
    case LinearKernel::kOneDnn:
      return onednn_linear(x_MD.contiguous(), w_FD.contiguous(), b_F);
    case LinearKernel::kAtenLinear:
      break;
  }
  return at::linear(x_MD, w_FD, b_F);
}

at::Tensor inference_linear(const at::Tensor& x_MD, const at::Tensor& w_FD, const at::Tensor& b_F,
                            const PackedWeights* weights) {
  if (weights != nullptr && x_MD.dim() == 2 && x_MD.scalar_type() == at::kBFloat16 &&
      x_MD.is_cpu() && !at::GradMode::is_enabled()) {
    const at::Tensor* packed = weights->find(w_FD);
    if (packed != nullptr &&
        inference_linear_kernel(x_MD.size(0), x_MD, w_FD) == LinearKernel::kAtenLinear) {
      return packed_linear(x_MD, *packed, b_F);
    }
  }
  return inference_linear(x_MD, w_FD, b_F);
}

at::Tensor grouped_inference_linear(const at::Tensor& x_AD, const std::vector<at::Tensor>& w_G_FD,
                                    const std::vector<int64_t>& rows_G) {
  FURLONG_ASSERT(!w_G_FD.empty() && w_G_FD.size() == rows_G.size(),
                 "grouped_inference_linear: ", w_G_FD.size(), " weights for ", rows_G.size(),
                 " row groups");
  int64_t total_rows = 0;
  bool any_bf16_dot = false, any_avx2 = false, any_skinny = false;
  for (size_t g = 0; g < w_G_FD.size(); ++g) {
    const auto& w = w_G_FD[g];
    FURLONG_ASSERT(
        w.sizes() == w_G_FD.front().sizes() && w.scalar_type() == w_G_FD.front().scalar_type(),
        "grouped_inference_linear: weight ", g, " is ", w.sizes(), " ", w.scalar_type(),
        ", weight 0 ", w_G_FD.front().sizes(), " ", w_G_FD.front().scalar_type());
    if (rows_G[g] == 0) continue;
    if (inference_linear_takes_bf16_dot(rows_G[g], x_AD, w)) {
      any_bf16_dot = true;
    } else if (inference_linear_takes_avx2(rows_G[g], x_AD, w)) {
      any_avx2 = true;
    } else if (inference_linear_takes_skinny(rows_G[g], x_AD, w)) {
      any_skinny = true;
    } else {
      return {};
    }
    total_rows += rows_G[g];
  }
  FURLONG_ASSERT(x_AD.dim() == 2 && total_rows == x_AD.size(0),
                 "grouped_inference_linear: ", total_rows, " grouped rows for input ",
                 x_AD.sizes());
  // Groups that would be split between kernels: the caller's loop does that.
  if (int{any_bf16_dot} + int{any_avx2} + int{any_skinny} > 1) return {};
  if (any_bf16_dot) return avx512_grouped_bf16_linear(x_AD, w_G_FD, rows_G);
  return any_avx2 ? avx2_grouped_linear(x_AD, w_G_FD, rows_G)
                  : grouped_skinny_linear(x_AD, w_G_FD, rows_G);
}

}  // namespace furlong::kernels
