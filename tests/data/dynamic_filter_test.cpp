// Dynamic sampling: the built-in filters, the drop-reason metric names, and the collection-step
// bookkeeping (keep until rollout_batch_size groups, count drops, surplus after the target).
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "data/dynamic_filter.h"

namespace furlong::data {
namespace {

using furlong::testing::error_of;

SampleGroup group_with(std::vector<double> rewards, int64_t first_index = 0) {
  SampleGroup g(rewards.size());
  for (size_t i = 0; i < rewards.size(); ++i) {
    g[i].index = first_index + int64_t(i);
    g[i].group_index = first_index;
    g[i].raw_reward = rewards[i];
  }
  return g;
}

TEST(DynamicFilter, NonzeroStdKeepsMixedGroups) {
  EXPECT_TRUE(check_reward_nonzero_std(group_with({1, 0, 0, 1})).keep);
  auto all_one = check_reward_nonzero_std(group_with({1, 1, 1, 1}));
  EXPECT_FALSE(all_one.keep);
  EXPECT_EQ(all_one.reason, "zero_std_1.0");
  EXPECT_EQ(check_reward_nonzero_std(group_with({0, 0})).reason, "zero_std_0.0");
  EXPECT_EQ(check_reward_nonzero_std(group_with({-1, -1})).reason, "zero_std_-1.0");
  // Rewards that differ by less than the 1e-8 threshold count as equal.
  EXPECT_FALSE(check_reward_nonzero_std(group_with({0.5, 0.5 + 1e-9})).keep);
  EXPECT_TRUE(check_reward_nonzero_std(group_with({0.5, 0.5 + 1e-6})).keep);
  // torch.std of one element is NaN, and NaN > 1e-8 is false: dropped.
  EXPECT_TRUE(std::isnan(group_reward_std(group_with({1}))));
  EXPECT_FALSE(check_reward_nonzero_std(group_with({1})).keep);
  EXPECT_NEAR(group_reward_std(group_with({1, 0, 0, 1})), std::sqrt(1.0 / 3.0), 1e-15);
}

TEST(DynamicFilter, ReasonRoundsLikePython) {
  // Python: f"zero_std_{round(r, 1)}"
  EXPECT_EQ(zero_std_reason(0.25), "zero_std_0.2");  // ties to even on the exact binary value
  EXPECT_EQ(zero_std_reason(0.35), "zero_std_0.3");  // 0.35 is slightly below 0.35
  EXPECT_EQ(zero_std_reason(-0.04), "zero_std_-0.0");
  EXPECT_EQ(zero_std_reason(2.0), "zero_std_2.0");
  EXPECT_EQ(zero_std_reason(1e17), "zero_std_1e+17");
  EXPECT_EQ(drop_metric_name("zero_std_0.0"), "rollout/dynamic_filter/drop_zero_std_0.0");
}

TEST(DynamicFilter, NoAbortedAndLookupByPath) {
  auto g = group_with({1, 0});
  EXPECT_TRUE(check_no_aborted(g).keep);
  g[1].status = rl::SampleStatus::kAborted;
  EXPECT_EQ(check_no_aborted(g).reason, "group_has_aborted");
  EXPECT_FALSE(static_cast<bool>(dynamic_filter_from_path("")));
  auto f = dynamic_filter_from_path(
      "miles.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std");
  EXPECT_FALSE(f(group_with({1, 1})).keep);
  EXPECT_TRUE(dynamic_filter_from_path("check_no_aborted")(group_with({1, 1})).keep);
  EXPECT_NE(error_of([] { dynamic_filter_from_path("my.module.fn"); }).find("check_no_aborted"),
            std::string::npos);
}

TEST(GroupCollector, KeepsUntilTargetAndCountsDrops) {
  GroupCollector c(/*target=*/2, /*n=*/2, check_reward_nonzero_std);
  EXPECT_TRUE(c.may_submit(0));
  EXPECT_FALSE(c.may_submit(2));
  EXPECT_EQ(c.offer(group_with({1, 1}, 10)), GroupCollector::Outcome::kDropped);
  EXPECT_EQ(c.offer(group_with({1, 0}, 8)), GroupCollector::Outcome::kKept);
  EXPECT_EQ(c.offer(group_with({0, 0}, 2)), GroupCollector::Outcome::kDropped);
  EXPECT_EQ(c.offer(group_with({0, 0}, 4)), GroupCollector::Outcome::kDropped);
  EXPECT_FALSE(c.done());
  EXPECT_EQ(c.groups_still_needed(), 1);
  EXPECT_EQ(c.offer(group_with({0, 1}, 6)), GroupCollector::Outcome::kKept);
  EXPECT_TRUE(c.done());
  EXPECT_FALSE(c.may_submit(0));
  // A passing group that finishes after the target is surplus; a failing one is still counted.
  EXPECT_EQ(c.offer(group_with({0, 1}, 0)), GroupCollector::Outcome::kSurplus);
  EXPECT_EQ(c.offer(group_with({1, 1}, 12)), GroupCollector::Outcome::kDropped);
  EXPECT_EQ(c.num_dropped(), 4);
  EXPECT_EQ(c.num_offered(), 7);
  auto metrics = c.metrics();
  EXPECT_EQ(metrics.at("rollout/dynamic_filter/drop_zero_std_1.0"), 2.0);
  EXPECT_EQ(metrics.at("rollout/dynamic_filter/drop_zero_std_0.0"), 2.0);
  auto kept = c.take_kept();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0][0].index, 6);  // sorted by the first sample's index
  EXPECT_EQ(kept[1][0].index, 8);
  EXPECT_NE(error_of([&] {
              c.offer(group_with({1, 0, 1}));
            }).find("expected --n-samples-per-prompt"),
            std::string::npos);
}

