// The one real trained model here, SmolLM2-135M-Instruct (make setup converts it from PyPI into
// .cache/models/smollm2-135m-instruct): furlong's chat template, greedy generation and log-probs
// against transformers in fp32, and a short GRPO run whose held-out accuracy rises.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/jsonl_rows.h"
#include "common/test_util.h"
#include "common/tolerances.h"
#include "core/files.h"
#include "core/json_util.h"

namespace furlong::testing {
namespace {

namespace fs = std::filesystem;

fs::path model_dir() {
  return source_dir() / ".cache" / "models" / "smollm2-135m-instruct";
}

std::string furlong_cmd(const std::vector<std::string>& args) {
  std::string cmd = shell_quote(furlong_binary().string());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return cmd + " 2>&1";
}

class RealModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(model_dir() / "model.safetensors")) {
      GTEST_SKIP() << model_dir() << " is missing: make setup converts SmolLM2-135M-Instruct";
    }
    dir_ = scratch_dir() / "real_model";
    fs::create_directories(dir_);
  }
  fs::path dir_;
};

Json conversation(const std::string& system, const std::string& user) {
  Json messages = Json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", user}});
  return messages;
}

TEST_F(RealModel, TemplateGreedyAndLogprobsEqualTransformersInFp32) {
  const std::vector<Json> conversations = {
      conversation("", "What is the capital of France?"),
      conversation("You are terse.", "What is 12 + 7?"),
      conversation("", "Name three colours of the rainbow, separated by commas."),
      conversation("", "Translate to French: good morning")};
  constexpr int kNewTokens = 24;
  Json plan = {{"model_dir", model_dir().string()},
               {"conversations", conversations},
               {"max_new_tokens", kNewTokens}};
  write_file_atomic(dir_ / "plan.json", plan.dump());
  run_python("oracles/hf_real_model.py",
             {(dir_ / "plan.json").string(), (dir_ / "oracle.json").string()});
  const auto cases = read_json_file(dir_ / "oracle.json").at("cases");

  std::vector<Json> rows;
  for (const auto& m : conversations) rows.push_back({{"messages", m}});
  write_jsonl_rows(dir_ / "prompts.jsonl", rows);
  auto tok = run_command(
      furlong_cmd({"tokenize", "--hf-checkpoint", model_dir().string(), "--input",
                   (dir_ / "prompts.jsonl").string(), "--output", (dir_ / "tokens.jsonl").string(),
                   "--apply-chat-template", "--add-generation-prompt"}));
  ASSERT_EQ(tok.exit_code, 0) << tok.output;
  auto gen = run_command(
      furlong_cmd({"generate", "--hf-checkpoint", model_dir().string(), "--input",
                   (dir_ / "prompts.jsonl").string(), "--output", (dir_ / "out.jsonl").string(),
                   "--dtype", "float32", "--temperature", "0", "--max-new-tokens",
                   std::to_string(kNewTokens), "--exact-logprobs"}));
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const auto tokens = read_jsonl_rows(dir_ / "tokens.jsonl");
  const auto outputs = read_jsonl_rows(dir_ / "out.jsonl");
  ASSERT_EQ(tokens.size(), cases.size());
  ASSERT_EQ(outputs.size(), cases.size());

  int64_t compared = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& ref = cases[c];
    // The chat template and the tokenizer: the same ids, exactly.
    EXPECT_EQ(tokens[c].at("input_ids"), ref.at("prompt_ids")) << "conversation " << c;
    // Both sides run the same weights in fp32, each within the forward budget of the exact
    // logits (tests/common/tolerances.h: 30 layers, reductions of <= 1536 terms, the oracle's
    // measured absolute scale). A greedy token is the same wherever the top-2 gap exceeds twice
    // that budget; past the first step where it does not, the two may legitimately diverge.
    const double budget = tol::forward_logits_budget(30, 1536, ref.at("abs_scale"), tol::kUFp32);
    const auto ours = outputs[c].at("output_ids").get<std::vector<int64_t>>();
    const auto lp = outputs[c].at("logprobs").get<std::vector<double>>();
    const auto theirs = ref.at("output_ids").get<std::vector<int64_t>>();
    const auto margins = ref.at("margins").get<std::vector<double>>();
    for (size_t t = 0; t < theirs.size(); ++t) {
      ASSERT_LT(t, ours.size()) << "conversation " << c << ": furlong stopped early";
      EXPECT_EQ(ours[t], theirs[t]) << "conversation " << c << " token " << t;
      // A log-prob moves by at most twice a logit's error, for two implementations.
      EXPECT_LE(std::abs(lp[t] - ref.at("logprobs")[t].get<double>()),
                tol::noted("real model logprob",
                           std::abs(lp[t] - ref.at("logprobs")[t].get<double>()), 4 * budget))
          << "conversation " << c << " token " << t;
      ++compared;
      if (margins[t] <= 2 * budget) break;
    }
  }
  // The margins of this model's answers leave most tokens comparable; a test that compared
  // nothing would prove nothing.
  EXPECT_GE(compared, 12);
}

