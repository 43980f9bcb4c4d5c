// Multi-turn episodes (train/agent_episode.h) on scripted engines and a scripted calculator env
// on 127.0.0.1, with the real Qwen3 tokenizer and chat template:
//  - the tokens of an episode (prompt, generated turns, appended observations) are exactly
//    what transformers' apply_chat_template renders for the whole conversation (oracle:
//    scripts/oracles/agent_conversation.py), loss mask 1 exactly on the generated tokens, and
//    their rollout log-probs in place (0 on observation tokens);
//  - a malformed tool call is answered with an error observation without reaching the env;
//  - an env timeout ends the episode as aborted and removed, the turn limit and the token
//    budget end it as truncated, and the metrics count all of it;
//  - a retry that succeeds keeps the episode; an oversized, non-UTF-8 or overflowing answer
//    ends only its episode, with a counted reason.
#include "rollout/agent_episode.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "agent_fixtures.h"
#include "common/test_util.h"
#include "core/files.h"
#include "rollout/rollout_engines.h"
#include "scripted_server.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::rollout {
namespace {

namespace fs = std::filesystem;
using testing::ScriptedServer;
using namespace agent_fixtures;  // NOLINT(google-build-using-namespace): the shared fixtures

// What the scripted model says, turn by turn, for one prompt.
struct Script {
  std::string question;
  std::vector<std::string> turns;  // each generated as its tokens + <|im_end|>
};

const std::vector<Script>& scripts() {
  static const std::vector<Script> s = {
      // 0: a tool call, then the answer (the env grades it 1).
      {"What is 123*456?",
       {"<think>\nI need the calculator.\n</think>\n\n" + call_text("123*456"),
        "<think>\nThe tool said 56088.\n</think>\n\nThe answer is 56088."}},
      // 1: a malformed call (no arguments), then the answer.
      {"What is 321*654?",
       {"<tool_call>\n{\"name\": \"calculator\"}\n</tool_call>",
        "<think>\nI will guess.\n</think>\n\nThe answer is 200000."}},
      // 2: a tool call the env never answers in time.
      {"What is 111*222?", {call_text("111*222"), "unused"}},
      // 3: tool calls until the turn limit (2).
      {"What is 999*888?", {call_text("999*888"), call_text("999*887"), "unused"}},
  };
  return s;
}

OrderedJson prompt_messages(const Script& s) {
  return OrderedJson::array({{{"role", "user"}, {"content", s.question}}});
}

// Engines that answer every request from the scripts, on their own thread (as real engines
// call back from theirs); a request's prompt tells which script, the count so far which turn.
// Log-probs are -(1 + turn) / 100 - position / 1000, so misplaced ones show.
class ScriptedEngines : public RolloutEngines {
 public:
  ScriptedEngines() {
    for (const auto& s : scripts()) {
      const auto text = qwen_chat().apply(prompt_messages(s), true, {{"tools", tools()}});
      prompts.push_back(qwen().encode(text));
    }
    turns_.assign(scripts().size(), 0);
  }
  ~ScriptedEngines() override {
    for (auto& t : threads_) t.join();
  }
  void submit(engine::GenerateRequest request, Done done) override {
    std::lock_guard<std::mutex> lock(mu_);
    size_t which = scripts().size();
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (request.input_ids.size() >= prompts[i].size() &&
          std::equal(prompts[i].begin(), prompts[i].end(), request.input_ids.begin()))
        which = i;
    }
    ASSERT_LT(which, scripts().size()) << "a request for no scripted prompt";
    const int turn = turns_[which]++;
    inputs[which].push_back(request.input_ids);
    seeds[which].push_back(request.sampling.seed.value_or(0));
    auto out = scripted_turn(scripts()[which].turns.at(static_cast<size_t>(turn)), turn,
                             request.sampling.max_new_tokens);
    threads_.emplace_back(
        [done = std::move(done), out = std::move(out)]() mutable { done(std::move(out)); });
  }
  void abort_all() override {}
  int64_t sync_weights(const WeightSource&, int64_t, bool) override { return 0; }
  std::string describe() const override { return "scripted"; }

