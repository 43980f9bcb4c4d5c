// OpenEnv environments (--agent-env-protocol openenv / openenv-http, rollout/env_session.h):
// the WebSocket handshake's accept value (RFC 6455's example and SHA-1 over several blocks
// against Python's hashlib), the result mapping (summed rewards, observation text, errors that
// name the field), and whole sessions against the example env (examples/openenv/sum_env.py)
// over both forms: the opening observation, a wrong then a right answer, the group's seed giving
// the group's task, pings answered while a session is idle, and each fault (a closed connection,
// an error message, an answer that never comes, an oversized answer, a frame with an impossible
// length, a full server, a dead port) ending the session with an error that says what happened.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <regex>
#include <string>
#include <thread>

#include "common/test_util.h"
#include "rl/sample.h"
#include "rollout/env_session.h"
#include "rollout/websocket.h"

namespace furlong::rollout {
namespace {

using testing::ScriptServer;

TEST(WebSocket, AcceptValueIsSha1OfTheKeyAndTheGuid) {
  EXPECT_EQ(websocket_accept_for("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  // A key long enough that the SHA-1 input spans three 64-byte blocks, against hashlib.
  const std::string key(100, 'k');
  auto r =
      testing::run_command(testing::python().string() +
                           " -c \"import base64,hashlib;print(base64.b64encode(hashlib.sha1(b'" +
                           key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest()).decode())\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(websocket_accept_for(key) + "\n", r.output);
}

TEST(OpenEnvResult, RewardsSumAndObservationsBecomeUserMessages) {
  std::optional<double> total;
  std::string error;
  auto a = parse_openenv_result(
      {{"observation", {{"prompt", "p"}}}, {"reward", nullptr}, {"done", false}}, "prompt", total,
      "step", error);
  ASSERT_TRUE(a) << error;
  EXPECT_FALSE(total);  // no reward yet
  EXPECT_EQ(a->observation, OrderedJson::parse(R"([{"role":"user","content":"p"}])"));
  auto b = parse_openenv_result({{"observation", {{"x", 1}}}, {"reward", 0.5}, {"done", false}}, "",
                                total, "step", error);
  ASSERT_TRUE(b) << error;
  EXPECT_EQ(b->observation[0]["content"], R"({"x":1})");  // no key: the whole object
  auto c = parse_openenv_result({{"reward", 2}, {"done", true}}, "prompt", total, "step", error);
  ASSERT_TRUE(c) << error;
  EXPECT_EQ(c->reward.value_or(-1), 2.5);
  EXPECT_TRUE(c->observation.empty());
}

TEST(OpenEnvResult, BadAnswersNameWhatIsWrong) {
  std::optional<double> total;
  std::string error;
  auto expect_error = [&](const Json& data, const std::string& key, const std::string& want) {
    error.clear();
    EXPECT_FALSE(parse_openenv_result(data, key, total, "ws://env (step)", error)) << data.dump();
    EXPECT_NE(error.find(want), std::string::npos) << error;
    EXPECT_NE(error.find("ws://env (step)"), std::string::npos) << error;
  };
  expect_error({{"observation", Json::object()}}, "", "\"done\" must be true or false");
  expect_error({{"observation", {{"text", 1}}}, {"done", false}}, "prompt",
               "no string field \"prompt\" (--agent-env-observation-key)");
  expect_error({{"observation", "text"}, {"done", false}}, "", "must be a JSON object");
  expect_error({{"reward", "1"}, {"done", true}}, "", "\"reward\" must be null or a finite number");
  expect_error({{"reward", 1e300}, {"done", true}}, "",
               "\"reward\" must be null or a finite number");
}

AgentOptions openenv_options(const std::string& protocol, const std::string& url,
                             double timeout_s = 10) {
  AgentOptions a;
  a.agent_env_url = url;
  a.agent_env_protocol = protocol;
  a.agent_env_observation_key = "prompt";
  a.agent_env_timeout = timeout_s;
  a.agent_env_max_retries = 1;
  return a;
}

rl::Sample sample(int64_t index) {
  rl::Sample s;
  s.index = index;
  return s;
}

// a + b from the example env's prompt "What is a + b? Reply with the number."
std::string right_answer(const std::string& prompt) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(prompt, m, std::regex(R"((\d+) \+ (\d+))"))) << prompt;
  return m.size() == 3 ? std::to_string(std::stoi(m[1]) + std::stoi(m[2])) : "";
}

void play_an_episode(const std::string& protocol) {
  SCOPED_TRACE(protocol);
  ScriptServer env(testing::source_dir() / "examples/openenv/sum_env.py", {"--attempts", "2"},
                   testing::scratch_dir());
  ASSERT_GT(env.port(), 0) << "the example env did not start";
  EnvSessionFactory factory(openenv_options(protocol, env.url()));
  auto session = factory.open();
  EXPECT_FALSE(session->parses_tool_calls());
  auto start = session->start(sample(0), 7);
  ASSERT_TRUE(start.ok()) << start.error;
  ASSERT_EQ(start.step.observation.size(), 1u);
  EXPECT_EQ(start.step.observation[0]["role"], "user");
  const std::string prompt = start.step.observation[0]["content"];
  EXPECT_FALSE(start.step.reward);  // a reset's reward is not part of the return
  // The same seed (a group's) gives the same task in another session.
  auto again = factory.open()->start(sample(1), 7);
  ASSERT_TRUE(again.ok()) << again.error;
  EXPECT_EQ(again.step.observation[0]["content"], prompt);

  auto wrong = session->step(0, Json::object(), "It is -1.");
  ASSERT_TRUE(wrong.ok()) << wrong.error;
  EXPECT_FALSE(wrong.step.done);
  EXPECT_EQ(wrong.step.reward.value_or(-1), 0.0);
  EXPECT_EQ(wrong.step.observation[0]["content"], "wrong, 1 attempt(s) left");
  auto right = session->step(1, Json::object(), "It is " + right_answer(prompt) + ".");
  ASSERT_TRUE(right.ok()) << right.error;
  EXPECT_TRUE(right.step.done);
  EXPECT_EQ(right.step.reward.value_or(-1), 1.0);  // 0 + 1
}

TEST(OpenEnvSessions, AWebSocketEpisodeAgainstTheExampleEnv) {
  play_an_episode("openenv");
}
TEST(OpenEnvSessions, AnHttpEpisodeAgainstTheExampleEnv) {
  play_an_episode("openenv-http");
}

// Opens a session against the env started with `fault`, resets and steps once; the step's answer
// (and in `seconds` how long the step took).
EnvAnswer step_with_fault(const std::string& fault, double timeout_s, double* seconds = nullptr) {
  ScriptServer env(testing::source_dir() / "examples/openenv/sum_env.py", {"--fault", fault},
                   testing::scratch_dir());
  EXPECT_GT(env.port(), 0);
  EnvSessionFactory factory(openenv_options("openenv", env.url(), timeout_s));
  auto session = factory.open();
  auto start = session->start(sample(0), 1);
  EXPECT_TRUE(start.ok()) << start.error;
  const auto t0 = std::chrono::steady_clock::now();
  auto answer = session->step(0, Json::object(), "3");
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return answer;
}

TEST(OpenEnvSessions, FaultsEndTheSessionWithAnErrorThatSaysWhatHappened) {
  auto closed = step_with_fault("close-on-step", 10);
  EXPECT_FALSE(closed.ok());
  EXPECT_NE(closed.error.find("closed"), std::string::npos) << closed.error;
  EXPECT_NE(closed.error.find("ws://127.0.0.1:"), std::string::npos) << closed.error;
  auto refused = step_with_fault("error-on-step", 10);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.error.find("the env answered an error"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("EXECUTION_ERROR"), std::string::npos) << refused.error;
  double waited = 0;
  auto hung = step_with_fault("hang-on-step", 1.0, &waited);
  EXPECT_FALSE(hung.ok());
  EXPECT_TRUE(hung.reply.timed_out) << hung.error;
  EXPECT_NE(hung.error.find("--agent-env-timeout"), std::string::npos) << hung.error;
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 3.0);  // the 1 s bound, and some slack for a loaded machine
  auto oversized = step_with_fault("oversized-on-step", 10);  // over the 8 MiB default bound
  EXPECT_TRUE(oversized.reply.too_large) << oversized.error;
  EXPECT_NE(oversized.error.find("--agent-env-max-response-bytes"), std::string::npos)
      << oversized.error;
  auto bad = step_with_fault("bad-length-on-step", 10, &waited);
  EXPECT_NE(bad.error.find("a frame length with its top bit set"), std::string::npos) << bad.error;
  EXPECT_LT(waited, 3.0);  // refused at its header, not read until the deadline
}

