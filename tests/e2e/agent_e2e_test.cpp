// Multi-turn GRPO end to end: `furlong train` on a tiny random Qwen3 against the reference
// calculator env (examples/agent_env/calculator_env.py, started here on 127.0.0.1 with
// --call-reward 1, so an episode earns 1 when it makes a well-formed calculator call). The
// tokenizer (examples/agent_env/tokenizer) has the opening of a calculator call, up to the
// expression, as one token and its closing as another (a stop token of the run): a call is
// "open, anything without a newline, close". The random model makes one in ~3% of episodes;
// GRPO must raise that by far more than chance allows. The same task runs through the example
// agent harness over the OpenAI API (examples/agent_harness/calculator_agent.py), and the
// threshold task through the example OpenEnv env (examples/openenv/sum_env.py).
//
// Statistics as in rl_e2e_test.cpp: the first and last K rollouts each hold K * 64 episodes;
// the one-sided two-proportion z statistic of "the last K beat the first K" must exceed 5
// (p < 3e-7 under no improvement). The run is seeded, so the test is deterministic.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/arith_task.h"
#include "common/rl_flags.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "core/json_util.h"
#include "rollout/env_client.h"

namespace furlong::testing {
namespace {

namespace fs = std::filesystem;

// The reference env on a kernel-chosen loopback port, paying --call-reward 1.
class CalculatorEnvProcess : public ScriptServer {
 public:
  explicit CalculatorEnvProcess(const fs::path& dir)
      : ScriptServer(source_dir() / "examples/agent_env/calculator_env.py", {"--call-reward", "1"},
                     dir) {}
};

std::vector<Json> read_rows(const fs::path& file) {
  std::vector<Json> rows;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

double value(const Json& row, const std::string& key) {
  EXPECT_TRUE(row.contains(key)) << key << " missing in " << row.dump();
  return row.contains(key) && row[key].is_number() ? row[key].get<double>() : NAN;
}

// The one-sided two-proportion z statistic of "the last k rollouts' raw reward beats the first
// k's", each rollout 64 episodes.
double first_last_z(const std::vector<Json>& rows, int k) {
  double first = 0, last = 0;
  for (int i = 0; i < k; ++i) {
    first += value(rows[static_cast<size_t>(i)], "rollout/raw_reward");
    last += value(rows[rows.size() - 1 - static_cast<size_t>(i)], "rollout/raw_reward");
  }
  const double n = k * 64.0, p1 = first / k, p2 = last / k, p = (p1 + p2) / 2;
  const double z = (p2 - p1) / std::sqrt(std::max(p * (1 - p) * 2 / n, 1e-12));
  EXPECT_GT(z, 5.0) << "first/last rewards " << p1 << " / " << p2;
  return z;
}

// The calculator run (below) with `agent` flags naming the env or the harness that grades it:
// the metrics rows, one per rollout.
std::vector<Json> run_calculator_grpo(const fs::path& dir, int num_rollout,
                                      const std::vector<std::string>& agent) {
  // The tiny Qwen3 of the other e2e tests, ending turns on <|im_end|> (id 19); the model
  // directory gets the tokenizer and chat template of examples/agent_env.
  auto config = arith_qwen3_config();
  config["eos_token_id"] = 19;
  const auto model =
      init_model(dir, "model", config, source_dir() / "examples/agent_env/tokenizer");
  EXPECT_FALSE(::testing::Test::HasFailure());
  // 64 prompts "a*b=" with two-digit factors; the label is the product.
  const auto prompts = dir / "prompts.jsonl";
  {
    std::ofstream out(prompts);
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> factor(10, 99);
    for (int i = 0; i < 64; ++i) {
      const int a = factor(rng), b = factor(rng);
      out << Json{{"input", std::to_string(a) + "*" + std::to_string(b) + "="},
                  {"label", std::to_string(a * b)}}
                 .dump()
          << "\n";
    }
  }
  // The threshold task's run, graded by the env instead of a reward type: turns of at most 12
  // tokens, ending at <|im_end|> or at the call's closing token (21).
  const auto flags =
      threshold_grpo_flags(model, prompts, num_rollout)
          .drop("--rm-type")
          .drop("--rollout-skip-special-tokens")
          .set("--rollout-max-response-len", "12")
          .add({"--apply-chat-template", "--agent-max-turns", "2", "--agent-max-episode-tokens",
                "40", "--rollout-stop-token-ids", "21", "--rollout-temperature", "1.0"})
          .add(agent)
          .add(tiny_trainer_flags())
          .add({"--metrics-file", (dir / "metrics.jsonl").string(), "--colocate"});
  std::string cmd = shell_quote(furlong_binary().string()) + " train";
  for (const auto& a : flags.args()) cmd += " " + shell_quote(a);
  auto r = run_command(cmd + " 2>&1");
  std::ofstream(dir / "train.log") << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_rows(dir / "metrics.jsonl");
  EXPECT_EQ(rows.size(), static_cast<size_t>(num_rollout)) << r.output;
  return rows;
}

TEST(AgentEndToEnd, GrpoLearnsToCallTheCalculator) {
  const auto dir = scratch_dir();
  CalculatorEnvProcess env(dir);
  ASSERT_GT(env.port(), 0) << "the calculator env did not start";
  const int num_rollout = 16;
  auto rows = run_calculator_grpo(dir, num_rollout, {"--agent-env-url", env.url()});
  ASSERT_EQ(rows.size(), static_cast<size_t>(num_rollout));
  first_last_z(rows, 4);
  for (const auto& row : rows) {
    // Each episode is graded by the env (--call-reward makes every ending carry a reward), and
    // nothing failed.
    EXPECT_EQ(value(row, "rollout/agent/missing_reward"), 0.0);
    EXPECT_EQ(value(row, "rollout/agent/env_errors"), 0.0);
    EXPECT_EQ(value(row, "rollout/agent/timeouts"), 0.0);
    // One step per rollout: old and new log-probs agree exactly on the trained (mask 1)
    // tokens; engine and trainer within the fp32 bound of rl_e2e_test.cpp.
    EXPECT_EQ(value(row, "train/ppo_kl"), 0.0);
    EXPECT_LE(value(row, "train/train_rollout_logprob_abs_diff"), 1e-4);
  }
  // The policy learned to call the tool: more calls and turns, so more observation tokens.
  EXPECT_GT(value(rows.back(), "rollout/agent/tool_calls"),
            value(rows.front(), "rollout/agent/tool_calls") + 0.5);
  EXPECT_GT(value(rows.back(), "rollout/agent/masked_token_share"), 0.0);
  EXPECT_GT(value(rows.back(), "rollout/agent/turns"), value(rows.front(), "rollout/agent/turns"));
}

// The same task driven by an agent harness over the OpenAI API: the example harness
// (examples/agent_harness/calculator_agent.py, the unmodified openai package) pays 1 when the
// session calls the calculator, and answers a turn without a call with a user message "?" (as the
// env answers a malformed call with an error). The trained tokens are the ones the sessions
// recorded: the engine's and the trainer's log-probs agree on them as in the env run, and GRPO
// raises the reward.
TEST(AgentEndToEnd, GrpoThroughAnOpenAiHarnessLearnsToCallTheCalculator) {
  const auto dir = scratch_dir();
  ScriptServer agent(source_dir() / "examples/agent_harness/calculator_agent.py",
                     {"--reward", "call", "--max-turns", "2", "--nudge", "?"}, dir);
  ASSERT_GT(agent.port(), 0) << "the example harness did not start";
  const int num_rollout = 16;
  auto rows = run_calculator_grpo(dir, num_rollout, {"--agent-harness-url", agent.url()});
  ASSERT_EQ(rows.size(), static_cast<size_t>(num_rollout));
  first_last_z(rows, 4);
  for (const auto& row : rows) {
    EXPECT_EQ(value(row, "rollout/agent/missing_reward"), 0.0);
    EXPECT_EQ(value(row, "rollout/agent/harness_errors"), 0.0);
    EXPECT_EQ(value(row, "rollout/agent/history_divergences"), 0.0);
    EXPECT_EQ(value(row, "train/ppo_kl"), 0.0);
    EXPECT_LE(value(row, "train/train_rollout_logprob_abs_diff"), 1e-4);
  }
  // The harness's own count of calls rose with furlong's.
  EXPECT_GT(value(rows.back(), "rollout/agent/tool_calls"),
            value(rows.front(), "rollout/agent/tool_calls") + 0.5);
  EXPECT_GT(value(rows.back(), "rollout/agent/harness/tool_calls"),
            value(rows.front(), "rollout/agent/harness/tool_calls") + 0.5);
}

// The threshold task served by an OpenEnv-shaped env (examples/openenv/sum_env.py --task
// threshold): every dataset prompt is the same "Q"; the env's reset draws the group's task
// "a+b=" from the group's seed and furlong appends it to the prompt as a user message; the one
// step's action is the answer, rewarded 1 when it is the task's label. `extra` adds flags.
std::vector<Json> run_openenv_grpo(const fs::path& dir, const std::string& protocol,
                                   const std::vector<std::string>& env_args, int num_rollout,
                                   const std::vector<std::string>& extra = {}) {
  auto config = arith_qwen3_config();
  config["eos_token_id"] = 19;
  const auto model =
      init_model(dir, "model", config, source_dir() / "examples/agent_env/tokenizer");
  const auto prompts = dir / "prompts.jsonl";
  {
    std::ofstream out(prompts);
    for (int i = 0; i < 64; ++i) out << Json{{"input", "Q"}, {"label", "-"}}.dump() << "\n";
  }
  std::vector<std::string> args{"--task", "threshold"};
  args.insert(args.end(), env_args.begin(), env_args.end());
  ScriptServer env(source_dir() / "examples/openenv/sum_env.py", args, dir);
  EXPECT_GT(env.port(), 0) << "the example env did not start";
  auto flags = threshold_grpo_flags(model, prompts, num_rollout)
                   .drop("--rm-type")
                   .add({"--apply-chat-template", "--agent-env-url", env.url(),
                         "--agent-env-protocol", protocol, "--agent-env-observation-key", "prompt",
                         "--agent-max-turns", "1", "--rollout-temperature", "1.0"})
                   .add(tiny_trainer_flags())
                   .add({"--metrics-file", (dir / "metrics.jsonl").string(), "--colocate"})
                   .add(extra);
  std::string cmd = shell_quote(furlong_binary().string()) + " train";
  for (const auto& a : flags.args()) cmd += " " + shell_quote(a);
  auto r = run_command(cmd + " 2>&1");
  std::ofstream(dir / "train.log") << r.output;  // the episodes' warnings, for a failure
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto rows = read_rows(dir / "metrics.jsonl");
  EXPECT_EQ(rows.size(), static_cast<size_t>(num_rollout)) << r.output;
  return rows;
}

// GRPO over OpenEnv's WebSocket sessions learns the task the env poses (the z statistic of the
// calculator test above, first and last 4 rollouts of 64 episodes); every episode is graded by
// the env, and none failed.
TEST(AgentEndToEnd, GrpoOverOpenEnvWebSocketSessionsLearnsTheEnvsTask) {
  const int num_rollout = 16;
  auto rows = run_openenv_grpo(scratch_dir(), "openenv", {}, num_rollout);
  ASSERT_EQ(rows.size(), static_cast<size_t>(num_rollout));
  first_last_z(rows, 4);
  for (const auto& row : rows) {
    EXPECT_EQ(value(row, "rollout/agent/missing_reward"), 0.0);
    EXPECT_EQ(value(row, "rollout/agent/env_errors"), 0.0);
    EXPECT_EQ(value(row, "rollout/agent/turns"), 1.0);
    EXPECT_EQ(value(row, "train/ppo_kl"), 0.0);
  }
}

// The HTTP form runs the same episodes (the example env keeps them by episode_id); a fault in
// every 4th WebSocket session ends only that episode, counted, and the run goes on.
TEST(AgentEndToEnd, OpenEnvOverHttpAndSessionFaultsEndOnlyTheirEpisodes) {
  auto http = run_openenv_grpo(scratch_dir(), "openenv-http", {}, 2);
  for (const auto& row : http) {
    EXPECT_EQ(value(row, "rollout/agent/missing_reward"), 0.0);
    EXPECT_EQ(value(row, "rollout/agent/env_errors"), 0.0);
    EXPECT_EQ(value(row, "rollout/agent/turns"), 1.0);
  }
  for (const std::string fault : {"close-on-step", "hang-on-step"}) {
    SCOPED_TRACE(fault);
    // At most 8 sessions at once (--agent-env-concurrency); a hung session's server thread
    // never ends, so the server gets room for all of them.
    auto rows = run_openenv_grpo(scratch_dir(), "openenv",
                                 {"--fault", fault, "--fault-every", "4", "--max-sessions", "200"},
                                 2, {"--agent-env-timeout", "2", "--agent-env-concurrency", "8"});
    for (const auto& row : rows) {
      // 64 sessions a rollout, every 4th faulty: 16 (the server counts sessions over the run).
      EXPECT_EQ(value(row, "rollout/agent/env_errors"), 16.0);
      EXPECT_EQ(value(row, "rollout/agent/timeouts"), fault == "hang-on-step" ? 16.0 : 0.0);
    }
  }
}

// The reference env speaks the protocol of docs/agents.md: repeated steps get the same answer,
// the calculator refuses what is not arithmetic, unknown episodes are 404 (not retried).
TEST(AgentEndToEnd, TheReferenceEnvFollowsTheProtocol) {
  CalculatorEnvProcess env(scratch_dir());
  ASSERT_GT(env.port(), 0) << "the calculator env did not start";
  rollout::EnvClient client({.url = env.url(), .timeout_s = 10, .max_retries = 0});
  auto start = client.post("start", {{"sample", {{"index", 0}, {"label", "56088"}}}});
  ASSERT_TRUE(start.ok) << start.error;
  const std::string id = start.body["episode_id"];
  auto call = [&](int turn, const std::string& expression) {
    return client.post(
        "step", {{"episode_id", id},
                 {"turn", turn},
                 {"message",
                  {{"role", "assistant"},
                   {"content", ""},
                   {"tool_calls",
                    {{{"name", "calculator"}, {"arguments", {{"expression", expression}}}}}}}}});
  };
  auto first = call(0, "123*456");
  ASSERT_TRUE(first.ok) << first.error;
  EXPECT_EQ(first.body["observation"][0]["content"], "56088");
  EXPECT_EQ(first.body["done"], false);
  EXPECT_EQ(call(0, "1+1").body, first.body);  // a repeated turn: the first answer
  EXPECT_EQ(call(1, "2**99").body["observation"][0]["content"],
            "error: only numbers, + - * / and parentheses are allowed");
  EXPECT_EQ(call(2, "1/0").body["observation"][0]["content"], "error: division by zero");
  auto answer = client.post(
      "step",
      {{"episode_id", id},
       {"turn", 3},
       {"message",
        {{"role", "assistant"}, {"content", "It is 56088."}, {"tool_calls", Json::array()}}}});
  ASSERT_TRUE(answer.ok) << answer.error;
  EXPECT_EQ(answer.body["done"], true);
  EXPECT_EQ(answer.body["reward"], 1.0);
  auto unknown = client.post("step", {{"episode_id", "nope"}, {"turn", 0}, {"message", {}}});
  EXPECT_FALSE(unknown.ok);
  EXPECT_NE(unknown.error.find("HTTP 404"), std::string::npos) << unknown.error;
  auto finish = client.post("finish", {{"episode_id", id}, {"reason", "turn_limit"}});
  ASSERT_TRUE(finish.ok) << finish.error;
  EXPECT_EQ(finish.body["reward"], 1.0);  // --call-reward 1: it called the calculator
}

}  // namespace
}  // namespace furlong::testing