  std::vector<std::vector<int64_t>> prompts;
  std::map<size_t, std::vector<std::vector<int64_t>>> inputs;  // by script
  std::map<size_t, std::vector<uint64_t>> seeds;

 private:
  std::mutex mu_;
  std::vector<int> turns_;
  std::vector<std::thread> threads_;
};

// The calculator env: a call "a*b" is answered with the product; an answer ends the episode
// with reward 1 when it holds the product of the question. Episode 2's steps take 1 s.
struct CalculatorEnv {
  std::mutex mu;
  std::map<std::string, std::vector<Json>> steps;  // by episode id
  std::map<std::string, std::string> finished;     // episode id -> reason
  std::map<std::string, std::string> product;      // episode id -> the right answer
  // Set before the run: the first attempt of every /step and /finish answers 503.
  bool flaky = false;
  std::set<std::string> seen;  // the requests (path + body) answered 503
  // Set before the run: answers the /step of episode `odd_episode` instead.
  std::string odd_episode;
  std::function<void(httplib::Response&)> odd_step;
  ScriptedServer server{[this](const httplib::Request& req, httplib::Response& res) {
    const Json body = Json::parse(req.body);
    Json reply;
    std::unique_lock<std::mutex> lock(mu);
    if (flaky && req.path != "/start" && seen.insert(req.path + req.body).second) {
      res.status = 503;
      res.set_content("busy", "text/plain");
      return;
    }
    if (req.path == "/step" && odd_step && body["episode_id"] == odd_episode) {
      odd_step(res);
      return;
    }
    if (req.path == "/start") {
      const std::string id = "ep" + std::to_string(body["sample"]["index"].get<int>());
      const std::string q = body["sample"]["prompt"][0]["content"];
      const auto star = q.find('*');
      const long a = std::stol(q.substr(8, star - 8)), b = std::stol(q.substr(star + 1));
      product[id] = std::to_string(a * b);
      reply = {{"episode_id", id}};
    } else if (req.path == "/step") {
      const std::string id = body["episode_id"];
      steps[id].push_back(body);
      if (id == "ep2") {  // slow, without holding up the other episodes
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        lock.lock();
      }
      const auto& calls = body["message"]["tool_calls"];
      if (!calls.empty()) {
        const std::string e = calls[0]["arguments"]["expression"];
        const auto star = e.find('*');
        const long v = std::stol(e.substr(0, star)) * std::stol(e.substr(star + 1));
        reply = {{"observation", {{{"role", "tool"}, {"content", std::to_string(v)}}}},
                 {"reward", nullptr},
                 {"done", false}};
      } else {
        const std::string content = body["message"]["content"];
        const bool right = content.find(product[id]) != std::string::npos;
        reply = {{"observation", Json::array()}, {"reward", right ? 1.0 : 0.0}, {"done", true}};
      }
    } else {
      finished[body["episode_id"]] = body["reason"];
      reply = {{"reward", nullptr}};
    }
    res.set_content(reply.dump(), "application/json");
  }};
};

RolloutConfig agent_options(const std::string& url) {
  RolloutConfig o;
  o.data.apply_chat_template = true;
  o.agent.agent_env_url = url;
  o.agent.agent_max_turns = 2;
  o.agent.agent_env_timeout = 0.3;
  o.agent.agent_env_max_retries = 0;
  o.agent.agent_env_concurrency = 4;
  return o;
}

std::vector<std::vector<rl::Sample>> one_sample_groups(const ScriptedEngines& engines) {
  std::vector<std::vector<rl::Sample>> groups;
  for (size_t i = 0; i < scripts().size(); ++i) {
    rl::Sample s;
    s.index = static_cast<int64_t>(i);
    s.group_index = static_cast<int64_t>(i);
    s.tokens = engines.prompts[i];
    s.status = rl::SampleStatus::kPending;
    s.prompt = Json::parse(prompt_messages(scripts()[i]).dump());
    s.metadata = {{"tools", Json::parse(tools().dump())}};
    groups.push_back({std::move(s)});
  }
  return groups;
}

