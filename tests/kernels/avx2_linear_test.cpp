// The AVX2 decode GEMM (kernels/avx2_linear.h) against an fp64 reference, with the worst-case
// bound of a D-term fp32 dot product: |y - y_ref| <= gamma_{D+1} * sum_d |x_d w_d| (Higham,
// 3.1; any summation order, +1 for the bias). bf16 weights widen exactly, so the bound of their
// fp32 values holds. Batch and thread invariance are asserted bit for bit. The kernel runs on
// AVX-512 CPUs too (AVX2 is a subset), so these tests run wherever the CPU has AVX2 and FMA.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <utility>
#include <vector>

#include "common/tolerances.h"
#include "kernels/avx2_linear.h"
#include "kernels/avx512_linear.h"
#include "kernels/inference_linear.h"
#include "kernels/skinny_linear.h"
#include "linear_checks.h"

namespace furlong::kernels {
namespace {

namespace tol = furlong::testing::tol;

#define SKIP_WITHOUT_AVX2() \
  if (!avx2_linear_available()) GTEST_SKIP() << "this CPU has no AVX2 + FMA"

TEST(Avx2Linear, MatchesFloat64WithinTheDotProductBound) {
  SKIP_WITHOUT_AVX2();
  c10::InferenceMode guard;
  at::manual_seed(15);
  // Odd sizes exercise every remainder: rows % 3, weight rows % 4 and D % 8.
  for (int64_t M : {1, 2, 3, 4, 5, 8, 33}) {
    for (auto [F, D] : {std::pair<int64_t, int64_t>{37, 1029}, {6, 7}, {256, 64}, {1027, 1024}}) {
      auto x = at::randn({M, D}), w = at::randn({F, D}), b = at::randn({F});
      EXPECT_LE(tol::linear_excess_over_bound(avx2_linear(x, w, {}), x, w, {}, false), 0.0)
          << M << "x" << D << " . " << F;
      EXPECT_LE(tol::linear_excess_over_bound(avx2_linear(x, w, b), x, w, b, false), 0.0);
      auto wb = w.to(at::kBFloat16);
      EXPECT_LE(tol::linear_excess_over_bound(avx2_linear(x, wb, b), x, wb, b, false), 0.0)
          << M << "x" << D << " . " << F << " bf16 weights";
    }
  }
}

// A row's output is the same bits whatever the other rows of the batch and the thread count.
TEST(Avx2Linear, EachRowIsIndependentOfTheBatchAndTheThreads) {
  SKIP_WITHOUT_AVX2();
  c10::InferenceMode guard;
  at::manual_seed(16);
  auto linear = [](const at::Tensor& x, const at::Tensor& w) { return avx2_linear(x, w, {}); };
  for (auto wtype : {at::kFloat, at::kBFloat16}) {
    testing::expect_rows_independent_of_batch_and_threads(linear, at::kFloat, wtype);
  }
}

TEST(Avx2Linear, RejectsWhatItCannotCompute) {
  EXPECT_FALSE(avx2_linear_supported(at::randn({2, 8}), at::randn({4, 9})));
  EXPECT_FALSE(avx2_linear_supported(at::randn({2, 8}), at::randn({8, 4}).t()));
  EXPECT_FALSE(avx2_linear_supported(at::randn({2, 8}).to(at::kBFloat16), at::randn({4, 8})));
  EXPECT_FALSE(avx2_linear_supported(at::randn({2, 8}), at::randn({4, 8}).to(at::kDouble)));
  EXPECT_FALSE(avx2_linear_supported(at::randn({2, 8}), at::randn({4, 8}).requires_grad_()));
}

// Not a timed assertion: ms per product at the decode shapes of Qwen3-0.6B against skinny_linear
// and inference_linear, for the record. To compare with what an AVX2-only CPU would run, cap the
// libraries too: ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
// (skinny_linear's clones still pick their AVX-512 build on an AVX-512 CPU).
TEST(Avx2Linear, DISABLED_ReportThroughput) {
  SKIP_WITHOUT_AVX2();
  c10::InferenceMode guard;
  const auto& time = testing::ms_per_call;
  for (auto [F, D] :
       {std::pair<int64_t, int64_t>{3072, 1024}, {1024, 3072}, {2048, 1024}, {151936, 1024}}) {
    std::vector<at::Tensor> ws;  // larger than the caches, so every call streams from memory
    for (int i = 0; i < (F > 100000 ? 1 : 28); ++i) ws.push_back(at::randn({F, D}));
    for (int64_t M : {1, 2, 8, 16, 32, 64, 128, 256}) {
      auto x = at::randn({M, D});
      double ours = time(ws, [&](const at::Tensor& w) { avx2_linear(x, w, {}); });
      double sk = time(ws, [&](const at::Tensor& w) { skinny_linear(x, w, {}); });
      double inf = time(ws, [&](const at::Tensor& w) { inference_linear(x, w, {}); });
      double aten = time(ws, [&](const at::Tensor& w) { at::linear(x, w); });
      std::printf(
          "fp32 [%ld,%ld] M=%3ld avx2 %.3f ms (%.1f GF/s)  skinny %.3f  inference_linear %.3f  "
          "aten %.3f\n",
          F, D, M, ours, 2.0 * M * F * D / (ours * 1e-3) / 1e9, sk, inf, aten);
    }
  }
}

}  // namespace
}  // namespace furlong::kernels
