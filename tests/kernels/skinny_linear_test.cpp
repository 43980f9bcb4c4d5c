// The engine's inference GEMM (kernels/inference_linear.h) and skinny_linear against an fp64
// reference, with the worst-case bound of a D-term fp32 dot product: |y - y_ref| <= gamma_D * sum_d
// |x_d w_d| (Higham, 3.1; any summation order), plus one bf16 rounding of the output for bf16
// inputs.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "common/tolerances.h"
#include "core/dtype.h"
#include "kernels/avx2_linear.h"
#include "kernels/avx512_linear.h"
#include "kernels/inference_linear.h"
#include "kernels/skinny_linear.h"

namespace furlong::kernels {
namespace {

namespace tol = testing::tol;

TEST(SkinnyLinear, MatchesFloat64WithinTheDotProductBound) {
  c10::InferenceMode guard;
  at::manual_seed(3);
  // Odd sizes exercise every tile remainder: rows % 2, weight rows % 4 and D % 8.
  for (int64_t M : {1, 2, 3, 8, 16}) {
    for (auto [F, D] : {std::pair<int64_t, int64_t>{37, 1029}, {256, 64}, {3072, 1024}}) {
      auto x = at::randn({M, D}), w = at::randn({F, D}), b = at::randn({F});
      EXPECT_LE(tol::linear_excess_over_bound(skinny_linear(x, w, {}), x, w, {}, false), 0.0)
          << M << "x" << D << " . " << F;
      EXPECT_LE(tol::linear_excess_over_bound(skinny_linear(x, w, b), x, w, b, false), 0.0);
      // bf16 weights are widened exactly: the bound is that of their fp32 values.
      auto wb = w.to(at::kBFloat16);
      EXPECT_LE(tol::linear_excess_over_bound(skinny_linear(x, wb, {}), x, wb, {}, false), 0.0);
      auto xb = x.to(at::kBFloat16);
      auto yb = skinny_linear(xb, wb, {});
      EXPECT_EQ(yb.scalar_type(), at::kBFloat16);
      EXPECT_LE(tol::linear_excess_over_bound(yb, xb, wb, {}, true), 0.0);
    }
  }
}

TEST(SkinnyLinear, InferenceLinearTakesEveryPathWithinTheBound) {
  c10::InferenceMode guard;
  at::manual_seed(4);
  auto w = at::randn({512, 256}), b = at::randn({512});
  auto head_w = at::randn({40000, 32}), head_b = at::randn({40000});
  auto dense_w = at::randn({1024, 1024}), dense_b = at::randn({1024});
  // Small weight: skinny up to 16 rows, else oneDNN; dense weight: skinny at 1 row, avx512_linear
  // at 2..16 (on AVX-512 CPUs), else oneDNN; head: skinny or avx512_linear, MKL from 17 rows
  // without AVX-512.
  for (int64_t M : {1, 2, 16, 17, 64}) {
    auto x = at::randn({M, 256});
    EXPECT_LE(tol::linear_excess_over_bound(inference_linear(x, w, b), x, w, b, false), 0.0) << M;
    auto xd = at::randn({M, 1024});
    EXPECT_LE(tol::linear_excess_over_bound(inference_linear(xd, dense_w, dense_b), xd, dense_w,
                                            dense_b, false),
              0.0)
        << M;
    auto xh = at::randn({M, 32});
    EXPECT_LE(tol::linear_excess_over_bound(inference_linear(xh, head_w, head_b), xh, head_w,
                                            head_b, false),
              0.0)
        << M;
  }
  // A non-contiguous input view is fine on every path.
  auto x = at::randn({64, 512}).narrow(1, 0, 256);
  EXPECT_LE(tol::linear_excess_over_bound(inference_linear(x, w, b), x, w, b, false), 0.0);
  EXPECT_LE(tol::linear_excess_over_bound(inference_linear(x.narrow(0, 0, 4), w, b),
                                          x.narrow(0, 0, 4), w, b, false),
            0.0);
}

// The routing rule of inference_linear.h on AVX-512 CPUs: fp32 dense weights (1M elements and
// more) at 1..64 rows and an fp32 vocabulary head at any number (bf16: dense 1..16, the head
// 1..32, both 1..7 on AMX CPUs) go to avx512_linear, bit for bit its result; small weights and
// 65+ rows of fp32 dense weights do not.
TEST(SkinnyLinear, InferenceLinearSendsDecodeShapesToTheAvx512Kernel) {
  if (!avx512_linear_available()) GTEST_SKIP() << "no AVX-512 (or ATEN_CPU_CAPABILITY caps it)";
  c10::InferenceMode guard;
  at::manual_seed(7);
  auto dense = at::randn({1024, 1024}), small = at::randn({512, 256});
  auto head = at::randn({40000, 32});
  auto x = at::randn({1, 1024}), xh = at::randn({1, 32});
  // fp32 dense: 1..64 rows; bf16 dense (with bf16 dot products): 1..16.
  for (int64_t rows : {1, 2, 8, 16, 17, 64})
    EXPECT_TRUE(inference_linear_takes_avx512(rows, x, dense));
  for (int64_t rows : {65, 256}) EXPECT_FALSE(inference_linear_takes_avx512(rows, x, dense));
  for (int64_t rows : {1, 2, 16, 64, 256})
    EXPECT_TRUE(inference_linear_takes_avx512(rows, xh, head));
  EXPECT_FALSE(inference_linear_takes_avx512(8, at::randn({1, 256}), small));
  if (avx512_bf16_dot_available()) {
    // bf16 x bf16: the head at 1..32 rows and dense weights at 1..16, or both at 1..7 where
    // oneDNN's bf16 GEMM runs on AMX tiles.
    const bool amx = cpu_has_amx_bf16();
    const int64_t head_max = amx ? 7 : 32, dense_max = amx ? 7 : 16;
    auto xb = xh.to(at::kBFloat16), hb = head.to(at::kBFloat16);
    EXPECT_TRUE(inference_linear_takes_avx512(1, xb, hb));  // one bf16 row too
    EXPECT_TRUE(inference_linear_takes_avx512(head_max, xb, hb));
    EXPECT_FALSE(inference_linear_takes_avx512(head_max + 1, xb, hb));
    EXPECT_FALSE(inference_linear_takes_avx512(4, xb, head));  // mixed dtypes: not routed
    auto db = dense.to(at::kBFloat16);
    EXPECT_TRUE(inference_linear_takes_avx512(dense_max, x.to(at::kBFloat16), db));
    EXPECT_FALSE(inference_linear_takes_avx512(dense_max + 1, x.to(at::kBFloat16), db));
  }
  for (int64_t rows : {1, 2, 8, 16, 33, 64}) {
    auto xr = at::randn({rows, 1024});
    EXPECT_TRUE(at::equal(inference_linear(xr, dense, {}), avx512_linear(xr, dense, {}))) << rows;
    auto xhr = at::randn({rows * 4, 32});
    EXPECT_TRUE(at::equal(inference_linear(xhr, head, {}), avx512_linear(xhr, head, {}))) << rows;
  }
}

// The routing rule on CPUs without AVX-512 (or with ATen capped below it): fp32 inputs against
// weights of 1M elements and more go to avx2_linear, dense at 1..64 rows and a vocabulary head
// at 1..256, bit for bit its result; bf16 inputs against dense weights go to skinny_linear at
// 1..16 rows. Small weights do not go to avx2_linear.
TEST(SkinnyLinear, InferenceLinearSendsDecodeShapesToTheAvx2KernelWithoutAvx512) {
  if (avx512_linear_available()) GTEST_SKIP() << "AVX-512 CPU: avx512_linear takes these shapes";
  if (!avx2_linear_available()) GTEST_SKIP() << "no AVX2 + FMA";
  c10::InferenceMode guard;
  at::manual_seed(8);
  auto dense = at::randn({1024, 1024}), head = at::randn({40000, 32});
  auto small = at::randn({512, 256});
  auto x = at::randn({1, 1024}), xh = at::randn({1, 32});
  for (int64_t rows : {1, 2, 8, 16, 17, 64})
    EXPECT_TRUE(inference_linear_takes_avx2(rows, x, dense)) << rows;
  for (int64_t rows : {65, 256}) EXPECT_FALSE(inference_linear_takes_avx2(rows, x, dense)) << rows;
  for (int64_t rows : {1, 64, 256}) EXPECT_TRUE(inference_linear_takes_avx2(rows, xh, head));
  EXPECT_FALSE(inference_linear_takes_avx2(257, xh, head));
  EXPECT_FALSE(inference_linear_takes_avx2(8, at::randn({1, 256}), small));
  EXPECT_TRUE(inference_linear_takes_avx2(8, x, dense.to(at::kBFloat16)));  // widened weights
  auto xb = x.to(at::kBFloat16), db = dense.to(at::kBFloat16);
  EXPECT_FALSE(inference_linear_takes_avx2(8, xb, db));
  for (int64_t rows : {1, 2, 8, 16}) EXPECT_TRUE(inference_linear_takes_skinny(rows, xb, db));
  EXPECT_FALSE(inference_linear_takes_skinny(17, xb, db));
  for (int64_t rows : {1, 2, 8, 33, 64}) {
    auto xr = at::randn({rows, 1024});
    EXPECT_TRUE(at::equal(inference_linear(xr, dense, {}), avx2_linear(xr, dense, {}))) << rows;
    auto xhr = at::randn({rows * 4, 32});
    EXPECT_TRUE(at::equal(inference_linear(xhr, head, {}), avx2_linear(xhr, head, {}))) << rows;
  }
  // An MoE layer with large experts (1M elements and more each): the grouped call takes the
  // AVX2 kernel for every group, each group's rows equal to its own call bit for bit.
  const std::vector<int64_t> rows_G = {3, 0, 1, 16, 2};
  auto x_AD = at::randn({22, 1024});
  std::vector<at::Tensor> w_G;
  for (size_t g = 0; g < rows_G.size(); ++g) w_G.push_back(at::randn({1024, 1024}));
  auto y_AF = grouped_inference_linear(x_AD, w_G, rows_G);
  ASSERT_TRUE(y_AF.defined());
  for (size_t g = 0, row0 = 0; g < rows_G.size(); row0 += rows_G[g], ++g) {
    if (rows_G[g] == 0) continue;
    auto x_rows = x_AD.narrow(0, static_cast<int64_t>(row0), rows_G[g]);
    EXPECT_TRUE(at::equal(y_AF.narrow(0, static_cast<int64_t>(row0), rows_G[g]),
                          avx2_linear(x_rows, w_G[g], {})))
        << "group " << g;
  }
}

// inference_linear_kernel names the first of the rule's parts that takes a shape, and the
// libraries' GEMMs only where none does.
TEST(SkinnyLinear, InferenceLinearKernelIsTheFirstPartOfTheRuleThatTakesTheShape) {
  const std::vector<at::Tensor> weights = {at::randn({64, 256}), at::randn({1024, 1024}),
                                           at::randn({32768, 32}), at::randn({4096, 8192})};
  for (const auto& w32 : weights) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      auto w = w32.to(dtype);
      auto x = at::randn({1, w.size(1)}).to(dtype);
      for (int64_t rows : {0, 1, 2, 7, 8, 16, 17, 32, 33, 64, 65, 256, 257}) {
        LinearKernel want = LinearKernel::kAtenLinear;
        if (inference_linear_takes_bf16_dot(rows, x, w)) {
          want = LinearKernel::kAvx512Bf16Dot;
        } else if (inference_linear_takes_avx512(rows, x, w)) {
          want = LinearKernel::kAvx512;
        } else if (inference_linear_takes_avx2(rows, x, w)) {
          want = LinearKernel::kAvx2;
        } else if (inference_linear_takes_skinny(rows, x, w)) {
          want = LinearKernel::kSkinny;
        }
        const LinearKernel got = inference_linear_kernel(rows, x, w);
        if (want != LinearKernel::kAtenLinear || dtype == at::kBFloat16) {
          EXPECT_EQ(got, want) << w.sizes() << " " << dtype << " rows " << rows;
        } else {
          EXPECT_TRUE(got == LinearKernel::kAtenLinear || got == LinearKernel::kOneDnn ||
                      got == LinearKernel::kMklTransposed)
              << w.sizes() << " rows " << rows;
        }
      }
    }
  }
  // Past every kernel's rows, the largest fp32 weights go to MKL as W x^T.
  c10::InferenceMode guard;
  EXPECT_EQ(inference_linear_kernel(65, at::empty({1, 8192}), at::empty({4097, 8192})),
            LinearKernel::kMklTransposed);
}