// Runs every script's episode; returns the samples by index.
std::vector<rl::Sample> run_episodes(const RolloutConfig& o, ScriptedEngines& engines) {
  AgentEpisodeRunner runner(o, qwen(), qwen_chat());
  engine::SamplingParams params;
  params.max_new_tokens = 256;
  std::vector<rl::Sample> out(scripts().size());
  runner.generate_groups(engines, one_sample_groups(engines), params,
                         [&](std::vector<rl::Sample>&& g) {
                           const auto i = static_cast<size_t>(g.front().index);
                           out[i] = std::move(g.front());
                           return false;
                         });
  return out;
}

// The whole conversations of scripts 0 and 1 rendered by transformers.
const Json& oracle() {
  static const Json o = [] {
    OrderedJson cases = OrderedJson::array();
    const std::vector<std::pair<size_t, std::string>> observations = {
        {0, "56088"},
        {1, "error: malformed tool call: tool call 0 needs \"arguments\": a JSON object"}};
    for (const auto& [i, obs] : observations) {
      const auto& s = scripts()[i];
      cases.push_back({{"name", std::to_string(i)},
                       {"tools", tools()},
                       {"messages",
                        {{{"role", "user"}, {"content", s.question}},
                         {{"role", "assistant"}, {"content", s.turns[0]}},
                         {{"role", "tool"}, {"content", obs}},
                         {{"role", "assistant"}, {"content", s.turns[1]}}}}});
    }
    const auto dir = testing::cached_oracle(
        "agent_conversation", "oracles/agent_conversation.py", cases.dump(),
        [&](const fs::path& d) {
          std::ofstream(d / "cases.json") << cases.dump();
          return std::vector<std::string>{"--tokenizer", testing::tokenizer_dir("qwen3").string(),
                                          "--cases",     (d / "cases.json").string(),
                                          "--out",       (d / "out.json").string()};
        });
    return Json::parse(read_file(dir / "out.json"));
  }();
  return o;
}

// Mask 1 and the scripted log-probs exactly on the two generated turns (the response's first
// and last tokens), mask 0 and log-prob 0 on the observation between them.
void expect_two_turn_layout(const rl::Sample& s, const std::string& turn0,
                            const std::string& turn1) {
  std::vector<std::vector<int64_t>> turns;
  for (const auto* text : {&turn0, &turn1}) {
    turns.push_back(qwen().encode(*text));
    turns.back().push_back(im_end());
  }
  const auto n = static_cast<size_t>(s.response_length);
  ASSERT_EQ(s.loss_mask.size(), n);
  ASSERT_EQ(s.rollout_log_probs.size(), n);
  ASSERT_GT(n, turns[0].size() + turns[1].size());
  const size_t obs = n - turns[0].size() - turns[1].size();
  const size_t start = static_cast<size_t>(s.prompt_length());
  for (size_t p = 0; p < n; ++p) {
    const bool first = p < turns[0].size(), second = p >= turns[0].size() + obs;
    const size_t in_turn = first ? p : p - turns[0].size() - obs;
    if (first || second) {
      const auto& ids = turns[first ? 0 : 1];
      EXPECT_EQ(s.tokens[start + p], ids[in_turn]) << "position " << p;
      EXPECT_EQ(s.loss_mask[p], 1.0f) << "position " << p;
      EXPECT_FLOAT_EQ(s.rollout_log_probs[p],
                      -(first ? 1.0f : 2.0f) / 100.0f - static_cast<float>(in_turn) / 1000.0f);
    } else {
      EXPECT_EQ(s.loss_mask[p], 0.0f) << "position " << p;
      EXPECT_EQ(s.rollout_log_probs[p], 0.0f) << "position " << p;
    }
  }
  EXPECT_EQ(s.metadata["agent"]["masked_tokens"].get<size_t>(), obs);
  EXPECT_EQ(s.weight_versions.size(), n);  // one per response token, observations included
}

