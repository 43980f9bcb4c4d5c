// oneDNN's prepacked bf16 GEMM (kernels/packed_linear.h): against an fp64 reference within the
// worst-case bound of a D-term fp32 dot product plus one bf16 rounding of the output (bf16
// products are exact in fp32, so the bound of tolerances.h holds for any summation order); the
// table of packed weights answers only for the tensor and storage it packed; and the engine's
// GEMM takes the packed copy exactly where it would otherwise call at::linear.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "common/tolerances.h"
#include "core/dtype.h"
#include "kernels/inference_linear.h"
#include "kernels/packed_linear.h"
#include "linear_checks.h"

namespace furlong::kernels {
namespace {

namespace tol = furlong::testing::tol;

#define SKIP_WITHOUT_ONEDNN()     \
  if (!packed_linear_available()) \
  GTEST_SKIP() << "this libtorch has no oneDNN prepacking ops (or oneDNN is disabled)"

TEST(PackedLinear, MatchesFloat64WithinTheDotProductBound) {
  SKIP_WITHOUT_ONEDNN();
  c10::InferenceMode guard;
  at::manual_seed(11);
  auto w = at::randn({1024, 1040}).to(at::kBFloat16);  // 1M+ elements, D not a multiple of 64
  auto b = at::randn({1024}).to(at::kBFloat16);
  auto packed = pack_linear_weight(w);
  EXPECT_TRUE(packed.is_mkldnn());
  for (int64_t M : {1, 8, 33, 64}) {
    auto x = at::randn({M, 1040}).to(at::kBFloat16);
    auto y = packed_linear(x, packed, {});
    ASSERT_EQ(y.sizes(), (at::IntArrayRef{M, 1024}));
    ASSERT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_LE(tol::linear_excess_over_bound(y, x, w, {}, true), 0.0) << "M=" << M;
    EXPECT_LE(tol::linear_excess_over_bound(packed_linear(x, packed, b), x, w, b, true), 0.0)
        << "M=" << M << " with bias";
  }
}

TEST(PackedLinear, RejectsWhatItCannotPack) {
  SKIP_WITHOUT_ONEDNN();
  EXPECT_FALSE(packed_linear_wants(at::randn({1024, 1024})));                        // fp32
  EXPECT_FALSE(packed_linear_wants(at::randn({512, 1024}).to(at::kBFloat16)));       // small
  EXPECT_FALSE(packed_linear_wants(at::randn({1024, 2048}).to(at::kBFloat16).t()));  // strided
  EXPECT_TRUE(packed_linear_wants(at::randn({1024, 1024}).to(at::kBFloat16)));
  EXPECT_THROW(pack_linear_weight(at::randn({1024, 1024})), std::exception);
  auto packed = pack_linear_weight(at::randn({1024, 1024}).to(at::kBFloat16));
  EXPECT_FALSE(packed_linear_wants(packed));                                      // packed already
  EXPECT_THROW(packed_linear(at::randn({4, 1024}), packed, {}), std::exception);  // fp32 input
  EXPECT_THROW(packed_linear(at::randn({4, 512}).to(at::kBFloat16), packed, {}), std::exception);
}

// A packed copy answers for the tensor it was packed from while that tensor keeps its storage;
// a tensor given new storage, another tensor, or a cleared table gets none.
TEST(PackedWeights, AnswerOnlyForTheTensorAndStorageTheyPacked) {
  SKIP_WITHOUT_ONEDNN();
  c10::InferenceMode guard;
  PackedWeights table;
  auto w = at::randn({1024, 1024}).to(at::kBFloat16);
  auto small = at::randn({64, 64}).to(at::kBFloat16);
  table.pack(w);
  table.pack(small);  // not wanted: not kept
  EXPECT_EQ(table.count(), 1);
  EXPECT_EQ(table.bytes(), 1024 * 1024 * 2);
  ASSERT_NE(table.find(w), nullptr);
  EXPECT_EQ(table.find(small), nullptr);
  EXPECT_EQ(table.find(w.clone()), nullptr);  // same values, another tensor
  auto alias = w;                             // the same tensor: the same copy
  EXPECT_EQ(table.find(alias), table.find(w));

  w.copy_(at::randn({1024, 1024}));  // written in place: only a new pack makes it current
  table.pack(w);
  auto x = at::randn({16, 1024}).to(at::kBFloat16);
  EXPECT_LE(tol::linear_excess_over_bound(packed_linear(x, *table.find(w), {}), x, w, {}, true),
            0.0);
  EXPECT_EQ(table.count(), 1);

  w.set_(at::randn({1024, 1024}).to(at::kBFloat16));  // new storage: stale
  EXPECT_EQ(table.find(w), nullptr);
  table.pack(w);
  EXPECT_NE(table.find(w), nullptr);
  table.clear();
  EXPECT_EQ(table.find(w), nullptr);
  EXPECT_EQ(table.count(), 0);
}

// inference_linear with a table sends a packed weight's rows to packed_linear exactly where it
// would call at::linear (bf16 rows no kernel of skinny_linear.h takes), and otherwise gives
// inference_linear's own result bit for bit.
TEST(PackedWeights, TakeOnlyTheRowsLeftToAtLinear) {
  SKIP_WITHOUT_ONEDNN();
  c10::InferenceMode guard;
  at::manual_seed(3);
  auto w = at::randn({2048, 1024}).to(at::kBFloat16);
  PackedWeights table;
  table.pack(w);
  for (int64_t M : {1, 4, 8, 16, 17, 64}) {
    auto x = at::randn({M, 1024}).to(at::kBFloat16);
    const bool other_kernel =
        inference_linear_takes_bf16_dot(M, x, w) || inference_linear_takes_avx512(M, x, w) ||
        inference_linear_takes_avx2(M, x, w) || inference_linear_takes_skinny(M, x, w);
    auto expected =
        other_kernel ? inference_linear(x, w, {}) : packed_linear(x, *table.find(w), {});
    EXPECT_TRUE(at::equal(inference_linear(x, w, {}, &table), expected)) << "M=" << M;
    EXPECT_TRUE(at::equal(inference_linear(x, w, {}, nullptr), inference_linear(x, w, {})));
  }
  auto x32 = at::randn({64, 1024});  // fp32 inputs never take a bf16 packed weight
  EXPECT_TRUE(at::equal(inference_linear(x32, w.to(at::kFloat), {}, &table),
                        inference_linear(x32, w.to(at::kFloat), {})));
}

// Where the engine packs by default (bf16 on AMX), the packed GEMM is oneDNN's same kernel as
// at::linear's: the same bits at decode row counts.
TEST(PackedWeights, EqualAtLinearOnAmx) {
  SKIP_WITHOUT_ONEDNN();
  if (!packed_linear_pays_off(at::kBFloat16, c10::Device(c10::kCPU))) {
    GTEST_SKIP() << "no AMX here: the engine packs only when asked (--prepack-weights on)";
  }
  c10::InferenceMode guard;
  at::manual_seed(4);
  auto w = at::randn({3072, 1024}).to(at::kBFloat16);
  auto packed = pack_linear_weight(w);
  for (int64_t M : {8, 32, 64, 200}) {
    auto x = at::randn({M, 1024}).to(at::kBFloat16);
    EXPECT_TRUE(at::equal(packed_linear(x, packed, {}), at::linear(x, w))) << "M=" << M;
  }
}

// Qwen3-0.6B's dense weights per pass (out of cache): packed against at::linear, 2+ threads.
TEST(PackedLinear, DISABLED_ReportThroughput) {
  SKIP_WITHOUT_ONEDNN();
  c10::InferenceMode guard;
  std::vector<at::Tensor> ws, packed;
  for (int layer = 0; layer < 28; ++layer) {
    for (auto [F, D] : std::vector<std::pair<int64_t, int64_t>>{{2048, 1024},
                                                                {1024, 1024},
                                                                {1024, 1024},
                                                                {1024, 2048},
                                                                {3072, 1024},
                                                                {3072, 1024},
                                                                {1024, 3072}}) {
      ws.push_back(at::randn({F, D}).to(at::kBFloat16));
      packed.push_back(pack_linear_weight(ws.back()));
    }
  }
  for (int64_t M : {8, 16, 32, 64, 128}) {
    std::vector<at::Tensor> xs;
    for (int64_t D : {1024, 2048, 3072}) xs.push_back(at::randn({M, D}).to(at::kBFloat16));
    auto x_for = [&](const at::Tensor& w) { return xs[static_cast<size_t>(w.size(1) / 1024 - 1)]; };
    std::vector<double> plain_ms, packed_ms;
    for (int rep = 0; rep < 3; ++rep) {  // alternating, best of 3
      auto t0 = std::chrono::steady_clock::now();
      for (const auto& w : ws) at::linear(x_for(w), w);
      auto t1 = std::chrono::steady_clock::now();
      for (const auto& p : packed) packed_linear(x_for(p), p, {});
      auto t2 = std::chrono::steady_clock::now();
      plain_ms.push_back(1e3 * std::chrono::duration<double>(t1 - t0).count());
      packed_ms.push_back(1e3 * std::chrono::duration<double>(t2 - t1).count());
    }
    const double plain = *std::min_element(plain_ms.begin(), plain_ms.end());
    const double pk = *std::min_element(packed_ms.begin(), packed_ms.end());
    std::printf(
        "bf16 Qwen3-0.6B dense weights, M=%3ld: at::linear %.1f ms, packed %.1f ms (%.2fx)\n", M,
        plain, pk, plain / pk);
  }
}

}  // namespace
}  // namespace furlong::kernels