// The grouped call is the per-group loop the MoE layer would otherwise run, bit for bit: each
// group's rows against its weight equal inference_linear on them alone (the same tile routine
// over the same tiles), for fp32 and bf16, empty groups and odd sizes included.
TEST(SkinnyLinear, GroupedInferenceLinearEqualsThePerGroupCallsBitForBit) {
  c10::InferenceMode guard;
  at::manual_seed(5);
  const std::vector<int64_t> rows_G = {3, 0, 1, 16, 2, 0, 5};
  int64_t A = 0;
  for (int64_t r : rows_G) A += r;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (auto [F, D] : {std::pair<int64_t, int64_t>{37, 1029}, {256, 512}, {512, 256}}) {
      auto x_AD = at::randn({A, D}).to(dtype);
      std::vector<at::Tensor> w_G;
      for (size_t g = 0; g < rows_G.size(); ++g) w_G.push_back(at::randn({F, D}).to(dtype));
      auto y_AF = grouped_inference_linear(x_AD, w_G, rows_G);
      ASSERT_TRUE(y_AF.defined()) << F << "x" << D;
      ASSERT_EQ(y_AF.scalar_type(), dtype);
      int64_t row0 = 0;
      for (size_t g = 0; g < rows_G.size(); ++g) {
        if (rows_G[g] == 0) continue;
        auto x_rows = x_AD.narrow(0, row0, rows_G[g]);
        EXPECT_TRUE(
            at::equal(y_AF.narrow(0, row0, rows_G[g]), inference_linear(x_rows, w_G[g], {})))
            << "group " << g << ", " << F << "x" << D << ", " << dtype;
        row0 += rows_G[g];
      }
    }
  }
  // A group that inference_linear would not send to the skinny kernel (17 rows) declines the
  // whole call; mismatched weights and row counts are errors.
  auto x_AD = at::randn({18, 64});
  std::vector<at::Tensor> w_G = {at::randn({32, 64}), at::randn({32, 64})};
  EXPECT_FALSE(grouped_inference_linear(x_AD, w_G, {17, 1}).defined());
  EXPECT_THROW(grouped_inference_linear(x_AD, w_G, {1, 1}), std::exception);
  EXPECT_THROW(grouped_inference_linear(x_AD, {w_G[0], at::randn({16, 64})}, {9, 9}),
               std::exception);
}