TEST(AgentEpisodes, TokensMasksAndLogProbsMatchTheWholeConversation) {
  CalculatorEnv env;
  ScriptedEngines engines;
  auto samples = run_episodes(agent_options(env.server.url()), engines);
  const int64_t newline = qwen().encode("\n").at(0);
  for (size_t i : {0u, 1u}) {
    const auto& s = samples[i];
    SCOPED_TRACE("script " + std::to_string(i));
    EXPECT_EQ(s.status, rl::SampleStatus::kCompleted);
    EXPECT_EQ(s.metadata["agent"]["end_reason"], "done");
    EXPECT_EQ(s.metadata["agent"]["turns"], 2);
    // The episode ends on the model's <|im_end|>; the template closes the message with "\n".
    auto want = oracle()[std::to_string(i)]["ids"].get<std::vector<int64_t>>();
    ASSERT_EQ(want.back(), newline);
    want.pop_back();
    EXPECT_EQ(s.tokens, want) << "furlong: " << qwen().decode(s.tokens)
                              << "\ntransformers: " << oracle()[std::to_string(i)]["text"];
    expect_two_turn_layout(s, scripts()[i].turns[0], scripts()[i].turns[1]);
    // The second turn was generated from exactly the tokens the sample holds before it.
    ASSERT_EQ(engines.inputs[i].size(), 2u);
    const auto& second_input = engines.inputs[i][1];
    EXPECT_TRUE(std::equal(second_input.begin(), second_input.end(), s.tokens.begin()));
    EXPECT_NE(engines.seeds[i][0], engines.seeds[i][1]);          // per-turn seeds
    EXPECT_EQ(s.response, scripts()[i].turns[1] + "<|im_end|>");  // the final turn, graded
  }
  EXPECT_EQ(samples[0].metadata["agent"]["reward"], 1.0);
  EXPECT_EQ(samples[0].raw_reward, 1.0);
  EXPECT_EQ(samples[1].metadata["agent"]["reward"], 0.0);  // 321*654 = 209934
}

TEST(AgentEpisodes, MalformedCallsTimeoutsAndLimitsEndEpisodesAndAreCounted) {
  CalculatorEnv env;
  ScriptedEngines engines;
  auto samples = run_episodes(agent_options(env.server.url()), engines);
  // The malformed call never reached the env: only the answer turn (turn index 1) did.
  ASSERT_EQ(env.steps["ep1"].size(), 1u);
  EXPECT_EQ(env.steps["ep1"][0]["turn"], 1);
  EXPECT_EQ(samples[1].metadata["agent"]["malformed"], 1);
  EXPECT_EQ(samples[1].metadata["agent"]["tool_calls"], 0);
  // The env sent the tool call of turn 0 as parsed.
  EXPECT_EQ(env.steps["ep0"][0]["message"]["tool_calls"].dump(),
            R"([{"arguments":{"expression":"123*456"},"name":"calculator"}])");
  // Episode 2: the env did not answer within 0.3 s: aborted, out of the loss, no /finish.
  const auto& timed_out = samples[2];
  EXPECT_EQ(timed_out.status, rl::SampleStatus::kAborted);
  EXPECT_TRUE(timed_out.remove);
  EXPECT_EQ(timed_out.metadata["agent"]["end_reason"], "env_timeout");
  EXPECT_EQ(timed_out.metadata["agent"]["timeouts"], 1);
  EXPECT_EQ(timed_out.metadata["agent"]["env_errors"], 1);
  EXPECT_EQ(env.finished.count("ep2"), 0u);
  // Episode 3: two tool calls, then the turn limit: truncated, the env told so; the
  // observation of the last call is not appended (the sequence ends on generated tokens).
  const auto& limited = samples[3];
  EXPECT_EQ(limited.status, rl::SampleStatus::kTruncated);
  EXPECT_EQ(limited.metadata["agent"]["end_reason"], "turn_limit");
  EXPECT_EQ(limited.metadata["agent"]["tool_calls"], 2);
  EXPECT_EQ(env.finished["ep3"], "turn_limit");
  EXPECT_EQ(limited.loss_mask.back(), 1.0f);
  EXPECT_EQ(limited.tokens.back(), im_end());

  // Rewards: the env's where given; the others have none (no reward function configured).
  auto reward = with_env_rewards(nullptr);
  std::vector<rl::Sample*> ptrs;
  for (auto& s : samples) ptrs.push_back(&s);
  reward(ptrs);
  EXPECT_EQ(samples[0].raw_reward, 1.0);
  EXPECT_EQ(samples[3].raw_reward, 0.0);
  EXPECT_TRUE(samples[3].metadata["agent"]["reward_missing"].get<bool>());
  EXPECT_FALSE(samples[2].metadata["agent"].contains("reward_missing"));

  std::map<std::string, double> m;
  add_agent_metrics(samples, m);
  EXPECT_DOUBLE_EQ(m["rollout/agent/turns"], (2 + 2 + 1 + 2) / 4.0);
  EXPECT_DOUBLE_EQ(m["rollout/agent/tool_calls"], (1 + 0 + 1 + 2) / 4.0);
  EXPECT_EQ(m["rollout/agent/malformed_tool_calls"], 1.0);
  EXPECT_EQ(m["rollout/agent/env_errors"], 1.0);
  EXPECT_EQ(m["rollout/agent/timeouts"], 1.0);
  EXPECT_EQ(m["rollout/agent/missing_reward"], 1.0);  // episode 3 (2 is an env error)
  double masked = 0, response = 0;
  for (const auto& s : samples) {
    for (float v : s.loss_mask) masked += v == 0.0f ? 1 : 0;
    response += static_cast<double>(s.response_length);
  }
  EXPECT_GT(masked, 0);
  EXPECT_DOUBLE_EQ(m["rollout/agent/masked_token_share"], masked / response);
}

