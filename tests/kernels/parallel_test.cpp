// kernels::parallel_for (src/kernels/parallel.h): the split of at::parallel_for, on several
// threads even when called from a file built without -fopenmp, as this one is.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/parallel.h"

namespace furlong::kernels {
namespace {

TEST(ParallelFor, CoversTheRangeOnceOnSeveralThreads) {
  if (at::get_num_threads() < 2) GTEST_SKIP() << "one intra-op thread";
  std::vector<std::atomic<int>> hits(64);
  std::mutex mu;
  std::set<std::thread::id> threads;
  parallel_for(0, 64, 1, [&](int64_t b0, int64_t b1) {
    {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    }
    for (int64_t i = b0; i < b1; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << "item " << i;
  EXPECT_EQ(static_cast<int>(threads.size()), at::get_num_threads());
}

TEST(ParallelFor, RunsASmallRangeOnTheCallerAndPassesExceptionsOn) {
  std::set<std::thread::id> threads;
  parallel_for(0, 4, 8, [&](int64_t, int64_t) { threads.insert(std::this_thread::get_id()); });
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_THROW(parallel_for(0, 64, 1,
                            [](int64_t b0, int64_t) {
                              if (b0 == 0) throw std::runtime_error("first chunk");
                            }),
               std::exception);
}

}  // namespace
}  // namespace furlong::kernels
