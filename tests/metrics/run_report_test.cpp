// What a user looks at besides the metric rows: the report's side files (run header, eval
// samples) and how the page shows them, the per-rollout progress line, and the zero reward
// spread warning.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_util.h"
#include "core/files.h"
#include "core/json_util.h"
#include "core/jsonl.h"
#include "metrics/diagnostics.h"
#include "metrics/html_report.h"
#include "metrics/metrics.h"
#include "metrics/report_sections.h"
#include "metrics/rollout_progress.h"
#include "metrics/run_report.h"

namespace furlong::metrics {
namespace {

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (auto p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1)) {
    ++n;
  }
  return n;
}

// Whether every multi-byte sequence of `s` is complete (no cut inside a UTF-8 character).
bool whole_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    if ((c & 0xC0) == 0x80 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// The <section> of the chart titled `title` ("" when there is none).
std::string chart_section(const std::string& html, const std::string& title) {
  const auto at = html.find("<h2>" + title + "</h2>");
  if (at == std::string::npos) return "";
  return html.substr(at, html.find("</section>", at) - at);
}

TEST(ClipText, KeepsShortTextAndHeadAndTailOfLongTextWithoutSplittingUtf8) {
  EXPECT_EQ(clip_text("short", 10), "short");
  EXPECT_EQ(clip_text("exactly10!", 10), "exactly10!");
  std::string long_text = "HEAD";
  for (int i = 0; i < 500; ++i) long_text += "\xC3\xA9";  // é, two bytes each
  long_text += "TAIL";
  for (size_t max : {size_t{0}, size_t{1}, size_t{7}, size_t{60}, size_t{61}, size_t{600}}) {
    const auto clipped = clip_text(long_text, max);
    EXPECT_LE(clipped.size(), max + 40) << max;
    EXPECT_TRUE(whole_utf8(clipped)) << max;
    EXPECT_NE(clipped.find(" bytes ...] "), std::string::npos) << max;
  }
  const auto clipped = clip_text(long_text, 60);
  EXPECT_EQ(clipped.rfind("HEAD", 0), 0u);
  EXPECT_EQ(clipped.substr(clipped.size() - 4), "TAIL");
}

TEST(EvalRewardMetric, OnlyTheMeanRewardOfEachSet) {
  for (const char* yes : {"eval/gsm8k", "eval/math-500", "eval/a_b"}) {
    EXPECT_TRUE(is_eval_reward_metric(yes)) << yes;
  }
  for (const char* no :
       {"eval/", "eval/gsm8k-pass@1", "eval/gsm8k-pass@16", "eval/gsm8k-truncated_ratio",
        "eval/gsm8k/response_len/mean", "rollout/raw_reward", "evaluation/x", "train/eval/x"}) {
    EXPECT_FALSE(is_eval_reward_metric(no)) << no;
  }
}

TEST(EvalSamples, AppendsOneCappedRowPerEvalWithClippedTexts) {
  const auto dir = testing::scratch_dir();
  const auto metrics = dir / "m.jsonl";
  std::vector<EvalSampleRow> rows;
  for (int i = 0; i < 20; ++i) {
    rows.push_back({"prompt " + std::to_string(i), std::string(5000, 'r'), "7", i * 0.5});
  }
  append_eval_samples(metrics, 0, /*before_training=*/true, "addition", rows);
  append_eval_samples(metrics, 4, /*before_training=*/false, "addition", rows);
  EXPECT_EQ(eval_samples_path(metrics), dir / "m.jsonl.eval_samples.jsonl");
  const auto evals = read_jsonl(eval_samples_path(metrics));
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0].value["step"], 0);
  EXPECT_EQ(evals[0].value["before_training"], true);
  EXPECT_EQ(evals[1].value["step"], 4);
  EXPECT_EQ(evals[1].value["set"], "addition");
  const auto& shown = evals[1].value["rows"];
  ASSERT_EQ(shown.size(), kEvalSampleRows);
  EXPECT_EQ(shown[0]["prompt"], "prompt 0");
  EXPECT_EQ(shown[3]["reward"], 1.5);
  EXPECT_LE(shown[0]["response"].get<std::string>().size(), kEvalSampleTextBytes + 40);
  // The file grows by a bounded amount per eval, whatever the texts.
  EXPECT_LT(std::filesystem::file_size(eval_samples_path(metrics)),
            2 * kEvalSampleRows * 3 * (kEvalSampleTextBytes + 80));
}

