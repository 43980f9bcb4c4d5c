// core/openmp_pool.h: releasing a thread's OpenMP pool ends its worker threads (counted in
// /proc/self/task), and the next parallel region on that thread works and makes them again.
#include "core/openmp_pool.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace furlong {
namespace {

int64_t threads_of_this_process() {
  int64_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// Runs a parallel region that occupies every ATen thread; returns how many distinct
// iterations ran (all of them, whatever the pool).
int64_t run_parallel_region() {
  std::atomic<int64_t> done{0};
  at::parallel_for(0, 64, 1, [&](int64_t b, int64_t e) { done += e - b; });
  return done.load();
}

TEST(OpenmpPool, ReleasingEndsTheWorkersAndTheNextRegionMakesThemAgain) {
  if (at::get_num_threads() < 2) GTEST_SKIP() << "one ATen thread: no OpenMP pool to release";
  const int64_t workers = at::get_num_threads() - 1;
  ASSERT_EQ(run_parallel_region(), 64);
  const int64_t with_pool = threads_of_this_process();
  ASSERT_TRUE(release_openmp_pool_of_this_thread())
      << "the OpenMP runtime ATen loaded lacks omp_pause_resource_all";
  // libgomp's workers leave at the release barrier; give the kernel a moment to reap them.
  int64_t after = threads_of_this_process();
  for (int i = 0; i < 200 && after > with_pool - workers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    after = threads_of_this_process();
  }
  EXPECT_EQ(after, with_pool - workers);
  ASSERT_EQ(run_parallel_region(), 64);
  EXPECT_EQ(threads_of_this_process(), with_pool);
}

TEST(OpenmpPool, InsideAParallelRegionNothingIsReleased) {
  if (at::get_num_threads() < 2) GTEST_SKIP() << "one ATen thread";
  std::atomic<int> released{0};
  at::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    if (release_openmp_pool_of_this_thread()) ++released;
  });
  EXPECT_EQ(released.load(), 0);
  EXPECT_EQ(run_parallel_region(), 64);
}

// Not a timed assertion: the cost of a parallel region on one thread while another thread
// holds a pool, before and after that thread releases it (on a 2-CPU machine: pools beyond
// the CPU count make libgomp's workers sleep in the kernel between regions).
TEST(OpenmpPool, DISABLED_ReportRegionCostWithAndWithoutASecondPool) {
  run_parallel_region();  // this thread's pool: the "trainer's"
  auto time_regions_elsewhere = [] {
    double us = 0;
    std::thread scheduler([&] {
      run_parallel_region();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 2000; ++i) run_parallel_region();
      us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          2000;
    });
    scheduler.join();
    return us;
  };
  const double two_pools = time_regions_elsewhere();
  release_openmp_pool_of_this_thread();
  const double one_pool = time_regions_elsewhere();
  std::printf(
      "parallel region on another thread: %.1f us with this thread's pool alive, "
      "%.1f us after releasing it (%d ATen threads)\n",
      two_pools, one_pool, at::get_num_threads());
}

}  // namespace
}  // namespace furlong