// An env answering 503 once, then 200, keeps its episodes: the retry's success counts, on
// /step and on /finish, and the failed attempt's error is not kept.
TEST(AgentEpisodes, ARetryThatSucceedsKeepsTheEpisode) {
  CalculatorEnv env;
  env.flaky = true;
  ScriptedEngines engines;
  auto o = agent_options(env.server.url());
  o.agent.agent_env_max_retries = 1;
  auto samples = run_episodes(o, engines);
  for (size_t i : {0u, 1u, 3u}) {
    SCOPED_TRACE("script " + std::to_string(i));
    EXPECT_NE(samples[i].status, rl::SampleStatus::kAborted);
    EXPECT_FALSE(samples[i].remove);
    EXPECT_EQ(samples[i].metadata["agent"]["env_errors"], 0)
        << samples[i].metadata["agent"].value("error", "");
  }
  EXPECT_EQ(samples[0].metadata["agent"]["end_reason"], "done");
  EXPECT_EQ(samples[0].raw_reward, 1.0);
  EXPECT_EQ(samples[3].metadata["agent"]["end_reason"], "turn_limit");  // after /finish's retry
  EXPECT_EQ(env.finished["ep3"], "turn_limit");
  EXPECT_GE(env.seen.size(), 5u);  // every /step and /finish failed once
}