// GRPO on two-digit addition (the demo's task, scripts/demo.sh), 5 rollouts of 8 prompts x 8
// samples, greedy accuracy on 128 held-out prompts before and after.
//
// The assertion: the one-sided two-proportion z of "after beats before" is >= 3. Under the null
// of no improvement a z >= 3 has probability 1.3e-3, so a pass means the model learned. The
// run this was written against went from 25/128 to 75/128 (z = 6.4); for it to fail, an
// honest run on another CPU (other rounding, so another sampled trajectory) would have to
// reach fewer than 44/128, i.e. lose most of the gain: the gain shows at every eval of the
// demo's longer run (0.20 -> 0.59 -> 0.70), so that is far in the tail.
TEST_F(RealModel, FiveGrpoRolloutsRaiseHeldOutAccuracy) {
  auto data = dir_ / "addition";
  run_python("../examples/smollm2/make_addition_data.py", {data.string()});
  const auto metrics = dir_ / "grpo.jsonl";
  fs::remove(metrics);
  auto r = run_command(furlong_cmd({"train",
                                    "--hf-checkpoint",
                                    model_dir().string(),
                                    "--prompt-data",
                                    (data / "train.jsonl").string(),
                                    "--input-key",
                                    "prompt",
                                    "--label-key",
                                    "label",
                                    "--apply-chat-template",
                                    "--rm-type",
                                    "final_number",
                                    "--rollout-shuffle",
                                    "--rollout-batch-size",
                                    "8",
                                    "--n-samples-per-prompt",
                                    "8",
                                    "--num-rollout",
                                    "5",
                                    "--rollout-max-response-len",
                                    "16",
                                    "--rollout-temperature",
                                    "1.0",
                                    "--advantage-estimator",
                                    "grpo",
                                    "--lr",
                                    "1e-5",
                                    "--colocate",
                                    "--eval-interval",
                                    "5",
                                    "--eval-prompt-data",
                                    "heldout",
                                    (data / "eval.jsonl").string(),
                                    "--eval-temperature",
                                    "0",
                                    "--metrics-file",
                                    metrics.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> acc;
  for (const auto& row : read_jsonl_rows(metrics)) {
    if (row.contains("eval/heldout")) acc.push_back(row["eval/heldout"].get<double>());
    // One optimizer step per rollout: the old policy is the step's own forward.
    EXPECT_EQ(row.at("train/ppo_kl").get<double>(), 0.0);
  }
  ASSERT_EQ(acc.size(), 2u) << "expected the baseline eval and the one after rollout 5";
  const double n = 128, p1 = acc[0], p2 = acc[1], p = (p1 + p2) / 2;
  const double z = (p2 - p1) / std::sqrt(std::max(p * (1 - p) * 2 / n, 1e-12));
  EXPECT_GE(z, 3.0) << "held-out accuracy " << p1 << " -> " << p2;
}

}  // namespace
}  // namespace furlong::testing
