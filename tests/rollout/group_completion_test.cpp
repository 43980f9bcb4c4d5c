// GroupCompletion (rollout/group_completion.h): groups are handed out once all their samples are
// back, in completion order or in group order, and the driver stops once nothing is in flight.
#include "rollout/group_completion.h"

#include <gtest/gtest.h>

#include <thread>

namespace furlong::rollout {
namespace {

TEST(GroupCompletion, CompletionOrderHandsOutEachGroupWhenItsLastSampleIsBack) {
  GroupCompletion c({2, 1, 2}, /*in_group_order=*/false);
  for (int i = 0; i < 5; ++i) c.expect_request();
  c.request_done(1, [] {});  // group 1 complete first
  c.request_done(2, [] {});
  c.request_done(0, [] {});
  c.request_done(2, [] {});  // group 2 complete second
  EXPECT_EQ(c.next(), 1u);
  EXPECT_EQ(c.next(), 2u);
  c.request_done(0, [] {});
  EXPECT_EQ(c.next(), 0u);
  EXPECT_EQ(c.next(), std::nullopt);  // nothing in flight, nothing ready
}

TEST(GroupCompletion, GroupOrderWaitsForTheEarlierGroups) {
  GroupCompletion c({1, 1}, /*in_group_order=*/true);
  c.expect_request();
  c.expect_request();
  c.request_done(1, [] {});  // group 1 is done, but group 0 comes first
  std::optional<size_t> first;
  std::thread driver([&] { first = c.next(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c.request_done(0, [] {});
  driver.join();
  EXPECT_EQ(first, 0u);
  EXPECT_EQ(c.next(), 1u);
  EXPECT_EQ(c.next(), std::nullopt);
}

TEST(GroupCompletion, SkippedSamplesCountAsDoneAndRecordsRunOneAtATime) {
  GroupCompletion c({3, 0}, /*in_group_order=*/false);  // an empty group is never complete
  c.skip_sample(0);
  int inside = 0, most_inside = 0, records = 0;
  std::vector<std::thread> engines;
  for (int e = 0; e < 2; ++e) {
    c.expect_request();
    engines.emplace_back([&] {
      c.request_done(0, [&] {
        most_inside = std::max(most_inside, ++inside);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        --inside;
        ++records;
      });
    });
  }
  for (auto& t : engines) t.join();
  EXPECT_EQ(most_inside, 1);  // the records of two engine threads never overlapped
  EXPECT_EQ(records, 2);
  EXPECT_EQ(c.next(), 0u);
  EXPECT_EQ(c.next(), std::nullopt);
}

}  // namespace
}  // namespace furlong::rollout
