// --rm-type final_number: the last number of the response (signs, decimals, thousands groups, a
// trailing period, special tokens skipped) compared numerically with a numeric label.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "reward/final_number.h"
#include "reward/rewards.h"

namespace furlong::reward {
namespace {

using furlong::testing::error_of;

TEST(FinalNumber, TakesTheLastNumberOfTheResponse) {
  EXPECT_EQ(final_number_reward("12 + 7 = 19", "19"), 1.0);
  EXPECT_EQ(final_number_reward("12 + 7 = 19", "12"), 0.0);
  EXPECT_EQ(final_number_reward("The answer is 19.", "19"), 1.0);
  EXPECT_EQ(final_number_reward("I think 18... no, 19", "19"), 1.0);
  EXPECT_EQ(final_number_reward("I think 19... no, 18", "19"), 0.0);
  EXPECT_EQ(final_number_reward("19 apples, then 3 more", "19"), 0.0);
}

TEST(FinalNumber, ComparesValuesNotSpellings) {
  EXPECT_EQ(final_number_reward("so 19", "19.0"), 1.0);
  EXPECT_EQ(final_number_reward("so 19.0", "19"), 1.0);
  EXPECT_EQ(final_number_reward("pi is about 3.140", "3.14"), 1.0);
  EXPECT_EQ(final_number_reward("it costs $2.50.", "2.5"), 1.0);
  EXPECT_EQ(final_number_reward("it costs $2.50.", "2.05"), 0.0);
  EXPECT_EQ(final_number_reward("a total of 1,234", "1234"), 1.0);
  EXPECT_EQ(final_number_reward("a total of 1234", "1,234"), 1.0);
  EXPECT_EQ(final_number_reward("about 1,234,567.5 people", "1234567.5"), 1.0);
}

TEST(FinalNumber, ThousandsGroupsNeedThreeDigits) {
  EXPECT_EQ(last_number("1,234"), 1234.0);
  EXPECT_EQ(last_number("12,34"), 34.0);      // not a group: 12 and 34
  EXPECT_EQ(last_number("1,2345"), 2345.0);   // four digits after the comma
  EXPECT_EQ(last_number("1234,567"), 567.0);  // a group needs 1-3 leading digits
  EXPECT_EQ(last_number("1, 2, 3"), 3.0);
}

TEST(FinalNumber, NegativeNumbers) {
  EXPECT_EQ(final_number_reward("-5", "-5"), 1.0);
  EXPECT_EQ(final_number_reward("x = -5.", "-5"), 1.0);
  EXPECT_EQ(final_number_reward("x = -5.", "5"), 0.0);
  EXPECT_EQ(final_number_reward("(-3)", "-3"), 1.0);
  EXPECT_EQ(final_number_reward("x = \xE2\x88\x92"
                                "7",
                                "-7"),
            1.0);  // U+2212 minus sign
  // A minus after a digit or a letter is an operator or a dash, not a sign.
  EXPECT_EQ(last_number("8-3"), 3.0);
  EXPECT_EQ(last_number("COVID-19"), 19.0);
}

TEST(FinalNumber, SkipsSpecialTokens) {
  EXPECT_EQ(final_number_reward("19<|im_end|>", "19"), 1.0);
  EXPECT_EQ(final_number_reward("42<|reserved_special_token_5|>", "42"), 1.0);
  EXPECT_EQ(last_number("<|reserved_special_token_5|>"), std::nullopt);
  // An unclosed "<|" is ordinary text.
  EXPECT_EQ(last_number("1 <| 2"), 2.0);
}

TEST(FinalNumber, NoNumberScoresZero) {
  EXPECT_EQ(final_number_reward("no number", "19"), 0.0);
  EXPECT_EQ(final_number_reward("", "0"), 0.0);
  EXPECT_EQ(last_number("a.b, c"), std::nullopt);
  // Out of double's range: holds no value that could equal a label.
  EXPECT_EQ(final_number_reward(std::string(400, '9'), "1"), 0.0);
}

TEST(FinalNumber, LabelsMustBeOneNumber) {
  EXPECT_EQ(parse_number_label(" 42 "), 42.0);
  EXPECT_EQ(parse_number_label("+42"), 42.0);
  EXPECT_EQ(parse_number_label("-3"), -3.0);
  EXPECT_EQ(parse_number_label("42.0"), 42.0);
  EXPECT_EQ(parse_number_label("1,234"), 1234.0);
  EXPECT_EQ(parse_number_label("1/2"), std::nullopt);
  EXPECT_EQ(parse_number_label("x=3"), std::nullopt);
  EXPECT_EQ(parse_number_label("3 apples"), std::nullopt);
  EXPECT_EQ(parse_number_label(""), std::nullopt);
  const std::string err = error_of([] { final_number_reward("19", "\\frac{1}{2}"); });
  EXPECT_NE(err.find("'\\frac{1}{2}' is not a number"), std::string::npos) << err;
  EXPECT_NE(err.find("--rm-type math"), std::string::npos) << err;
}

TEST(FinalNumber, IsARegisteredBuiltinType) {
  const Json meta = Json::object();
  EXPECT_EQ(builtin_reward("final_number", "so 7.", "7", meta), 1.0);
  // boxed_ grades the last \boxed{} only, so a later number does not count.
  EXPECT_EQ(builtin_reward("boxed_final_number", "\\boxed{19}, not 20", "19", meta), 1.0);
  EXPECT_EQ(builtin_reward("final_number", "\\boxed{19}, not 20", "19", meta), 0.0);
  EXPECT_TRUE(is_builtin_reward_type("final_number"));
}

}  // namespace
}  // namespace furlong::reward
