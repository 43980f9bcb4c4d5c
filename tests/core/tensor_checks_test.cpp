// core/tensor_checks.h: all_finite agrees with at::isfinite(t).all() for one NaN, inf or -inf
// at the first, a middle or the last element (the tail past a whole vector included), in every
// floating dtype, and lets the largest finite values, empty and integer tensors pass.
#include "core/tensor_checks.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace furlong {
namespace {

TEST(AllFinite, OneNonFiniteElementAnywhereIsFoundInEveryFloatingDtype) {
  const double specials[] = {std::nan(""), INFINITY, -INFINITY};
  for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf}) {
    for (int64_t n : {1, 7, 16, 17, 100003}) {
      const auto clean = at::randn({n}, at::TensorOptions().dtype(dtype));
      ASSERT_TRUE(all_finite(clean)) << dtype << " n=" << n;
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        for (double v : specials) {
          auto bad = clean.clone();
          bad[at] = v;
          ASSERT_EQ(all_finite(bad), at::isfinite(bad).all().item<bool>());
          EXPECT_FALSE(all_finite(bad)) << dtype << " n=" << n << " at " << at << " value " << v;
          // The same elements through a strided 2-D view of all but the last one.
          if (n % 2 == 1 && n > 1) {
            const auto view = bad.narrow(0, 0, n - 1).view({2, -1}).t();
            EXPECT_EQ(all_finite(view), at == n - 1) << dtype << " n=" << n << " at " << at;
          }
        }
      }
    }
  }
}

TEST(AllFinite, TheLargestFiniteValuesEmptyAndIntegerTensorsPass) {
  const float big = std::numeric_limits<float>::max();
  EXPECT_TRUE(all_finite(at::tensor({big, -big, 0.0f, -0.0f})));
  EXPECT_TRUE(all_finite(at::tensor({std::numeric_limits<float>::denorm_min()})));
  EXPECT_TRUE(all_finite(at::empty({0, 3})));
  EXPECT_TRUE(all_finite(at::arange(10)));
}

}  // namespace
}  // namespace furlong
