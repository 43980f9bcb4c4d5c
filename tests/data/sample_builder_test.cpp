// Sample construction from engine outputs: tokens, response length, loss mask, log-probs,
// status from the finish reason, and the token budget rule.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "data/sample_builder.h"

namespace furlong::data {
namespace {

using furlong::testing::error_of;

TEST(SampleBuilder, BuildsFromAResponse) {
  GeneratedResponse out{{5, 6, 7}, {-0.1f, -0.2f, -0.3f}, "stop", "abc"};
  rl::Sample s = make_sample({1, 2}, out, 8);
  EXPECT_EQ(s.tokens, (std::vector<int64_t>{1, 2, 5, 6, 7}));
  EXPECT_EQ(s.response_length, 3);
  EXPECT_EQ(s.prompt_length(), 2);
  EXPECT_EQ(s.loss_mask, (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(s.rollout_log_probs, (std::vector<float>{-0.1f, -0.2f, -0.3f}));
  EXPECT_EQ(s.response, "abc");
  EXPECT_EQ(s.status, rl::SampleStatus::kCompleted);
  EXPECT_NO_THROW(rl::validate_sample(s, "s"));
}

TEST(SampleBuilder, StatusFromFinishReason) {
  EXPECT_EQ(status_from_finish_reason("length"), rl::SampleStatus::kTruncated);
  EXPECT_EQ(status_from_finish_reason("abort"), rl::SampleStatus::kAborted);
  EXPECT_EQ(status_from_finish_reason("stop"), rl::SampleStatus::kCompleted);
  EXPECT_NE(error_of([] { status_from_finish_reason("eos"); }).find("'eos'"), std::string::npos);
}

TEST(SampleBuilder, PartialResumeAppends) {
  rl::Sample s = make_sample({1}, {{2, 3}, {-1.f, -2.f}, "abort", "ab"}, 4);
  EXPECT_EQ(s.status, rl::SampleStatus::kAborted);
  int64_t budget = max_new_tokens_for(int64_t(s.tokens.size()), s.response_length, 4, std::nullopt);
  EXPECT_EQ(budget, 2);
  append_response(s, {{4, 5}, {-3.f, -4.f}, "length", "cd"}, budget);
  EXPECT_EQ(s.tokens, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(s.response_length, 4);
  EXPECT_EQ(s.response, "abcd");
  EXPECT_EQ(s.status, rl::SampleStatus::kTruncated);
  EXPECT_NO_THROW(rl::validate_sample(s, "s"));
}

TEST(SampleBuilder, EveryResponseTokenRecordsItsWeightVersion) {
  GeneratedResponse head{{2, 3}, {-1.f, -2.f}, "abort", "ab", 4};
  rl::Sample s = make_sample({1}, head, 4);
  EXPECT_EQ(s.weight_versions, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(s.oldest_weight_version(-1), 4);
  append_response(s, {{4, 5}, {-3.f, -4.f}, "stop", "cd", 5}, 2);
  EXPECT_EQ(s.weight_versions, (std::vector<int64_t>{4, 4, 5, 5}));
  EXPECT_EQ(s.oldest_weight_version(-1), 4);
  EXPECT_NO_THROW(rl::validate_sample(s, "s"));
  // Tokens appended outside append_response (a loss-mask-0 turn) take the version before them.
  s.tokens.push_back(9);
  s.response_length += 1;
  s.loss_mask.push_back(0.0f);
  s.rollout_log_probs.push_back(0.0f);
  fill_weight_versions(s, 7);
  EXPECT_EQ(s.weight_versions.back(), 5);
  s.weight_versions.push_back(5);
  EXPECT_NE(error_of([&] { rl::validate_sample(s, "s"); }).find("weight_versions has 6"),
            std::string::npos);
  EXPECT_EQ(rl::Sample{}.oldest_weight_version(-1), -1);
}

TEST(SampleBuilder, PartialSampleHelpers) {
  rl::Sample s = make_sample({1, 2}, {{3, 4, 5}, {-1.f, -1.f, -1.f}, "abort", "xyz", 2}, 8);
  EXPECT_TRUE(needs_generation(s));
  mask_offpolicy_prefix(s);
  EXPECT_EQ(s.loss_mask, (std::vector<float>{0, 0, 0}));
  append_response(s, {{6}, {-1.f}, "stop", "w", 3}, 5);
  EXPECT_EQ(s.loss_mask, (std::vector<float>{0, 0, 0, 1}));
  EXPECT_FALSE(needs_generation(s));
  restart_sample(s);
  EXPECT_EQ(s.tokens, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s.response_length, 0);
  EXPECT_TRUE(s.loss_mask.empty() && s.rollout_log_probs.empty() && s.weight_versions.empty());
  EXPECT_EQ(s.response, "");
  EXPECT_EQ(s.status, rl::SampleStatus::kPending);
  EXPECT_NO_THROW(rl::validate_sample(s, "s"));
}

TEST(SampleBuilder, BudgetAndContractChecks) {
  EXPECT_EQ(max_new_tokens_for(10, 0, 100, std::nullopt), 100);
  EXPECT_EQ(max_new_tokens_for(10, 0, 100, 50), 40);
  EXPECT_LE(max_new_tokens_for(60, 0, 100, 50), 0);
  rl::Sample s;
  s.tokens = {1, 2};
  mark_no_budget(s);
  EXPECT_EQ(s.status, rl::SampleStatus::kTruncated);
  EXPECT_NE(error_of([] {
              make_sample({1}, {{2, 3, 4}, {}, "length", ""}, 2);
            }).find("max_new_tokens 2"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              make_sample({1}, {{2, 3}, {-1.f}, "stop", ""}, 5);
            }).find("1 log-probs for 2 tokens"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              make_sample({}, {{2}, {}, "stop", ""}, 5);
            }).find("prompt token"),
            std::string::npos);
}

}  // namespace
}  // namespace furlong::data