// A server that drops sessions leaving a ping unanswered (uvicorn's rule, here every 3 s): a
// session idle for 7.5 s (a long turn) is still open, because the keepalive answers.
TEST(OpenEnvSessions, AnIdleSessionAnswersPingsAndStaysOpen) {
  ScriptServer env(testing::source_dir() / "examples/openenv/sum_env.py", {"--ping-interval", "3"},
                   testing::scratch_dir());
  ASSERT_GT(env.port(), 0);
  EnvSessionFactory factory(openenv_options("openenv", env.url()));
  auto session = factory.open();
  auto start = session->start(sample(0), 1);
  ASSERT_TRUE(start.ok()) << start.error;
  std::this_thread::sleep_for(std::chrono::milliseconds(7500));
  auto step = session->step(0, Json::object(), "0");
  EXPECT_TRUE(step.ok()) << step.error;
}

TEST(OpenEnvSessions, AFullServerAndADeadPortFailTheStart) {
  std::optional<ScriptServer> env;
  env.emplace(testing::source_dir() / "examples/openenv/sum_env.py",
              std::vector<std::string>{"--max-sessions", "1"}, testing::scratch_dir());
  ASSERT_GT(env->port(), 0);
  EnvSessionFactory factory(openenv_options("openenv", env->url()));
  auto first = factory.open();
  ASSERT_TRUE(first->start(sample(0), 1).ok());
  auto second = factory.open()->start(sample(1), 1);
  EXPECT_FALSE(second.ok());
  EXPECT_NE(second.error.find("CAPACITY_REACHED"), std::string::npos) << second.error;
  first->finish("turn_limit");  // closes the first: a session is free again
  for (int i = 0;; ++i) {       // the server notices the close asynchronously (<= 5 s)
    auto third = factory.open()->start(sample(2), 1);
    if (third.ok()) break;
    ASSERT_LT(i, 50) << third.error;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string dead = env->url();
  env.reset();  // nothing listens on the port now
  auto refused = EnvSessionFactory(openenv_options("openenv", dead)).open()->start(sample(3), 1);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.error.find("connect failed"), std::string::npos) << refused.error;
  EXPECT_NE(refused.error.find("after 2 attempt(s)"), std::string::npos) << refused.error;
}

TEST(OpenEnvSessions, BadProtocolsAndUrlsNameTheirFlag) {
  auto error_of = [](const AgentOptions& a) {
    try {
      EnvSessionFactory f(a);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto a = openenv_options("openenv", "wss://h:1");
  EXPECT_NE(error_of(a).find("--agent-env-url"), std::string::npos);
  a = openenv_options("gym", "http://h:1");
  EXPECT_NE(error_of(a).find("--agent-env-protocol must be furlong, openenv or openenv-http"),
            std::string::npos);
  a = openenv_options("openenv", "ws://h:99999");
  EXPECT_NE(error_of(a).find("is not a number in 1..65535"), std::string::npos);
  a = openenv_options("openenv", "ws://127.0.0.1:1/env");
  a.agent_env_action_key.clear();
  EXPECT_NE(error_of(a).find("--agent-env-action-key"), std::string::npos);
}

}  // namespace
}  // namespace furlong::rollout
