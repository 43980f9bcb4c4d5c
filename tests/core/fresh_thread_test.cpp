// core/fresh_thread.h: the work runs on another thread, which has exited when the call
// returns; results and exceptions come back to the caller.
#include "core/fresh_thread.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

namespace furlong {
namespace {

TEST(FreshThread, RunsOnAnotherThreadAndReturnsItsResult) {
  const auto caller = std::this_thread::get_id();
  std::thread::id worker;
  auto value = run_on_fresh_thread([&] {
    worker = std::this_thread::get_id();
    return std::make_unique<std::string>("loaded");  // move-only results work
  });
  EXPECT_NE(worker, caller);
  ASSERT_TRUE(value);
  EXPECT_EQ(*value, "loaded");
  int calls = 0;
  run_on_fresh_thread([&] { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(FreshThread, RethrowsWhatTheWorkThrew) {
  EXPECT_THROW(run_on_fresh_thread([]() -> int { throw std::runtime_error("bad checkpoint"); }),
               std::runtime_error);
  try {
    run_on_fresh_thread([] { throw std::invalid_argument("field 'x'"); });
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "field 'x'");
  }
}

}  // namespace
}  // namespace furlong