// An oversized answer ends the episode with its own counted reason, an answer that is
// not UTF-8 ends it without ending the run (the record dumps as JSON), and a reward that
// training would turn into inf is refused.
TEST(AgentEpisodes, OversizedNonUtf8AndOverflowingAnswersEndOnlyTheirEpisode) {
  struct Case {
    const char* what;
    std::function<void(httplib::Response&)> answer;
    std::string end_reason;
    double oversized;
  };
  const Case cases[] = {
      {"oversized",
       [](httplib::Response& res) { res.set_content(std::string(4096, ' '), "application/json"); },
       "env_response_too_large", 1},
      {"not UTF-8",
       [](httplib::Response& res) { res.set_content("\xff\xfe{\xc3", "application/json"); },
       "env_error", 0},
      {"reward 1e308",
       [](httplib::Response& res) {
         res.set_content(R"({"done": true, "reward": 1e308})", "application/json");
       },
       "env_error", 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    CalculatorEnv env;
    env.odd_episode = "ep0";
    env.odd_step = c.answer;
    ScriptedEngines engines;
    auto o = agent_options(env.server.url());
    o.agent.agent_env_max_response_bytes = 1024;
    auto samples = run_episodes(o, engines);
    const auto& s = samples[0];
    EXPECT_EQ(s.status, rl::SampleStatus::kAborted);
    EXPECT_TRUE(s.remove);
    EXPECT_EQ(s.metadata["agent"]["end_reason"], c.end_reason);
    EXPECT_NO_THROW(s.metadata.dump());  // strict: every string valid UTF-8
    EXPECT_EQ(samples[1].metadata["agent"]["end_reason"], "done");  // the others go on
    std::map<std::string, double> m;
    add_agent_metrics(samples, m);
    EXPECT_EQ(m["rollout/agent/oversized_responses"], c.oversized);
    EXPECT_EQ(m["rollout/agent/env_errors"], 2.0);  // and episode 2's timeout
  }
}

TEST(AgentEpisodes, TheTokenBudgetEndsAnEpisodeBeforeAnObservationThatDoesNotFit) {
  CalculatorEnv env;
  ScriptedEngines engines;
  auto o = agent_options(env.server.url());
  // Room for script 0's first turn and a few tokens, not for the observation and a second turn.
  const auto first = qwen().encode(scripts()[0].turns[0]).size() + 1;
  o.agent.agent_max_episode_tokens = static_cast<int64_t>(first) + 5;
  auto samples = run_episodes(o, engines);
  const auto& s = samples[0];
  EXPECT_EQ(s.status, rl::SampleStatus::kTruncated);
  EXPECT_EQ(s.metadata["agent"]["end_reason"], "token_budget");
  EXPECT_EQ(static_cast<size_t>(s.response_length), first);  // the first turn only
  EXPECT_EQ(env.finished["ep0"], "token_budget");
  // The second turn of script 1 (after the malformed call's error observation) had to fit the
  // budget that was left: it was cut there, as a length finish.
  EXPECT_LE(samples[1].response_length, o.agent.agent_max_episode_tokens);
}

TEST(AgentOptions, BadValuesNameTheirFlag) {
  struct Case {
    std::function<void(RolloutConfig&)> set;
    const char* flag;
  };
  const Case cases[] = {
      {[](RolloutConfig& o) { o.agent.agent_max_turns = 0; }, "--agent-max-turns"},
      {[](RolloutConfig& o) { o.agent.agent_max_episode_tokens = 0; },
       "--agent-max-episode-tokens"},
      {[](RolloutConfig& o) { o.agent.agent_env_timeout = 0; }, "--agent-env-timeout"},
      {[](RolloutConfig& o) { o.agent.agent_env_max_retries = -1; }, "--agent-env-max-retries"},
      {[](RolloutConfig& o) { o.agent.agent_env_concurrency = 0; }, "--agent-env-concurrency"},
      {[](RolloutConfig& o) { o.agent.agent_env_max_response_bytes = 0; },
       "--agent-env-max-response-bytes"},
      {[](RolloutConfig& o) { o.agent.agent_env_url = "localhost:80"; }, "--agent-env-url"},
      {[](RolloutConfig& o) { o.engine.record_routing = true; }, "--use-rollout-routing-replay"},
      {[](RolloutConfig& o) { o.rollout.partial_rollout = true; }, "--partial-rollout"},
  };
  for (const auto& c : cases) {
    RolloutConfig o = agent_options("http://127.0.0.1:1");
    c.set(o);
    const std::string error = testing::error_of([&] { validate_agent_options(o); });
    EXPECT_NE(error.find(c.flag), std::string::npos) << error;
  }
  RolloutConfig fine = agent_options("http://127.0.0.1:1");
  validate_agent_options(fine);  // no error
}

}  // namespace
}  // namespace furlong::rollout

