// The AVX-512 decode GEMM (kernels/avx512_linear.h) against an fp64 reference, with the
// worst-case bound of a D-term fp32 dot product: |y - y_ref| <= gamma_{D+1} * sum_d |x_d w_d|
// (Higham, 3.1; any summation order, +1 for the bias), plus one bf16 rounding of the output for
// bf16 inputs. vdpbf16ps multiplies bf16 pairs exactly in fp32 and adds each product with one
// rounding, so the same bound holds (it also flushes subnormals, which randn data never
// produces). Batch and thread invariance are asserted bit for bit.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <utility>

#include "common/tolerances.h"
#include "kernels/avx512_linear.h"
#include "kernels/inference_linear.h"
#include "linear_checks.h"

namespace furlong::kernels {
namespace {

namespace tol = furlong::testing::tol;

#define SKIP_WITHOUT_AVX512()                                                          \
  if (!avx512_linear_available())                                                      \
  GTEST_SKIP() << "this CPU (or ATEN_CPU_CAPABILITY) has no AVX-512: the engine uses " \
                  "the AVX2 kernels, tested in skinny_linear_test"

TEST(Avx512Linear, MatchesFloat64WithinTheDotProductBound) {
  SKIP_WITHOUT_AVX512();
  c10::InferenceMode guard;
  at::manual_seed(5);
  // Odd sizes exercise every remainder: rows % 4, weight rows % 4, D % 16 and D % 32.
  for (int64_t M : {1, 2, 3, 5, 8, 33}) {
    for (auto [F, D] : {std::pair<int64_t, int64_t>{37, 1029}, {6, 17}, {256, 64}, {1027, 1024}}) {
      auto x = at::randn({M, D}), w = at::randn({F, D}), b = at::randn({F});
      EXPECT_LE(tol::linear_excess_over_bound(avx512_linear(x, w, {}), x, w, {}, false), 0.0)
          << M << "x" << D << " . " << F;
      EXPECT_LE(tol::linear_excess_over_bound(avx512_linear(x, w, b), x, w, b, false), 0.0);
      auto wb = w.to(at::kBFloat16);  // widened exactly: the bound of its fp32 values
      EXPECT_LE(tol::linear_excess_over_bound(avx512_linear(x, wb, b), x, wb, b, false), 0.0);
      auto xb = x.to(at::kBFloat16);
      auto yb = avx512_linear(xb, wb, b);
      ASSERT_EQ(yb.scalar_type(), at::kBFloat16);
      EXPECT_LE(tol::linear_excess_over_bound(yb, xb, wb, b, true), 0.0)
          << M << "x" << D << " . " << F;
      EXPECT_LE(tol::linear_excess_over_bound(avx512_linear(xb, w, {}), xb, w, {}, true), 0.0);
    }
  }
}

// A row's output is the same bits whatever the other rows of the batch and the thread count:
// the property that lets prefix-shared and unshared decodes agree exactly.
TEST(Avx512Linear, EachRowIsIndependentOfTheBatchAndTheThreads) {
  SKIP_WITHOUT_AVX512();
  c10::InferenceMode guard;
  at::manual_seed(6);
  auto linear = [](const at::Tensor& x, const at::Tensor& w) { return avx512_linear(x, w, {}); };
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    testing::expect_rows_independent_of_batch_and_threads(linear, dtype, dtype);
  }
}

TEST(Avx512Linear, RejectsWhatItCannotCompute) {
  EXPECT_FALSE(avx512_linear_supported(at::randn({2, 8}), at::randn({4, 9})));
  EXPECT_FALSE(avx512_linear_supported(at::randn({2, 8}), at::randn({8, 4}).t()));
  EXPECT_FALSE(avx512_linear_supported(at::randn({2, 8}).to(at::kDouble), at::randn({4, 8})));
  EXPECT_FALSE(avx512_linear_supported(at::randn({2, 8}), at::randn({4, 8}).requires_grad_()));
}

// Not a timed assertion: ms per product at the decode shapes of Qwen3-0.6B, against the other
// paths, for the record. Weight sets larger than the caches so every call streams from memory.
TEST(Avx512Linear, DISABLED_ReportThroughput) {
  SKIP_WITHOUT_AVX512();
  c10::InferenceMode guard;
  const auto& time = testing::ms_per_call;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (auto [F, D] :
         {std::pair<int64_t, int64_t>{3072, 1024}, {1024, 3072}, {2048, 1024}, {151936, 1024}}) {
      std::vector<at::Tensor> ws;  // the vocabulary head alone exceeds the caches
      for (int i = 0; i < (F > 100000 ? 1 : 28); ++i) ws.push_back(at::randn({F, D}).to(dtype));
      for (int64_t M : {1, 4, 8, 16, 32, 64, 256}) {
        auto x = at::randn({M, D}).to(dtype);
        double ours = time(ws, [&](const at::Tensor& w) { avx512_linear(x, w, {}); });
        double inf = time(ws, [&](const at::Tensor& w) { inference_linear(x, w, {}); });
        double aten = time(ws, [&](const at::Tensor& w) { at::linear(x, w); });
        const double gflops = 2.0 * M * F * D / (ours * 1e-3) / 1e9;
        std::printf(
            "%s [%ld,%ld] M=%3ld avx512 %.3f ms (%.1f GF/s, %.1f GB/s)  "
            "inference_linear %.3f  aten %.3f\n",
            dtype == at::kFloat ? "fp32" : "bf16", F, D, M, ours, gflops,
            F * D * ws[0].element_size() / (ours * 1e-3) / 1e9, inf, aten);
      }
    }
  }
}

}  // namespace
}  // namespace furlong::kernels