TEST(RunInfo, WallSecondsRoundTripAndMissingIsZero) {
  const auto dir = testing::scratch_dir();
  const auto metrics = dir / "m.jsonl";
  EXPECT_EQ(read_run_wall_seconds(metrics), 0.0);
  write_run_info(metrics, OrderedJson{{"model", "/m"}}, 123.5);
  EXPECT_EQ(run_info_path(metrics), dir / "m.jsonl.run_info.json");
  EXPECT_EQ(read_run_wall_seconds(metrics), 123.5);
  std::ofstream(run_info_path(metrics)) << "{not json";
  EXPECT_EQ(read_run_wall_seconds(metrics), 0.0);
}

TEST(RunInfo, ANewMetricsFileRemovesOlderSideFilesAndAnExistingOneKeepsThem) {
  const auto dir = testing::scratch_dir();
  const auto metrics = dir / "m.jsonl";
  auto make_side_files = [&] {
    write_run_info(metrics, OrderedJson::object(), 1.0);
    append_eval_samples(metrics, 0, false, "s", {});
  };
  make_side_files();
  {
    MetricsLogger logger({.jsonl_path = metrics, .tensorboard_dir = {}, .console_table = false});
  }  // new JSONL
  EXPECT_FALSE(std::filesystem::exists(run_info_path(metrics)));
  EXPECT_FALSE(std::filesystem::exists(eval_samples_path(metrics)));
  make_side_files();
  {
    MetricsLogger logger({.jsonl_path = metrics, .tensorboard_dir = {}, .console_table = false});
  }  // appends
  EXPECT_TRUE(std::filesystem::exists(run_info_path(metrics)));
  EXPECT_TRUE(std::filesystem::exists(eval_samples_path(metrics)));
}

// A run's files as the trainer leaves them: rollout rows with an eval every other rollout, the
// run header and the eval samples.
std::filesystem::path write_run(const std::filesystem::path& dir, int evals) {
  const auto metrics = dir / "m.jsonl";
  std::ofstream out(metrics);
  for (int s = 0; s < 6; ++s) {
    Json row = {{"step", s},
                {"rollout/step", s},
                {"rollout/raw_reward", 0.1 * s},
                {"passrate/pass@2", 0.2 * s},
                {"rollout/reward_failures", 40}};
    if (s % 2 == 0) {
      row["eval/addition"] = 0.05 * s;
      row["eval/addition-pass@1"] = 0.05 * s;
      row["eval/addition/response_len/mean"] = 3.0;
    }
    out << row.dump() << "\n";
  }
  OrderedJson fields = OrderedJson::object();
  fields["model"] = "/models/<tiny>";
  fields["--lr"] = 0.001;
  fields["--n-samples-per-prompt"] = 8;
  write_run_info(metrics, fields, 3725.0);
  for (int e = 0; e < evals; ++e) {
    append_eval_samples(metrics, 2 * e, e == 0, "addition",
                        {{"1+<b>2</b>=", "3 & more", "3", 1.0}, {"4+4=", "9", "8", 0.0}});
  }
  return metrics;
}