TEST(GroupCollector, WithoutFilterKeepsEverythingIncludingTruncated) {
  GroupCollector c(3, 1, {});
  auto g = group_with({0.0});
  g[0].status = rl::SampleStatus::kTruncated;
  EXPECT_EQ(c.offer(g), GroupCollector::Outcome::kKept);
  EXPECT_EQ(c.take_kept()[0][0].status, rl::SampleStatus::kTruncated);
  EXPECT_TRUE(c.metrics().empty());
}

TEST(OverSampling, DefaultsAndValidation) {
  EXPECT_EQ(resolve_over_sampling_batch_size(32, std::nullopt), 32);
  EXPECT_EQ(resolve_over_sampling_batch_size(32, 64), 64);
  EXPECT_NE(error_of([] { resolve_over_sampling_batch_size(32, 16); }).find("must be >="),
            std::string::npos);
}

TEST(RolloutBuffer, FifoWithStartRolloutId) {
  RolloutBuffer buffer(2);
  std::vector<SampleGroup> groups = {group_with({0, 0}, 0), group_with({0, 0}, 2)};
  groups[1][0].metadata["start_rollout_id"] = 1;
  buffer.add(groups, 5);
  buffer.add({group_with({0, 0}, 4)}, 6);
  EXPECT_EQ(buffer.size(), 3);
  auto popped = buffer.pop(2);
  ASSERT_EQ(popped.size(), 2u);
  EXPECT_EQ(popped[0][0].index, 0);
  EXPECT_EQ(popped[0][1].metadata["start_rollout_id"], 5);
  EXPECT_EQ(popped[1][0].metadata["start_rollout_id"], 1);  // kept
  EXPECT_EQ(buffer.pop(5).size(), 1u);
  EXPECT_NE(error_of([&] { buffer.add({group_with({0})}, 1); }).find("only groups of"),
            std::string::npos);
}

TEST(RolloutBuffer, RestoreReplacesTheContentsInOrder) {
  RolloutBuffer buffer(2);
  buffer.add({group_with({0, 0}, 0)}, 1);
  buffer.restore({group_with({0, 0}, 6), group_with({0, 0}, 8)});
  ASSERT_EQ(buffer.size(), 2);
  EXPECT_EQ(buffer.groups().front()[0].index, 6);
  EXPECT_EQ(buffer.pop(1)[0][1].index, 7);
  EXPECT_NE(error_of([&] { buffer.restore({group_with({0})}); }).find("--n-samples-per-prompt 2"),
            std::string::npos);
}

}  // namespace
}  // namespace furlong::data
