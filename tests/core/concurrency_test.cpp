// The concurrency toolkit (core/concurrency.h): what each piece promises, from several threads.
#include "core/concurrency.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>

namespace furlong {
namespace {

using namespace std::chrono_literals;

TEST(WorkerPool, RunsEveryPostedTaskAndTheDestructorDrainsTheQueue) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(3);
    for (int i = 0; i < 200; ++i) pool.post([&] { ++ran; });
  }  // joins only after the queue is empty
  EXPECT_EQ(ran.load(), 200);
}

TEST(WorkerPool, TasksRunOnSeveralThreadsAtOnce) {
  // Two tasks that each wait (bounded) for the other to start can only both finish when two
  // threads run them at the same time.
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  std::mutex mu;
  std::set<std::thread::id> threads;
  {
    WorkerPool pool(2);
    for (int i = 0; i < 2; ++i) {
      pool.post([&] {
        {
          std::lock_guard<std::mutex> lock(mu);
          threads.insert(std::this_thread::get_id());
        }
        ++started;
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(1ms);
        }
        if (started.load() == 2) ++met;
      });
    }
  }
  EXPECT_EQ(met.load(), 2);
  EXPECT_EQ(threads.size(), 2u);
}

TEST(WorkerPool, OneThreadRunsTasksInTheOrderPosted) {
  std::vector<int> order;
  {
    WorkerPool pool(1);
    for (int i = 0; i < 50; ++i) pool.post([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(Gather, TakeAllWaitsForTheLastResultAndKeepsIndexOrder) {
  Gather<int> results(64);
  std::vector<std::thread> threads;
  std::atomic<bool> last_put{false};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 63 - t; i >= 0; i -= 4) {  // out of order, interleaved over threads
        if (i == 0) {
          std::this_thread::sleep_for(50ms);
          last_put = true;
        }
        results.put(static_cast<size_t>(i), i * 10);
      }
    });
  }
  auto all = results.take_all();
  EXPECT_TRUE(last_put.load());  // take_all returned only after result 0 was put
  for (auto& t : threads) t.join();
  ASSERT_EQ(all.size(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(all[i], i * 10);
}

TEST(Gather, PutReportsTheCountAndRefusesTheSameIndexTwice) {
  Gather<std::string> results(2);
  EXPECT_EQ(results.put(1, "b"), 1u);
  EXPECT_THROW(results.put(1, "again"), std::logic_error);
  EXPECT_THROW(results.put(2, "out of range"), std::logic_error);
  EXPECT_EQ(results.put(0, "a"), 2u);
  EXPECT_EQ(results.take_all(), (std::vector<std::string>{"a", "b"}));
}

TEST(Gather, NothingToWaitForReturnsAtOnce) {
  Gather<int> none(0);
  EXPECT_TRUE(none.take_all().empty());
}

TEST(FirstError, KeepsTheFirstMessageFromAnyThread) {
  FirstError error;
  EXPECT_TRUE(error.empty());
  error.record("first");
  std::thread other([&] { error.record("second"); });
  other.join();
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.message(), "first");
  FirstError blank;
  blank.record("");
  EXPECT_EQ(blank.message(), "unknown error");  // a failure without a message still counts
}

}  // namespace
}  // namespace furlong
