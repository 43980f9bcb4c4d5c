// The built-in graders read the response without the tokenizer's special tokens, whatever
// --rollout-skip-special-tokens left in sample.response (miles' default keeps them): an
// exact_match run on "19<|im_end|>" scores 1, not 0. Remote and registered graders get the
// response unchanged.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/test_util.h"
#include "reward/rewards.h"
#include "reward/text_util.h"
#include "tokenizer/tokenizer.h"

namespace furlong::reward {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

rl::Sample answered(const std::string& response, const std::string& label) {
  rl::Sample s;
  s.response = response;
  s.label = label;
  return s;
}

const tokenizer::Tokenizer& qwen3() {
  static const auto tok =
      tokenizer::Tokenizer::from_directory(furlong::testing::tokenizer_dir("qwen3"));
  return tok;
}

TEST(RemoveStrings, RemovesEveryOccurrenceLongestFirst) {
  EXPECT_EQ(remove_strings("a<|x|>b<|x|>", {"<|x|>"}), "ab");
  EXPECT_EQ(remove_strings("<|end|>", {"<|e", "<|end|>"}), "");
  EXPECT_EQ(remove_strings("<|e|>", {"<|e", "<|end|>"}), "|>");
  EXPECT_EQ(remove_strings("plain", {}), "plain");
  EXPECT_EQ(remove_strings("plain", {""}), "plain");
}

TEST(SpecialTokenStrings, AreTheTokensThatSkipSpecialTokensDrops) {
  const auto specials = special_token_strings(qwen3());
  EXPECT_TRUE(contains(specials, "<|im_end|>"));
  EXPECT_TRUE(contains(specials, "<|endoftext|>"));
  EXPECT_TRUE(contains(specials, "<|im_start|>"));
  // Qwen3's <think> and <tool_call> are added tokens but not special: decode keeps them.
  EXPECT_FALSE(contains(specials, "<think>"));
  EXPECT_FALSE(contains(specials, "<tool_call>"));
  for (const auto& s : specials) {
    const auto ids = qwen3().encode(s);
    ASSERT_EQ(ids.size(), 1u) << s;
    EXPECT_EQ(qwen3().decode(ids, /*skip_special_tokens=*/true), "") << s;
  }
}

TEST(GradedText, BuiltinTypesGradeWithoutSpecialTokens) {
  // The engine's output for "19" then eos, decoded as --rollout-skip-special-tokens=false does.
  const auto ids = qwen3().encode("19<|im_end|>");
  const std::string response = qwen3().decode(ids, /*skip_special_tokens=*/false);
  ASSERT_EQ(response, "19<|im_end|>");

  RewardOptions o;
  o.rm_type = RewardType{RewardKind::kExactMatch};
  o.special_tokens = special_token_strings(qwen3());
  std::vector<rl::Sample> samples = {answered(response, "19"), answered(response, "19")};
  samples[1].metadata["rm_type"] = "final_number";
  RewardGrader(o).compute_rewards(samples);
  EXPECT_EQ(samples[0].raw_reward, 1.0);
  EXPECT_EQ(samples[1].raw_reward, 1.0);
  EXPECT_EQ(samples[0].response, "19<|im_end|>");  // the sample keeps its text

  // Without the tokenizer's special tokens the same response misses: what a run got before.
  RewardOptions bare = o;
  bare.special_tokens.clear();
  std::vector<rl::Sample> again = {answered(response, "19")};
  RewardGrader(bare).compute_rewards(again);
  EXPECT_EQ(again[0].raw_reward, 0.0);
}

TEST(GradedText, EveryBuiltinTypeAndItsBoxedFormSeeTheStrippedText) {
  RewardOptions o;
  o.special_tokens = {"<|im_end|>"};
  const RewardGrader grader(o);
  const rl::Sample s = answered("\\boxed{4}<|im_end|>", "4");
  for (const std::string type :
       {"math", "deepscaler", "dapo", "f1", "exact_match", "final_number", "boxed_f1"}) {
    EXPECT_TRUE(is_builtin_reward_type(type)) << type;
    EXPECT_EQ(grader.graded_text(s, parse_reward_type(type, "t")), "\\boxed{4}") << type;
  }
}

TEST(GradedText, RemoteAndRegisteredTypesGetTheResponseUnchanged) {
  if (!contains(known_reward_types(), "special_tokens_test_echo")) {
    register_reward_type("special_tokens_test_echo",
                         [](std::string_view r, std::string_view, const Json&) {
                           return Json(r == "4<|im_end|>" ? 1.0 : 0.0);
                         });
  }
  RewardOptions o;
  o.rm_type = parse_reward_type("special_tokens_test_echo", "--rm-type");
  o.special_tokens = {"<|im_end|>"};
  const RewardGrader grader(o);
  const rl::Sample s = answered("4<|im_end|>", "4");
  EXPECT_FALSE(is_builtin_reward_type("special_tokens_test_echo"));
  EXPECT_FALSE(is_builtin_reward_type("remote_rm"));
  EXPECT_EQ(grader.graded_text(s, RewardType{RewardKind::kRemote}), "4<|im_end|>");
  EXPECT_EQ(grader.score(s), 1.0);
}

}  // namespace
}  // namespace furlong::reward
