// kernels/argmax against at::argmax: the same index on every row, exactly (an argmax has no
// rounding): random rows of every length around the vector width, ties, signed zeros, all -inf,
// infinities and NaNs at the first, a middle and the last position, in fp32 and bf16.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "kernels/argmax.h"

namespace furlong::kernels {
namespace {

void expect_as_aten(const at::Tensor& row, const std::string& what) {
  ASSERT_TRUE(argmax_row_supported(row)) << what;
  EXPECT_EQ(argmax_row(row), row.argmax().item<int64_t>()) << what << " V=" << row.numel();
}

TEST(ArgmaxRow, EqualsAtenOnRandomRowsOfEveryLength) {
  at::manual_seed(11);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t V : {1, 2, 15, 16, 17, 31, 32, 33, 47, 100, 1000, 151936}) {
      for (int rep = 0; rep < 4; ++rep) expect_as_aten(at::randn({V}).to(dtype), "random");
    }
  }
}

TEST(ArgmaxRow, TiesGoToTheFirstPositionAsInAten) {
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t V : {5, 16, 37, 4099}) {
      for (int64_t first : {int64_t{0}, V / 3, V - 2}) {
        auto row = at::zeros({V}, dtype).fill_(-3.0);
        row[first] = 2.5;
        row[V - 1] = 2.5;  // a later copy of the maximum
        expect_as_aten(row, "tie");
        row.fill_(0.0);
        row[first] = -0.0;  // -0.0 == +0.0: the first element wins
        expect_as_aten(row, "signed zeros");
      }
      expect_as_aten(at::full({V}, -std::numeric_limits<float>::infinity(), dtype), "all -inf");
    }
  }
}

TEST(ArgmaxRow, InfinityAndNanFollowAten) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  at::manual_seed(12);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t V : {3, 16, 40, 151936}) {
      for (int64_t at_pos : {int64_t{0}, V / 2, V - 1}) {
        auto row = at::randn({V}).to(dtype);
        row[at_pos] = inf;
        expect_as_aten(row, "+inf");
        row[V - 1 - at_pos] = nan;  // NaN outranks +inf in at::argmax
        expect_as_aten(row, "NaN and +inf");
        row[at_pos] = nan;
        expect_as_aten(row, "two NaNs");
      }
    }
  }
}

TEST(ArgmaxRow, RejectsWhatItDoesNotCompute) {
  EXPECT_FALSE(argmax_row_supported(at::randn({4, 8})));
  EXPECT_FALSE(argmax_row_supported(at::randn({8}).to(at::kDouble)));
  EXPECT_FALSE(argmax_row_supported(at::randn({16}).slice(0, 0, 16, 2)));
  EXPECT_FALSE(argmax_row_supported(at::randn({0})));
  EXPECT_THROW(argmax_row(at::randn({3, 3})), std::exception);
}

// Not a timed assertion: microseconds per Qwen3-vocabulary row against at::argmax.
TEST(ArgmaxRow, DISABLED_ReportThroughput) {
  c10::InferenceMode guard;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    auto rows = at::randn({64, 151936}).to(dtype);
    auto time_us = [&](auto&& fn) {
      for (int64_t r = 0; r < 4; ++r) fn(rows[r]);
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t r = 0; r < 64; ++r) fn(rows[r]);
      return 1e6 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
             64.0;
    };
    const double ours = time_us([](const at::Tensor& r) { return argmax_row(r); });
    const double aten = time_us([](const at::Tensor& r) { return r.argmax().item<int64_t>(); });
    std::printf("%s [151936]: argmax_row %.1f us, at::argmax %.1f us\n",
                dtype == at::kFloat ? "fp32" : "bf16", ours, aten);
  }
}

}  // namespace
}  // namespace furlong::kernels