namespace furlong::rollout {
namespace {

// The turns of an OpenEnv episode against examples/openenv/sum_env.py: turn 0 answers wrong ("It is
// 0."), turn 1 the sum of the last "What is a + b?" in its input.
std::string sum_answer(const std::vector<int64_t>& input, int turn) {
  if (turn == 0) return "It is 0.";
  static const std::regex question(R"(What is (\d+) \+ (\d+)\?)");
  const std::string text = qwen().decode(input);
  std::string sum = "?";
  for (auto it = std::sregex_iterator(text.begin(), text.end(), question);
       it != std::sregex_iterator(); ++it)
    sum = std::to_string(std::stoi((*it)[1]) + std::stoi((*it)[2]));
  return "<think>\nAdding.\n</think>\n\nIt is " + sum + ".";
}

// An OpenEnv episode over a WebSocket session: the reset observation joins the prompt as a user
// message, a wrong answer's observation is appended with mask 0, the right one ends it with the
// summed reward; the tokens are transformers' rendering of the whole conversation.
TEST(AgentEpisodes, AnOpenEnvEpisodeHoldsTheConversationTransformersRenders) {
  testing::ScriptServer env(testing::source_dir() / "examples/openenv/sum_env.py",
                            {"--attempts", "2"}, testing::scratch_dir());
  ASSERT_GT(env.port(), 0) << "the example env did not start";
  RolloutConfig o = agent_options(env.url());
  o.agent.agent_env_protocol = "openenv";
  o.agent.agent_env_observation_key = "prompt";
  o.agent.agent_env_timeout = 10;
  const OrderedJson prompt =
      OrderedJson::parse(R"([{"role": "user", "content": "Solve the task you are given."}])");
  rl::Sample s;
  s.status = rl::SampleStatus::kPending;
  s.prompt = Json::parse(prompt.dump());
  s.tokens = qwen().encode(qwen_chat().apply(prompt, true));
  TextEngines engines(sum_answer);
  AgentEpisodeRunner runner(o, qwen(), qwen_chat());
  engine::SamplingParams params;
  params.max_new_tokens = 64;
  rl::Sample got;
  std::vector<std::vector<rl::Sample>> groups{{std::move(s)}};
  runner.generate_groups(engines, std::move(groups), params, [&](std::vector<rl::Sample>&& g) {
    got = std::move(g.front());
    return false;
  });
  ASSERT_EQ(engines.texts.size(), 2u);
  EXPECT_EQ(got.metadata["agent"]["end_reason"], "done");
  EXPECT_EQ(got.raw_reward, 1.0);  // 0 for the wrong answer + 1 for the right one
  const auto& messages = got.metadata["agent"]["messages"];
  ASSERT_GE(messages.size(), 2u);
  const std::string task = messages[1]["content"];
  EXPECT_NE(task.find("What is "), std::string::npos) << task;
  OrderedJson whole = prompt;
  whole.push_back({{"role", "user"}, {"content", task}});
  // The prompt the first turn was generated from: the row's messages and the reset observation.
  EXPECT_EQ(engines.inputs[0], qwen().encode(qwen_chat().apply(whole, true)));
  whole.push_back({{"role", "assistant"}, {"content", engines.texts[0]}});
  whole.push_back({{"role", "user"}, {"content", "wrong, 1 attempt(s) left"}});
  whole.push_back({{"role", "assistant"}, {"content", engines.texts[1]}});
  const OrderedJson cases = OrderedJson::array({{{"name", "openenv"}, {"messages", whole}}});
  const auto dir = testing::cached_oracle(
      "agent_conversation", "oracles/agent_conversation.py", cases.dump(), [&](const fs::path& d) {
        std::ofstream(d / "cases.json") << cases.dump();
        return std::vector<std::string>{"--tokenizer", testing::tokenizer_dir("qwen3").string(),
                                        "--cases",     (d / "cases.json").string(),
                                        "--out",       (d / "out.json").string()};
      });
  const Json want_json = Json::parse(read_file(dir / "out.json"))["openenv"];
  auto want = want_json["ids"].get<std::vector<int64_t>>();
  want.pop_back();  // the template's "\n" after the final <|im_end|>
  EXPECT_EQ(got.tokens, want) << "furlong: " << qwen().decode(got.tokens)
                              << "\ntransformers: " << want_json["text"];
  expect_two_turn_layout(got, engines.texts[0], engines.texts[1]);
}

}  // namespace
}  // namespace furlong::rollout