TEST(SkinnyLinear, RejectsWhatItCannotCompute) {
  EXPECT_FALSE(skinny_linear_supported(at::randn({2, 8}), at::randn({4, 9})));
  EXPECT_FALSE(skinny_linear_supported(at::randn({2, 8}), at::randn({8, 4}).t()));
  EXPECT_FALSE(skinny_linear_supported(at::randn({2, 8}).to(at::kDouble), at::randn({4, 8})));
  EXPECT_FALSE(skinny_linear_supported(at::randn({2, 8}), at::randn({4, 8}).requires_grad_()));
}

// Not a timed assertion: prints ms per product at decode shapes for the record. A weight set
// larger than the caches (28 x [3072, 1024]) so every call streams from memory, as in a model.
TEST(SkinnyLinear, DISABLED_ReportThroughput) {
  c10::InferenceMode guard;
  std::vector<at::Tensor> ws;
  for (int i = 0; i < 28; ++i) ws.push_back(at::randn({3072, 1024}));
  auto time = [&](const std::function<void(const at::Tensor&)>& fn) {
    for (size_t i = 0; i < 2; ++i) fn(ws[i % ws.size()]);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 3; ++r)
      for (const auto& w : ws) fn(w);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
           (3.0 * static_cast<double>(ws.size()));
  };
  for (int64_t M : {1, 2, 4, 8, 16, 32, 64}) {
    auto x = at::randn({M, 1024});
    double sk = time([&](const at::Tensor& w) { skinny_linear(x, w, {}); });
    double inf = time([&](const at::Tensor& w) { inference_linear(x, w, {}); });
    double aten = time([&](const at::Tensor& w) { at::linear(x, w); });
    std::printf("M=%3ld skinny %.3f ms (%.1f GB/s)  inference_linear %.3f ms  aten %.3f ms\n", M,
                sk * 1e3, 3072 * 1024 * 4 / sk / 1e9, inf * 1e3, aten * 1e3);
  }
  // The lm_head of a Qwen3-0.6B shape: [151936, 1024], 622 MB in fp32.
  ws.assign(1, at::randn({151936, 1024}));
  for (int64_t M : {1, 2, 8, 32, 64}) {
    auto x = at::randn({M, 1024});
    double sk = time([&](const at::Tensor& w) { skinny_linear(x, w, {}); });
    double inf = time([&](const at::Tensor& w) { inference_linear(x, w, {}); });
    double aten = time([&](const at::Tensor& w) { at::linear(x, w); });
    std::printf("head M=%3ld skinny %.1f ms  inference_linear %.1f ms  aten %.1f ms\n", M, sk * 1e3,
                inf * 1e3, aten * 1e3);
  }
}

}  // namespace
}  // namespace furlong::kernels
