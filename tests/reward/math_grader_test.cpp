// The math graders (--rm-type math / deepscaler): a table of equivalent forms, wrong answers and
// malformed LaTeX, each with the reward miles' grader gives.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "reward/latex_text.h"
#include "reward/math_expr.h"
#include "reward/math_grader.h"
#include "reward/text_rewards.h"

namespace furlong::reward {
namespace {

struct Case {
  const char* response;
  const char* label;
  double expected;
};

// clang-format off
const Case kMathCases[] = {
    // equivalent forms
    {"so \\boxed{5}", "5", 1},
    {"\\boxed{5.0}", "5", 1},
    {"\\boxed{9}", "9.0", 1},
    {"\\boxed{\\frac{1}{2}}", "1/2", 1},
    {"\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 1},
    {"\\boxed{\\tfrac12}", "\\frac{1}{2}", 1},
    {"\\boxed{0.5}", "\\frac{1}{2}", 1},
    {"\\boxed{.5}", "0.5", 1},
    {"\\boxed{1/3}", "\\frac{1}{3}", 1},
    {"\\boxed{\\frac{3}{4}}", "0.75", 1},
    {"\\boxed{1.5}", "\\frac{3}{2}", 1},
    {"\\boxed{\\dfrac{14}{3}}", "\\frac{14}{3}", 1},
    {"\\boxed{\\frac{-1}{2}}", "-\\frac{1}{2}", 1},
    {"\\boxed{7\\frac{3}{4}}", "\\frac{31}{4}", 1},
    {"\\boxed{\\left( 3, 4 \\right)}", "(3,4)", 1},
    {"\\boxed{(1, 2)}", "(1,2)", 1},
    {"\\boxed{[1,2]}", "[1, 2]", 1},
    {"\\boxed{10\\%}", "10", 1},
    {"\\boxed{\\$5}", "5", 1},
    {"\\boxed{1,000}", "1000", 1},
    {"\\boxed{1,000,000}", "1000000", 1},
    {"\\boxed{x = 5}", "5", 1},
    {"\\boxed{\\text{(B)}}", "(B)", 1},
    {"\\boxed{\\text{Monday}}", "Monday", 1},
    {"\\boxed{YES}", "yes", 1},
    {"\\boxed{30^\\circ}", "30", 1},
    {"\\boxed{30^{\\circ}}", "30", 1},
    {"\\boxed{5 \\text{ cm}}", "5", 1},
    {"\\boxed{5 cm}", "5", 1},
    {"\\boxed{12 \\text{ inches}}", "12", 1},
    {"\\boxed{10 \\text{ ways}}", "10", 1},
    {"\\boxed{-3}", "-3", 1},
    {"\\boxed{- 3}", "-3", 1},
    {"\\boxed{3.14}", "3.14", 1},
    {"\\boxed{\\sqrt{2}}", "\\sqrt2", 1},
    {"\\boxed{2\\sqrt{3}}", "\\sqrt{12}", 1},
    {"\\boxed{3\\sqrt{2}}", "\\sqrt{18}", 1},
    {"\\boxed{4\\sqrt{2}}", "\\sqrt{32}", 1},
    {"\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", 1},
    {"\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", 1},
    {"\\boxed{\\frac{1}{\\sqrt{3}}}", "\\frac{\\sqrt{3}}{3}", 1},
    {"\\boxed{\\pi}", "\\pi", 1},
    {"\\boxed{2\\pi}", "2 \\pi", 1},
    {"\\boxed{\\infty}", "\\infty", 1},
    {"\\boxed{x^2+2x+1}", "(x+1)^2", 1},
    {"\\boxed{\\frac{x}{2}}", "x/2", 1},
    {"\\boxed{\\frac{a}{b}}", "a/b", 1},
    {"\\boxed{x+y}", "y+x", 1},
    {"\\boxed{3+2i}", "2i+3", 1},
    {"\\boxed{x^{10}}", "x^10", 1},
    {"\\boxed{\\left[ 0, 1 \\right)}", "[0,1)", 1},
    {"first \\boxed{3} then \\boxed{5}", "5", 1},
    {"\\boxed{5}", "\\boxed{5}", 1},
    {"\\boxed{{{{{{{{{{{{{5}}}}}}}}}}}}}", "5", 1},
    // wrong answers
    {"\\boxed{6}", "5", 0},
    {"\\boxed{5.5}", "5", 0},
    {"\\boxed{\\frac{2}{4}}", "\\frac{1}{2}", 0},
    {"\\boxed{0.333}", "\\frac{1}{3}", 0},
    {"\\boxed{(1,2)}", "(2,1)", 0},
    {"\\boxed{(1,2,3)}", "(1,2)", 0},
    {"\\boxed{2^{10}}", "1024", 0},
    {"\\boxed{a+b+c}", "c+b+a", 0},
    {"\\boxed{50\\%}", "0.5", 0},
    {"\\boxed{x^2}", "x^3", 0},
    {"\\boxed{5} then \\boxed{3}", "5", 0},
    {"\\boxed{-5}", "5", 0},
    // no (valid) box, empty label
    {"The answer is 5", "5", 0},
    {"\\fbox{5}", "5", 0},
    {"\\boxed 5", "5", 0},
    {"\\boxed{5", "5", 0},
    {"\\boxed{}", "5", 0},
    {"\\boxed{5}", "", 0},
    // malformed LaTeX must not crash
    {"\\boxed{\\frac{1}{0}}", "1", 0},
    {"\\boxed{\\sqrt{}}", "2", 0},
    {"\\boxed{\\frac}", "1", 0},
    {"\\boxed{\\sqrt}", "1", 0},
    {"\\boxed{\\frac{1}}", "1", 0},
    {"\\boxed{\\text{ a \\text{ b \\text{ c}}", "1", 0},
    {"\\boxed{\\left(}", "(1)", 0},
    {"\\boxed{^^^///***}", "1", 0},
    {"\\boxed{((((((}", "1", 0},
    {"\\boxed{\\\\\\\\}", "1", 0},
    {"\\boxed{1e999}", "1", 0},
    {"\\boxed{\\sqrt[3]{8}}", "2", 0},
};
// clang-format on

TEST(MathReward, TableOfCases) {
  EXPECT_GE(std::size(kMathCases), 60u);
  for (const Case& c : kMathCases) {
    EXPECT_EQ(math_reward(c.response, c.label), c.expected)
        << "response: " << c.response << "\nlabel: " << c.label;
  }
}

TEST(MathReward, PathologicalInputsTerminate) {
  std::string deep = "\\boxed{";
  for (int i = 0; i < 20000; ++i) deep += "\\frac{";
  deep += "1";
  for (int i = 0; i < 20001; ++i) deep += "}";
  EXPECT_EQ(math_reward(deep, "1"), 0.0);
  std::string parens(50000, '(');
  EXPECT_EQ(math_reward("\\boxed{" + parens + "}", "1"), 0.0);
  std::string long_answer = "\\boxed{" + std::string(100000, '1') + "}";
  EXPECT_EQ(math_reward(long_answer, "1"), 0.0);
}

// Random LaTeX-ish fragments: every grader returns a valid reward and never throws or crashes.
TEST(MathReward, RandomMalformedInputsNeverThrow) {
  static const char* const kPieces[] = {
      "\\boxed{", "\\fbox{", "{",   "}",        "\\frac",  "\\dfrac", "\\sqrt",  "[",
      "]",        "(",       ")",   "^",        "_",       "\\left",  "\\right", "\\text{ ",
      "\\text{",  "\\pi",    "\\%", "$",        "\\$",     "1",       "23",      "0.5",
      "x",        "y",       "=",   ",",        " ",       "-",       "+",       "*",
      "/",        "\\",      "e",   "</think>", "Answer:", "\n",      "and",     "million",
      "cm",       "^\\circ", ".",   "1,000"};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> length(0, 30), pick(0, std::size(kPieces) - 1);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string response, label;
    for (int i = length(rng); i > 0; --i) response += kPieces[pick(rng)];
    for (int i = length(rng) / 6; i > 0; --i) label += kPieces[pick(rng)];
    double m = math_reward(response, label);
    double d = deepscaler_reward(response, label);
    EXPECT_TRUE(m == 0.0 || m == 1.0) << response;
    EXPECT_TRUE(d == 0.0 || d == 1.0) << response;
    EXPECT_NO_THROW(dapo_normalize_answer(response)) << response;
    EXPECT_NO_THROW(sympy_normalize(response)) << response;
    // An answer always grades equal to itself.
    if (auto boxed = last_boxed_content(response)) {
      EXPECT_TRUE(grade_math_answer(*boxed, *boxed) || boxed->empty()) << *boxed;
    }
  }
}

TEST(MathReward, LastBoxedContentMatchesBraces) {
  EXPECT_EQ(last_boxed_content("a \\boxed{\\frac{1}{2}} b").value(), "\\frac{1}{2}");
  EXPECT_EQ(last_boxed_content("\\boxed{1} \\boxed{{2}}").value(), "{2}");
  EXPECT_FALSE(last_boxed_content("\\boxed{1").has_value());
  EXPECT_FALSE(last_boxed_content("no box").has_value());
  EXPECT_FALSE(last_boxed_content("\\boxed 1 {2}").has_value());
}

TEST(MathReward, MathdNormalization) {
  EXPECT_EQ(mathd_normalize(" \\dfrac12 "), "\\frac{1}{2}");
  EXPECT_EQ(mathd_normalize("\\left(1,2\\right)"), "(1,2)");
  EXPECT_EQ(mathd_normalize("k = 7"), "7");
  EXPECT_EQ(mathd_normalize("3/4"), "\\frac{3}{4}");
  EXPECT_EQ(mathd_normalize("5\\%"), "5");
  // Two "\text{ " units: the Python grader's assertion fails and the input comes back as is.
  EXPECT_EQ(mathd_normalize("1 \\text{ a} 2 \\text{ b}"), "1 \\text{ a} 2 \\text{ b}");
}

TEST(MathReward, SympySideNormalization) {
  EXPECT_EQ(sympy_normalize("\\text{5 meters}"), "5");
  EXPECT_EQ(sympy_normalize("3 million"), "3*10^6");
  EXPECT_EQ(sympy_normalize("1,234,567"), "1234567");
  EXPECT_EQ(sympy_normalize("\\frac{1}{2}"), "1/2");
  EXPECT_EQ(sympy_normalize("7 \\frac{3}{4}"), "7+3/4");
  EXPECT_EQ(sympy_normalize("12.0"), "12");
}

TEST(MathReward, DeepscalerGradesAfterThinking) {
  EXPECT_EQ(deepscaler_reward("try \\boxed{4} </think> so \\boxed{5}", "5"), 1.0);
  EXPECT_EQ(deepscaler_reward("try \\boxed{5} </think> so \\boxed{4}", "5"), 0.0);
  EXPECT_EQ(deepscaler_reward("no marker \\boxed{5}", "5"), 0.0);
  EXPECT_EQ(deepscaler_reward("</think> a </think> \\boxed{5}", "\\boxed{5}"), 1.0);
  EXPECT_EQ(deepscaler_reward("q ###Response \\boxed{5} ###Response \\boxed{6}", "5"), 1.0);
  EXPECT_EQ(deepscaler_reward("</think> \\boxed{5}", ""), 0.0);
}

TEST(LatexText, RendersCommonConstructs) {
  EXPECT_EQ(latex_to_text("\\frac{1}{2}"), "1/2");
  EXPECT_EQ(latex_to_text("\\frac{a+b}{c}"), "(a+b)/c");
  EXPECT_EQ(latex_to_text("\\sqrt{3}"), "sqrt(3)");
  EXPECT_EQ(latex_to_text("2\\cdot\\pi"), "2*pi");
  EXPECT_EQ(latex_to_text("\\text{apples}"), "apples");
  EXPECT_EQ(latex_to_text("\\left(1\\right)"), "(1)");
}

TEST(MathExpr, EvaluatesAndComparesNumerically) {
  EXPECT_DOUBLE_EQ(*evaluate_math_expression("2^3^2", {}), 512.0);  // right-associative
  EXPECT_DOUBLE_EQ(*evaluate_math_expression("-2^2", {}), -4.0);
  EXPECT_DOUBLE_EQ(*evaluate_math_expression("2(3+1)x", {{'x', 0.5}}), 4.0);
  EXPECT_DOUBLE_EQ(*evaluate_math_expression("sqrt(16)/2", {}), 2.0);
  EXPECT_FALSE(evaluate_math_expression("1+", {}).has_value());
  EXPECT_FALSE(evaluate_math_expression("y", {}).has_value());
  EXPECT_TRUE(numerically_equivalent("(x+1)^2", "x^2+2x+1"));
  EXPECT_FALSE(numerically_equivalent("x^2", "x"));
  EXPECT_FALSE(numerically_equivalent("1/3", "0.333"));
}

// The numeric stand-in for sympy against sympy itself: simplify(a - b) == 0 with the parser
// settings of miles' grader.
TEST(MathExpr, AgreesWithSympySimplify) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"(x+1)^2", "x^2+2x+1"},
      {"2sqrt(3)", "sqrt(12)"},
      {"x/2", "0.5x"},
      {"1/3", "0.333"},
      {"sqrt(2)/2", "1/sqrt(2)"},
      {"x^2", "x"},
      {"3+2i", "2i+3"},
      {"pi/2", "1.5707963267949"},
      {"2pi", "pi*2"},
      {"(x-y)(x+y)", "x^2-y^2"},
      {"sin(x)^2+cos(x)^2", "1"},
      {"7+3/4", "31/4"},
      {"0.1+0.2", "0.3"},
      {"e^2", "e*e"},
      {"x^3", "x*x*x"},
      {"1/(x+1)", "1/x+1"},
      {"2(x+1)", "2x+2"},
      {"sqrt(8)", "2sqrt(2)"},
      {"log(8)", "3log(2)"},
      {"1e3", "1000"},
      {"(1)/(2)", "1/2"},
      {"-1/2", "(-1)/2"},
      {"a/b", "a*b^-1"},
      {"x", "y"},
      {"0.75", "3/4"},
      {"0.2", "1/5"},
      {"3.14159", "pi"},
      {"(a+b)^3", "a^3+3a^2b+3ab^2+b^3"},
      {"sqrt(x^2)", "x"},
      {"2^10", "1024"},
      {"tan(x)", "sin(x)/cos(x)"},
      {"exp(2)", "e^2"},
      {"1/0", "2/0"}};
  Json input = Json::array();
  for (const auto& [a, b] : pairs) input.push_back({a, b});
  auto dir = testing::cached_oracle(
      "reward_sympy", "oracles/reward_sympy_equiv.py", input.dump(), [&](const auto& d) {
        write_file_atomic(d / "pairs.json", input.dump());
        return std::vector<std::string>{(d / "pairs.json").string(), (d / "out.json").string()};
      });
  Json expected = read_json_file(dir / "out.json");
  ASSERT_EQ(expected.size(), pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(numerically_equivalent(pairs[i].first, pairs[i].second), expected[i].get<bool>())
        << pairs[i].first << " vs " << pairs[i].second;
  }
}

}  // namespace
}  // namespace furlong::reward