TEST(HtmlReport, RunHeaderEvalBesideTrainingRewardAndSampleTables) {
  const auto dir = testing::scratch_dir();
  const auto metrics = write_run(dir, 2);
  write_html_report(metrics, dir / "r.html", "run");
  const auto html = read_file(dir / "r.html");
  // The header: total time, the logged rollouts and every field, escaped.
  EXPECT_NE(html.find("<h2>Run</h2>"), std::string::npos);
  EXPECT_NE(html.find("<th>total time</th><td>1:02:05</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>rollouts logged</th><td>6 (steps 0 to 5)</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>model</th><td>/models/&lt;tiny&gt;</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>--lr</th><td>0.001</td>"), std::string::npos);
  EXPECT_NE(html.find("<th>--n-samples-per-prompt</th><td>8</td>"), std::string::npos);
  // The eval mean reward is in the Reward chart, dashed, and has no chart of its own.
  const auto reward = chart_section(html, "Reward");
  EXPECT_NE(reward.find("eval/addition"), std::string::npos);
  EXPECT_NE(reward.find("rollout/raw_reward"), std::string::npos);
  EXPECT_EQ(count(reward, "<polyline"), 2u);
  EXPECT_EQ(count(reward, "stroke-dasharray"), 1u);
  EXPECT_EQ(chart_section(html, "eval/addition"), "");
  EXPECT_EQ(reward.find("reward_failures"), std::string::npos);  // a count: a chart of its own
  EXPECT_NE(chart_section(html, "rollout/reward_failures"), "");
  // pass@k of training and eval share a chart; the eval length joins Response length.
  const auto pass = chart_section(html, "Pass@k");
  EXPECT_NE(pass.find("passrate/pass@2"), std::string::npos);
  EXPECT_NE(pass.find("eval/addition-pass@1"), std::string::npos);
  EXPECT_NE(chart_section(html, "Response length").find("eval/addition/response_len/mean"),
            std::string::npos);
  // One table per eval, the latest open, texts escaped.
  EXPECT_EQ(count(html, "<details"), 2u);
  EXPECT_EQ(count(html, "<details open>"), 1u);
  EXPECT_NE(html.find("eval addition, step 0 (before training): 2 sample(s), mean reward 0.5"),
            std::string::npos);
  EXPECT_NE(html.find("<pre>1+&lt;b&gt;2&lt;/b&gt;=</pre>"), std::string::npos);
  EXPECT_NE(html.find("<pre>3 &amp; more</pre>"), std::string::npos);
  EXPECT_EQ(html.find("<b>"), std::string::npos);
}

TEST(HtmlReport, CapsEvalTablesAndLeavesOutMissingSideFiles) {
  const auto dir = testing::scratch_dir();
  const auto metrics = write_run(dir, 30);
  write_html_report(metrics, dir / "r.html", "run");
  auto html = read_file(dir / "r.html");
  EXPECT_EQ(count(html, "<details"), kMaxEvalTables);
  EXPECT_NE(html.find("step 0 (before training)"), std::string::npos);  // the first stays
  EXPECT_NE(html.find("step 58:"), std::string::npos);                  // and the latest
  EXPECT_EQ(html.find("step 2:"), std::string::npos);
  EXPECT_NE(html.find(std::to_string(30 - kMaxEvalTables) + " eval table(s) not shown"),
            std::string::npos);
  remove_side_files(metrics);
  write_html_report(metrics, dir / "r.html", "run");
  html = read_file(dir / "r.html");
  EXPECT_EQ(html.find("<h2>Run</h2>"), std::string::npos);
  EXPECT_EQ(html.find("<details"), std::string::npos);
  // Reward, Pass@k, Response length, reward_failures; no chart of the step counters.
  EXPECT_EQ(count(html, "<svg"), 4u);
}

