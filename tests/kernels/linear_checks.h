// Checks and probes shared by the decode-GEMM tests (avx512_linear_test, avx2_linear_test).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <vector>

namespace furlong::kernels::testing {

using LinearKernel = std::function<at::Tensor(const at::Tensor& x_MD, const at::Tensor& w_FD)>;

// A row's output is the same bits whatever the other rows of the batch and the thread count:
// x [37, 333] against w [515, 333] batched, on one thread, and rows alone or in pairs.
inline void expect_rows_independent_of_batch_and_threads(const LinearKernel& linear,
                                                         at::ScalarType x_dtype,
                                                         at::ScalarType w_dtype) {
  const int threads = at::get_num_threads();
  auto w = at::randn({515, 333}).to(w_dtype);
  auto x = at::randn({37, 333}).to(x_dtype);
  auto batched = linear(x, w);
  at::set_num_threads(1);
  auto one_thread = linear(x, w);
  at::set_num_threads(threads);
  EXPECT_TRUE(at::equal(batched, one_thread)) << x_dtype << " x " << w_dtype;
  for (int64_t m : {0, 3, 4, 17, 36}) {
    auto alone = linear(x.narrow(0, m, 1), w);
    EXPECT_TRUE(at::equal(alone, batched.narrow(0, m, 1))) << x_dtype << " row " << m;
    auto in_two = linear(x.narrow(0, m == 36 ? 35 : m, 2), w);
    EXPECT_TRUE(at::equal(in_two.narrow(0, m == 36 ? 1 : 0, 1), batched.narrow(0, m, 1)));
  }
}

// Wall-clock ms per call of fn over the weight set ws (2 warm-up calls, then 3 passes), for the
// DISABLED_ReportThroughput probes; run them on an idle machine.
inline double ms_per_call(const std::vector<at::Tensor>& ws,
                          const std::function<void(const at::Tensor&)>& fn) {
  for (size_t i = 0; i < 2; ++i) fn(ws[i % ws.size()]);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 3; ++r)
    for (const auto& w : ws) fn(w);
  return 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
         (3.0 * static_cast<double>(ws.size()));
}

}  // namespace furlong::kernels::testing
