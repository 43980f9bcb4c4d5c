// dapo, F1 / exact match (against a Python SQuAD oracle on random strings), the reward registry
// and --reward-key selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

#include "common/test_util.h"
#include "core/error.h"
#include "core/files.h"
#include "reward/rewards.h"
#include "reward/text_rewards.h"

namespace furlong::reward {
namespace {

using furlong::testing::error_of;

TEST(DapoReward, AnswerLineFormat) {
  Json r = dapo_reward("reasoning...\nAnswer: 42", "42");
  EXPECT_EQ(r["score"], 1.0);
  EXPECT_EQ(r["acc"], true);
  EXPECT_EQ(r["pred"], "42");
  EXPECT_EQ(dapo_reward("answer:   1,000\n", "1000")["score"], 1.0);
  EXPECT_EQ(dapo_reward("Answer: $\\boxed{7}$", "7")["score"], 1.0);
  EXPECT_EQ(dapo_reward("Answer: x = 12", "12.0")["score"], 1.0);
  EXPECT_EQ(dapo_reward("Answer: 12 degrees", "12")["score"], 1.0);
  // The last Answer line wins; only the last 300 characters are read.
  EXPECT_EQ(dapo_reward("Answer: 3\nwait\nAnswer: 4", "4")["score"], 1.0);
  EXPECT_EQ(dapo_reward("Answer: 3\nwait\nAnswer: 4", "3")["score"], -1.0);
  std::string far = "Answer: 9\n" + std::string(400, 'x');
  Json miss = dapo_reward(far, "9");
  EXPECT_EQ(miss["score"], -1.0);
  EXPECT_EQ(miss["acc"], false);
  EXPECT_EQ(miss["pred"], "[INVALID]");
  EXPECT_EQ(dapo_reward("no answer line", "5")["score"], -1.0);
  EXPECT_NE(error_of([] { dapo_reward("Answer: 5", "five"); }).find("not a number"),
            std::string::npos);
}

TEST(DapoReward, Normalization) {
  EXPECT_EQ(dapo_normalize_answer("\\frac12"), "\\frac{1}{2}");
  EXPECT_EQ(dapo_normalize_answer("\\sqrt3"), "\\sqrt{3}");
  EXPECT_EQ(dapo_normalize_answer("\\text{10 }"), "10");
  EXPECT_EQ(dapo_normalize_answer("y = 2,500"), "2500");
  EXPECT_EQ(dapo_normalize_answer("\\overline{AB}"), "AB");
  // Very long texts (never real answers) are handled without deep regex recursion.
  EXPECT_EQ(dapo_normalize_answer(std::string(100000, '7')), std::string(100000, '7'));
}

TEST(F1Reward, KnownValues) {
  EXPECT_DOUBLE_EQ(f1_reward("The cat sat", "a cat sat down"), 2.0 * (1.0 * 2 / 3) / (1 + 2.0 / 3));
  EXPECT_DOUBLE_EQ(f1_reward("Paris!", "paris"), 1.0);
  EXPECT_DOUBLE_EQ(f1_reward("yes", "no"), 0.0);
  EXPECT_DOUBLE_EQ(f1_reward("yes it is", "yes"), 0.0);
  EXPECT_DOUBLE_EQ(f1_reward("", "x"), 0.0);
  EXPECT_EQ(squad_normalize("  The  Answer, an apple!  "), "answer apple");
  EXPECT_EQ(exact_match_reward("The Eiffel Tower.", "eiffel tower"), 1.0);
  EXPECT_EQ(exact_match_reward("Eiffel", "eiffel tower"), 0.0);
}

// Random ASCII strings drawn from words with articles, punctuation, case and whitespace.
std::string random_text(std::mt19937& rng) {
  static const char* const kWords[] = {"a",  "an",    "the",    "The",      "cat",  "Cat.", "dog",
                                       "x",  "yes",   "no",     "noanswer", "a-b",  "an,",  "(the)",
                                       "1",  "42",    "theory", "anA",      "_a",   "a_",   "\tb",
                                       "'s", "\"q\"", "!",      "  ",       "dog!", "Yes",  "e.g."};
  std::uniform_int_distribution<int> count(0, 6), pick(0, std::size(kWords) - 1), sep(0, 3);
  std::string out;
  int n = count(rng);
  for (int i = 0; i < n; ++i) {
    out += kWords[pick(rng)];
    out += sep(rng) == 0 ? "" : " ";
  }
  return out;
}

TEST(F1Reward, MatchesSquadOracleOnRandomStrings) {
  std::mt19937 rng(1234);
  Json cases = Json::object();
  cases["f1"] = Json::array();
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int i = 0; i < 400; ++i) {
    pairs.emplace_back(random_text(rng), random_text(rng));
    cases["f1"].push_back({pairs.back().first, pairs.back().second});
  }
  auto dir = furlong::testing::cached_oracle(
      "reward_f1", "oracles/reward_text_oracle.py", cases.dump(), [&](const auto& d) {
        write_file_atomic(d / "cases.json", cases.dump());
        return std::vector<std::string>{(d / "cases.json").string(), (d / "out.json").string()};
      });
  Json out = read_json_file(dir / "out.json");
  ASSERT_EQ(out["f1"].size(), pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    // Same arithmetic in the same order: agreement to the last bit is expected; 1e-15 allows
    // for nothing but a different association of the final division.
    EXPECT_NEAR(f1_reward(pairs[i].first, pairs[i].second), out["f1"][i][0].get<double>(), 1e-15)
        << "pred '" << pairs[i].first << "' truth '" << pairs[i].second << "'";
    EXPECT_EQ(exact_match_reward(pairs[i].first, pairs[i].second), out["f1"][i][1].get<double>())
        << "pred '" << pairs[i].first << "' truth '" << pairs[i].second << "'";
  }
}

TEST(RewardRegistry, BuiltinsAndBoxedPrefix) {
  Json meta = Json::object();
  EXPECT_EQ(builtin_reward("math", "\\boxed{4}", "4", meta), 1.0);
  EXPECT_EQ(builtin_reward("f1", "paris", "Paris", meta), 1.0);
  EXPECT_EQ(builtin_reward("boxed_f1", "I think \\boxed{Paris}", "paris", meta), 1.0);
  EXPECT_EQ(builtin_reward("boxed_exact_match", "no box", "paris", meta), 0.0);
  EXPECT_TRUE(builtin_reward("dapo", "Answer: 3", "3", meta).is_object());
  std::string err = error_of([&] { builtin_reward("maht", "x", "y", meta); });
  EXPECT_NE(err.find("unknown reward type 'maht'"), std::string::npos) << err;
  EXPECT_NE(err.find("did you mean 'math'"), std::string::npos) << err;
  EXPECT_NE(err.find("deepscaler"), std::string::npos) << err;
  EXPECT_NE(error_of([&] { builtin_reward("", "x", "y", meta); }).find("no reward type"),
            std::string::npos);
}

// --rm-type and metadata.rm_type are parsed once: the grader and the boxed_ prefix.
TEST(RewardRegistry, TypesParseIntoKindAndPrefixAndBack) {
  for (const std::string name : {"math", "deepscaler", "dapo", "f1", "exact_match", "final_number",
                                 "remote_rm", "boxed_f1", "boxed_math"}) {
    EXPECT_EQ(reward_type_name(parse_reward_type(name, "--rm-type")), name);
  }
  const RewardType boxed = parse_reward_type("boxed_final_number", "--rm-type");
  EXPECT_EQ(boxed.kind, RewardKind::kFinalNumber);
  EXPECT_TRUE(boxed.boxed);
  EXPECT_TRUE(boxed.builtin());
  EXPECT_TRUE(parse_reward_type("remote_rm", "x").remote());
  EXPECT_FALSE(parse_reward_type("remote_rm", "x").builtin());
  std::string err = error_of([] { parse_reward_type("deepscalr", "--rm-type"); });
  EXPECT_NE(err.find("--rm-type: unknown reward type 'deepscalr' (did you mean 'deepscaler'?)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("(each also as boxed_<type>)"), std::string::npos) << err;
}

TEST(RewardRegistry, RegisteredTypesAreServedAndListed) {
  auto before = known_reward_types();  // the registry is process-wide: register once
  if (std::find(before.begin(), before.end(), "length_penalty") == before.end()) {
    register_reward_type("length_penalty", [](std::string_view r, std::string_view, const Json& m) {
      return Json{{"score", -double(r.size())}, {"tag", m.value("tag", "")}};
    });
  }
  Json out = builtin_reward("length_penalty", "abc", "", Json{{"tag", "t"}});
  EXPECT_EQ(out["score"], -3.0);
  EXPECT_EQ(out["tag"], "t");
  EXPECT_EQ(builtin_reward("boxed_length_penalty", "\\boxed{ab}", "", Json::object())["score"],
            -2.0);
  auto known = known_reward_types();
  EXPECT_NE(std::find(known.begin(), known.end(), "length_penalty"), known.end());
  const RewardType registered = parse_reward_type("boxed_length_penalty", "--rm-type");
  EXPECT_EQ(registered.kind, RewardKind::kRegistered);
  EXPECT_EQ(registered.registered, "length_penalty");
  EXPECT_EQ(reward_type_name(registered), "boxed_length_penalty");
  EXPECT_NE(error_of([] { register_reward_type("math", {}); }).find("needs a function"),
            std::string::npos);
  auto noop = [](std::string_view, std::string_view, const Json&) { return Json(0.0); };
  EXPECT_NE(error_of([&] { register_reward_type("math", noop); }).find("already registered"),
            std::string::npos);
  EXPECT_NE(error_of([&] { register_reward_type("boxed_x", noop); }).find("reserved"),
            std::string::npos);
}

TEST(RewardRegistry, RewardKeySelection) {
  Json dict = {{"score", -1.0}, {"acc", false}, {"pred", "3"}};
  EXPECT_EQ(select_reward_value(dict, "score", "s"), -1.0);
  EXPECT_EQ(select_reward_value(dict, "acc", "s"), 0.0);
  EXPECT_EQ(select_reward_value(Json(0.25), "", "s"), 0.25);
  EXPECT_EQ(select_reward_value(Json(true), "", "s"), 1.0);
  EXPECT_NE(error_of([&] { select_reward_value(dict, "", "s"); }).find("--reward-key"),
            std::string::npos);
  EXPECT_NE(error_of([&] { select_reward_value(dict, "nope", "s"); }).find("'nope'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { select_reward_value(dict, "pred", "s"); }).find("must be a number"),
            std::string::npos);
}

TEST(RewardGrader, ScoresSamplesWithOverridesAndSkipsAborted) {
  RewardOptions o;
  o.rm_type = RewardType{RewardKind::kMath};
  o.max_concurrency = 4;
  RewardGrader model(o);
  std::vector<rl::Sample> samples(6);
  for (int i = 0; i < 6; ++i) {
    samples[i].index = i;
    samples[i].label = "4";
    samples[i].response = i % 2 == 0 ? "\\boxed{4}" : "\\boxed{5}";
  }
  samples[4].status = rl::SampleStatus::kAborted;
  samples[4].raw_reward = -7;  // untouched
  samples[5].metadata["rm_type"] = "f1";
  samples[5].response = "4";
  RewardStats stats = model.compute_rewards(samples);
  EXPECT_EQ(stats.scored, 5);
  EXPECT_EQ(stats.skipped_aborted, 1);
  EXPECT_EQ(samples[0].raw_reward, 1.0);
  EXPECT_EQ(samples[1].raw_reward, 0.0);
  EXPECT_EQ(samples[2].reward, 1.0);
  EXPECT_EQ(samples[4].raw_reward, -7.0);
  EXPECT_EQ(samples[5].raw_reward, 1.0);

  RewardOptions dapo;
  dapo.rm_type = parse_reward_type("dapo", "--rm-type");
  dapo.reward_key = "score";
  std::vector<rl::Sample> one(1);
  one[0].response = "Answer: 8";
  one[0].label = "8";
  RewardGrader(dapo).compute_rewards(one);
  EXPECT_EQ(one[0].raw_reward, 1.0);
  EXPECT_EQ(one[0].metadata["reward"]["acc"], true);

  RewardOptions bad;
  bad.rm_type = RewardType{RewardKind::kRemote};
  EXPECT_NE(error_of([&] { RewardGrader m(bad); }).find("--rm-url"), std::string::npos);
}

}  // namespace
}  // namespace furlong::reward