TEST(RolloutProgress, RewardLatestEvalStepTimeAndEta) {
  RolloutProgress progress(0, 6);
  std::map<std::string, double> row = {{"rollout/raw_reward", 0.25},
                                       {"eval/addition", 0.125},
                                       {"eval/addition-pass@1", 0.9},
                                       {"perf/iteration_time", 4.04}};
  // 1 rollout done in 5 s: 5 left at 5 s each.
  EXPECT_EQ(progress.line_at(0, row, 5.0),
            "rollout 1/6: reward 0.250, eval addition 0.125, 4.0 s, ETA 00:25");
  // A rollout without an eval shows the latest one with its rollout (1-based, as the line).
  row = {{"rollout/raw_reward", 0.5}, {"perf/iteration_time", 2.0}};
  EXPECT_EQ(progress.line_at(1, row, 12.0),
            "rollout 2/6: reward 0.500, eval addition 0.125 (rollout 1), 2.0 s, ETA 00:24");
  EXPECT_EQ(progress.line_at(5, row, 30.0),
            "rollout 6/6: reward 0.500, eval addition 0.125 (rollout 1), 2.0 s, done in 00:30");
  // A resumed run counts only its own rollouts for the ETA; no eval yet: none shown.
  RolloutProgress resumed(50, 100);
  EXPECT_EQ(resumed.line_at(59, {{"rollout/raw_reward", 1.0}}, 100.0),
            "rollout 60/100: reward 1.000, 0.0 s, ETA 06:40");
}

RewardSetup math_setup() {
  return {.grader = "--rm-type math",
          .label_key = "answer",
          .skip_special_tokens = false,
          .advantage_estimator = "grpo",
          .group_normalized = true};
}

TEST(ZeroRewardSpread, WarnsWhenEveryGroupHasOneRewardAndNamesWhatToCheck) {
  const auto msg = zero_reward_spread_warning({{0, 0, 0, 0}, {0, 0, 0, 0}}, math_setup());
  EXPECT_EQ(msg.rfind("WARNING: no gradient signal", 0), 0u) << msg;
  for (const char* part :
       {"all 2 prompt groups", "the 4 samples of each prompt", "every sample scored 0",
        "--advantage-estimator grpo", "advantages (GRPO's) are all 0", "--rm-type math",
        "--label-key answer", "--rollout-skip-special-tokens (off", "difficulty"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\n" << msg;
  }
  const auto mixed = zero_reward_spread_warning({{1, 1}, {0, 0}, {0, 0}}, math_setup());
  EXPECT_NE(mixed.find("the groups' rewards: 0 (2 groups), 1 (1 group)"), std::string::npos)
      << mixed;
  auto on = math_setup();
  on.skip_special_tokens = true;
  EXPECT_NE(zero_reward_spread_warning({{1, 1}}, on).find("--rollout-skip-special-tokens (on)"),
            std::string::npos);
  // An estimator without group normalization has a gradient, but none that ranks responses.
  auto plain = math_setup();
  plain.advantage_estimator = "reinforce_plus_plus";
  plain.group_normalized = false;
  const auto weak = zero_reward_spread_warning({{1, 1}, {0, 0}}, plain);
  EXPECT_EQ(weak.rfind("WARNING: no reward spread", 0), 0u) << weak;
  EXPECT_EQ(weak.find("(GRPO's) are all 0"), std::string::npos) << weak;
  EXPECT_NE(weak.find("--advantage-estimator reinforce_plus_plus, no response is rewarded"),
            std::string::npos)
      << weak;
}

TEST(ZeroRewardSpread, SilentWhenAnyGroupHasASpreadOrNoGroupHasTwoSamples) {
  EXPECT_EQ(zero_reward_spread_warning({{0, 0, 0}, {0, 1, 0}}, math_setup()), "");
  EXPECT_EQ(zero_reward_spread_warning({{0.5, 0.5 + 1e-6}}, math_setup()), "");
  EXPECT_EQ(zero_reward_spread_warning({{1}, {0}}, math_setup()), "");  // n = 1: no spread
  EXPECT_EQ(zero_reward_spread_warning({}, math_setup()), "");
  // Values within the filter's tolerance count as equal.
  EXPECT_NE(zero_reward_spread_warning({{0.5, 0.5 + 1e-12}}, math_setup()), "");
}

}  // namespace
}  // namespace furlong::metrics
