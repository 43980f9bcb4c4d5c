// Harness sessions (--agent-harness-url; rollout/harness_conversation.h, harness_episode.cpp)
// on scripted engines with the real Qwen3 tokenizer and chat template:
//  - HarnessConversation extends a session only with its own history (tool calls compared by
//    value, ids ignored), and the tokens it extends with are the whole conversation's rendering;
//    anything else diverges;
//  - the example harness (examples/agent_harness/calculator_agent.py, the unmodified `openai`
//    package) runs sessions whose samples are transformers' rendering of the harness's final
//    conversation, with loss mask 1 and the engine's log-probs exactly on the generated tokens;
//  - a harness that crashes, hangs, gives a bad reward or edits its history ends only its own
//    session, with a counted reason; the turn and token limits end a session as truncated;
//  - session requests are checked: the key, the fields, unknown sessions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "agent_fixtures.h"
#include "core/files.h"
#include "data/tool_calls.h"
#include "rollout/agent_episode.h"
#include "rollout/harness_conversation.h"
#include "scripted_server.h"

namespace furlong::rollout {
namespace {

namespace fs = std::filesystem;
using namespace agent_fixtures;  // NOLINT(google-build-using-namespace): the shared fixtures

OrderedJson user(const std::string& content) {
  return {{"role", "user"}, {"content", content}};
}

HarnessChatRequest chat(const OrderedJson& messages, const OrderedJson& with_tools = tools()) {
  HarnessChatRequest r;
  r.messages = messages;
  r.tools = with_tools;
  return r;
}

const std::string& call_turn() {
  static const std::string t =
      "<think>\nI need the calculator.\n</think>\n\n" + call_text("123*456");
  return t;
}

std::vector<int64_t> turn_ids(const std::string& text) {
  auto ids = qwen().encode(text);
  ids.push_back(im_end());
  return ids;
}

TEST(HarnessConversation, ExtendsTheSessionWithTheTokensTheWholeConversationRenders) {
  HarnessConversation c(qwen_chat(), qwen(), OrderedJson::object());
  OrderedJson messages = OrderedJson::array({user("What is 123*456?")});
  const auto first = c.next(chat(messages));
  EXPECT_TRUE(first.restart);
  EXPECT_FALSE(first.diverged);
  EXPECT_EQ(first.ids, qwen().encode(qwen_chat().apply(messages, true, {{"tools", tools()}})));
  const auto answer =
      harness_assistant_message(data::parse_tool_calls(call_turn()), call_turn(), 0);
  EXPECT_EQ(answer["content"], "<think>\nI need the calculator.\n</think>\n\n");
  EXPECT_EQ(answer["tool_calls"][0]["id"], "call_0_0");
  // Python's json.dumps form: what the template renders for an arguments object.
  EXPECT_EQ(answer["tool_calls"][0]["function"]["arguments"], "{\"expression\": \"123*456\"}");
  c.record_turn(answer, call_turn(), call_turn() + "<|im_end|>");

  messages.push_back(answer);
  messages.push_back({{"role", "tool"}, {"tool_call_id", "call_0_0"}, {"content", "56088"}});
  const auto second = c.next(chat(messages));
  EXPECT_FALSE(second.restart);
  std::vector<int64_t> all = first.ids;
  for (auto id : turn_ids(call_turn())) all.push_back(id);
  all.insert(all.end(), second.ids.begin(), second.ids.end());
  const OrderedJson whole = OrderedJson::array(
      {messages[0], {{"role", "assistant"}, {"content", call_turn()}}, messages[2]});
  EXPECT_EQ(all, qwen().encode(qwen_chat().apply(whole, true, {{"tools", tools()}})));

  // The same turn as a harness may echo it: another call id, arguments as an object, no type.
  OrderedJson echoed = messages;
  echoed[1]["tool_calls"][0] = {
      {"id", "x"},
      {"function", {{"name", "calculator"}, {"arguments", {{"expression", "123*456"}}}}}};
  EXPECT_FALSE(c.next(chat(echoed)).restart);
  // Divergent requests: nothing new, an edited turn, other tools, an assistant message added.
  OrderedJson edited = messages;
  edited[1]["content"] = "I will use the calculator.";
  OrderedJson added = messages;
  added.push_back({{"role", "assistant"}, {"content", "prefilled"}});
  for (const auto& request : {chat(OrderedJson::array({messages[0], messages[1]})), chat(edited),
                              chat(messages, OrderedJson()), chat(added)}) {
    const auto next = c.next(request);
    EXPECT_TRUE(next.restart && next.diverged) << request.messages.dump();
    EXPECT_EQ(next.ids, qwen().encode(qwen_chat().apply(
                            request.messages, true,
                            request.tools.is_null() ? OrderedJson::object()
                                                    : OrderedJson{{"tools", request.tools}})));
  }
}

TEST(HarnessConversation, RequestsASessionCannotHonourNameTheirField) {
  const OrderedJson messages = OrderedJson::array({user("hi")});
  const std::vector<std::pair<OrderedJson, std::string>> bad = {
      {{{"messages", OrderedJson::array()}}, "\"messages\""},
      {{{"messages", messages}, {"n", 2}}, "\"n\""},
      {{{"messages", messages}, {"stream", true}}, "\"stream\""},
      {{{"messages", messages}, {"tool_choice", "required"}}, "\"tool_choice\""},
      {{{"messages", messages}, {"max_tokens", 0}}, "\"max_tokens\""},
      {{{"messages", messages}, {"tools", "calculator"}}, "\"tools\""},
      {{{"messages", messages}, {"logprobs", 3}}, "\"logprobs\""},
  };
  for (const auto& [body, field] : bad) {
    std::string error;
    EXPECT_FALSE(parse_harness_chat(body, error)) << body.dump();
    EXPECT_NE(error.find(field), std::string::npos) << error;
  }
  std::string error;
  const auto ok = parse_harness_chat({{"messages", messages},
                                      {"temperature", 0.3},
                                      {"max_completion_tokens", 7},
                                      {"logprobs", true}},
                                     error);
  ASSERT_TRUE(ok) << error;
  EXPECT_EQ(ok->max_tokens, 7);
  EXPECT_TRUE(ok->logprobs);
  // Text parts are joined; other parts are refused with the message's index.
  HarnessConversation c(qwen_chat(), qwen(), OrderedJson::object());
  const OrderedJson parts = OrderedJson::array(
      {{{"role", "user"},
        {"content",
         {{{"type", "text"}, {"text", "What is "}}, {{"type", "text"}, {"text", "2?"}}}}}});
  EXPECT_EQ(c.next(chat(parts)).ids,
            qwen().encode(qwen_chat().apply(OrderedJson::array({user("What is 2?")}), true,
                                            {{"tools", tools()}})));
  const OrderedJson image = OrderedJson::array(
      {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}});
  EXPECT_THROW(c.next(chat(image)), Error);
}

TEST(HarnessOptions, BadValuesNameTheirFlag) {
  const std::vector<std::pair<std::function<void(RolloutConfig&)>, std::string>> cases = {
      {[](RolloutConfig& o) { o.agent.agent_harness_url = "localhost:80"; }, "--agent-harness-url"},
      {[](RolloutConfig& o) { o.agent.agent_env_url = "http://127.0.0.1:2"; }, "--agent-env-url"},
      {[](RolloutConfig& o) { o.agent.agent_session_timeout = 0; }, "--agent-session-timeout"},
      {[](RolloutConfig& o) { o.agent.agent_harness_on_divergence = "split"; },
       "--agent-harness-on-divergence"},
      {[](RolloutConfig& o) { o.agent.agent_session_host = ""; }, "--agent-session-host"},
      {[](RolloutConfig& o) { o.agent.agent_session_host = "0.0.0.0"; }, "--agent-session-host"},
      {[](RolloutConfig& o) { o.agent.agent_max_turns = 0; }, "--agent-max-turns"},
  };
  for (const auto& [set, flag] : cases) {
    RolloutConfig o;
    o.agent.agent_harness_url = "http://127.0.0.1:1/run";
    set(o);
    const std::string error = testing::error_of([&] { validate_agent_options(o); });
    EXPECT_NE(error.find(flag), std::string::npos) << error;
  }
  RolloutConfig fine;
  fine.agent.agent_harness_url = "http://127.0.0.1:1/run";
  validate_agent_options(fine);  // no error
}

// The scripted policy: a question "What is a*b?" gets a calculator call; after a tool response
// it answers with the tool's result; anything else gets "I do not know.".
std::string calculator_policy(const std::vector<int64_t>& input, int) {
  const std::string text = qwen().decode(input);
  const auto at = text.rfind("<tool_response>\n");
  if (at != std::string::npos) {
    const auto from = at + std::string("<tool_response>\n").size();
    const std::string result = text.substr(from, text.find("\n</tool_response>", from) - from);
    return "<think>\nThe tool said " + result + ".\n</think>\n\nThe answer is " + result + ".";
  }
  static const std::regex question(R"(What is (\d+\*\d+)\?)");
  std::smatch m;
  if (std::regex_search(text, m, question)) {
    return "<think>\nI need the calculator.\n</think>\n\n" + call_text(m[1]);
  }
  return "<think>\n\n</think>\n\nI do not know.";
}

RolloutConfig harness_options(const std::string& url) {
  RolloutConfig o;
  o.data.apply_chat_template = true;
  o.agent.agent_harness_url = url;
  o.agent.agent_max_turns = 3;
  o.agent.agent_session_timeout = 60;
  o.agent.agent_env_concurrency = 4;
  return o;
}

// One single-sample group per (question, label); the samples by index.
std::vector<rl::Sample> run_sessions(const RolloutConfig& o, TextEngines& engines,
                                     const std::vector<std::pair<std::string, std::string>>& qa) {
  std::vector<std::vector<rl::Sample>> groups;
  for (size_t i = 0; i < qa.size(); ++i) {
    rl::Sample s;
    s.index = static_cast<int64_t>(i);
    s.group_index = static_cast<int64_t>(i);
    s.status = rl::SampleStatus::kPending;
    const OrderedJson prompt = OrderedJson::array({user(qa[i].first)});
    s.prompt = Json::parse(prompt.dump());
    s.tokens = qwen().encode(qwen_chat().apply(prompt, true));
    s.label = qa[i].second;
    groups.push_back({std::move(s)});
  }
  AgentEpisodeRunner runner(o, qwen(), qwen_chat());
  engine::SamplingParams params;
  params.max_new_tokens = 256;
  std::vector<rl::Sample> out(qa.size());
  runner.generate_groups(engines, std::move(groups), params, [&](std::vector<rl::Sample>&& g) {
    out[static_cast<size_t>(g.front().index)] = std::move(g.front());
    return false;
  });
  return out;
}

testing::ScriptServer harness(const fs::path& dir, std::vector<std::string> args) {
  return testing::ScriptServer(testing::source_dir() / "examples/agent_harness/calculator_agent.py",
                               args, dir);
}

// Every engine request of sample `s` (an input that is a prefix of its tokens) put its turn's
// tokens right after that input, with mask 1 and the request's scripted log-probs; every other
// response position has mask 0 and log-prob 0.
void expect_turns_in_place(const rl::Sample& s, const TextEngines& engines, size_t want_turns) {
  const auto start = static_cast<size_t>(s.prompt_length());
  std::vector<char> generated(static_cast<size_t>(s.response_length), 0);
  size_t turns = 0;
  for (size_t k = 0; k < engines.inputs.size(); ++k) {
    const auto& in = engines.inputs[k];
    if (in.size() < start || in.size() >= s.tokens.size() ||
        !std::equal(in.begin(), in.end(), s.tokens.begin()))
      continue;
    ++turns;
    const auto ids = turn_ids(engines.texts[k]);
    for (size_t p = 0; p < ids.size(); ++p) {
      const size_t at = in.size() + p;
      ASSERT_LT(at, s.tokens.size());
      EXPECT_EQ(s.tokens[at], ids[p]) << "turn " << k << " position " << p;
      EXPECT_EQ(s.loss_mask[at - start], 1.0f);
      EXPECT_FLOAT_EQ(s.rollout_log_probs[at - start],
                      -(1.0f + static_cast<float>(k)) / 100.0f - static_cast<float>(p) / 1000.0f);
      generated[at - start] = 1;
    }
  }
  EXPECT_EQ(turns, want_turns);
  for (size_t p = 0; p < generated.size(); ++p) {
    if (generated[p]) continue;
    EXPECT_EQ(s.loss_mask[p], 0.0f) << "position " << p;
    EXPECT_EQ(s.rollout_log_probs[p], 0.0f) << "position " << p;
  }
}

TEST(HarnessSessions, TheSampleIsTransformersRenderingOfTheHarnesssConversation) {
  const auto dir = testing::scratch_dir();
  fs::create_directories(dir / "record");
  auto agent = harness(dir, {"--record", (dir / "record").string()});
  ASSERT_GT(agent.port(), 0) << "the example harness did not start";
  TextEngines engines(calculator_policy);
  const auto samples = run_sessions(harness_options(agent.url()), engines,
                                    {{"What is 123*456?", "56088"}, {"Say hello.", "hello"}});
  const auto& s = samples[0];
  const Json& a = s.metadata["agent"];
  EXPECT_EQ(a["end_reason"], "done") << a.dump();
  EXPECT_EQ(a["turns"], 2);
  EXPECT_EQ(a["tool_calls"], 1);
  EXPECT_EQ(a["reward"], 1.0);
  EXPECT_EQ(a["harness_metrics"]["tool_calls"], 1);
  EXPECT_EQ(s.status, rl::SampleStatus::kCompleted);
  EXPECT_EQ(samples[1].metadata["agent"]["turns"], 1);
  EXPECT_EQ(samples[1].metadata["agent"]["reward"], 0.0);

  // The harness's final conversation (as the openai package sent it) through transformers.
  OrderedJson cases = OrderedJson::array();
  for (int i : {0, 1}) {
    const auto record =
        OrderedJson::parse(read_file(dir / "record" / (std::to_string(i) + ".json")));
    cases.push_back({{"name", std::to_string(i)},
                     {"messages", record["messages"]},
                     {"tools", record["tools"]}});
  }
  const auto oracle_dir = testing::cached_oracle(
      "agent_conversation", "oracles/agent_conversation.py", cases.dump(), [&](const fs::path& d) {
        std::ofstream(d / "cases.json") << cases.dump();
        return std::vector<std::string>{"--tokenizer", testing::tokenizer_dir("qwen3").string(),
                                        "--cases",     (d / "cases.json").string(),
                                        "--out",       (d / "out.json").string()};
      });
  const Json oracle = Json::parse(read_file(oracle_dir / "out.json"));
  for (size_t i : {0u, 1u}) {
    SCOPED_TRACE("sample " + std::to_string(i));
    auto want = oracle[std::to_string(i)]["ids"].get<std::vector<int64_t>>();
    want.pop_back();  // the template's "\n" after the final <|im_end|>
    EXPECT_EQ(samples[i].tokens, want) << "furlong: " << qwen().decode(samples[i].tokens)
                                       << "\ntransformers: " << oracle[std::to_string(i)]["text"];
    expect_turns_in_place(samples[i], engines, i == 0 ? 2 : 1);
  }
}

// Four sessions, every second one faulty: the faulty ones end with the reason, counted; the
// others finish as usual.
std::vector<rl::Sample> faulty_run(const std::string& fault, RolloutConfig* options = nullptr) {
  const auto dir = testing::scratch_dir();
  auto agent = harness(dir, {"--fault", fault, "--fault-every", "2"});
  EXPECT_GT(agent.port(), 0) << "the example harness did not start";
  RolloutConfig o = options ? *options : harness_options(agent.url());
  o.agent.agent_harness_url = agent.url();
  TextEngines engines(calculator_policy);
  return run_sessions(o, engines,
                      {{"What is 2*3?", "6"},
                       {"What is 4*5?", "20"},
                       {"What is 6*7?", "42"},
                       {"What is 8*9?", "72"}});
}

std::map<std::string, int> end_reasons(const std::vector<rl::Sample>& samples) {
  std::map<std::string, int> n;
  for (const auto& s : samples) ++n[s.metadata["agent"]["end_reason"].get<std::string>()];
  return n;
}

TEST(HarnessSessions, CrashesHangsAndBadRewardsEndOnlyTheirSession) {
  RolloutConfig quick = harness_options("");
  quick.agent.agent_session_timeout = 2;
  for (const std::string fault : {"crash", "hang", "bad-reward", "no-reward"}) {
    SCOPED_TRACE(fault);
    const auto samples = faulty_run(fault, &quick);
    const std::string failed = fault == "hang" ? "harness_timeout" : "harness_error";
    std::map<std::string, int> want = {{"done", 2}, {failed, 2}};
    if (fault == "no-reward") want = {{"done", 4}};
    EXPECT_EQ(end_reasons(samples), want);
    std::map<std::string, double> metrics;
    add_agent_metrics(samples, metrics);
    EXPECT_EQ(metrics["rollout/agent/harness_errors"], fault == "no-reward" ? 0.0 : 2.0);
    EXPECT_EQ(metrics["rollout/agent/timeouts"], fault == "hang" ? 2.0 : 0.0);
    int unrewarded = 0;
    for (const auto& s : samples) {
      const Json& a = s.metadata["agent"];
      if (a["end_reason"] == "done") {
        EXPECT_FALSE(s.remove);
        unrewarded += a.contains("reward") ? 0 : 1;
        continue;
      }
      EXPECT_TRUE(s.remove);
      EXPECT_EQ(s.status, rl::SampleStatus::kAborted);
      if (fault == "bad-reward") {
        EXPECT_NE(a["error"].get<std::string>().find("reward"), std::string::npos) << a.dump();
      }
    }
    EXPECT_EQ(unrewarded, fault == "no-reward" ? 2 : 0);
  }
}

TEST(HarnessSessions, AnEditedHistoryRestartsTheSampleOrDropsIt) {
  const auto samples = faulty_run("edit-history");
  for (const auto& s : samples) {
    const Json& a = s.metadata["agent"];
    const bool edited = a["divergences"] == 1;
    EXPECT_EQ(a["end_reason"], "done");
    EXPECT_EQ(a["turns"], 2);
    EXPECT_EQ(a["untrained_turns"], edited ? 1 : 0);
    // Edited: the sample is the re-rendered history (its prompt) and the one turn generated
    // from it; the turn before is not trained. Otherwise both turns are.
    const std::vector<int64_t> prompt(s.tokens.begin(), s.tokens.begin() + s.prompt_length());
    const auto last = turn_ids(calculator_policy(prompt, 0));
    if (edited) {
      EXPECT_EQ(std::vector<int64_t>(s.tokens.begin() + s.prompt_length(), s.tokens.end()), last);
      EXPECT_EQ(s.mask_sum(), static_cast<double>(last.size()));
    } else {
      EXPECT_GT(s.mask_sum(), static_cast<double>(last.size()));
    }
  }
  std::map<std::string, double> metrics;
  add_agent_metrics(samples, metrics);
  EXPECT_EQ(metrics["rollout/agent/history_divergences"], 2.0);
  EXPECT_EQ(metrics["rollout/agent/untrained_turns"], 2.0);

  RolloutConfig abort = harness_options("");
  abort.agent.agent_harness_on_divergence = "abort";
  const auto dropped = faulty_run("edit-history", &abort);
  EXPECT_EQ(end_reasons(dropped),
            (std::map<std::string, int>{{"done", 2}, {"history_diverged", 2}}));
  for (const auto& s : dropped) {
    EXPECT_EQ(s.remove, s.metadata["agent"]["end_reason"] == "history_diverged");
  }
}

TEST(HarnessSessions, TurnAndTokenLimitsEndTheSessionAsTruncated) {
  RolloutConfig one_turn = harness_options("");
  one_turn.agent.agent_max_turns = 1;
  for (const auto& s : faulty_run("no-reward", &one_turn)) {
    EXPECT_EQ(s.metadata["agent"]["end_reason"], "turn_limit");
    EXPECT_EQ(s.status, rl::SampleStatus::kTruncated);
    EXPECT_EQ(s.metadata["agent"]["turns"], 1);
  }
  RolloutConfig small_context = harness_options("");
  small_context.rollout.engine_context_length = 60;  // the prompt with the tools has more
  for (const auto& s : faulty_run("no-reward", &small_context)) {
    EXPECT_EQ(s.metadata["agent"]["end_reason"], "no_turns");
    EXPECT_TRUE(s.remove);
  }
  RolloutConfig few_tokens = harness_options("");
  few_tokens.agent.agent_max_episode_tokens = 8;  // the call turn has more
  for (const auto& s : faulty_run("no-reward", &few_tokens)) {
    EXPECT_EQ(s.metadata["agent"]["end_reason"], "length");
    EXPECT_EQ(s.status, rl::SampleStatus::kTruncated);
    EXPECT_EQ(s.response_length, 8);
  }
}

// At most --agent-env-concurrency sessions run at once: the example harness reports how many it
// was running when each task arrived. Turns take 100 ms, so the sessions overlap.
TEST(HarnessSessions, AtMostTheConcurrencyBoundRunAtOnce) {
  const auto dir = testing::scratch_dir();
  auto agent = harness(dir, {});
  ASSERT_GT(agent.port(), 0) << "the example harness did not start";
  RolloutConfig o = harness_options(agent.url());
  o.agent.agent_env_concurrency = 3;
  TextEngines engines([](const std::vector<int64_t>& input, int nth) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return calculator_policy(input, nth);
  });
  std::vector<std::pair<std::string, std::string>> qa;
  for (int i = 0; i < 8; ++i) qa.emplace_back("What is " + std::to_string(i) + "*7?", "x");
  const auto samples = run_sessions(o, engines, qa);
  int most = 0;
  for (const auto& s : samples) {
    EXPECT_EQ(s.metadata["agent"]["end_reason"], "done");
    most = std::max(most, s.metadata["agent"]["harness_metrics"]["sessions_at_once"].get<int>());
  }
  EXPECT_EQ(most, 3);
}

// A harness written here with httplib: requests with a wrong key, bad fields or an unknown
// session are refused with their status; a good one gets the turn in OpenAI's shape.
TEST(HarnessSessions, SessionRequestsAreChecked) {
  std::mutex mu;
  std::vector<std::pair<int, std::string>> seen;  // status, body
  testing::ScriptedServer agent([&](const httplib::Request& req, httplib::Response& res) {
    const Json task = Json::parse(req.body);
    const std::string base = task["base_url"];
    const auto slash = base.find('/', 7);
    httplib::Client client(base.substr(0, slash));
    const std::string path = base.substr(slash);
    const httplib::Headers key = {
        {"Authorization", "Bearer " + task["api_key"].get<std::string>()}};
    const httplib::Headers wrong = {{"Authorization", "Bearer nope"}};
    const Json good = {{"model", task["model"]},
                       {"messages", task["sample"]["prompt"]},
                       {"tools", Json::parse(tools().dump())},
                       {"logprobs", true}};
    std::lock_guard<std::mutex> lock(mu);
    auto post = [&](const std::string& p, const httplib::Headers& h, const Json& body) {
      auto r = client.Post(p + "/chat/completions", h, body.dump(), "application/json");
      seen.emplace_back(r ? r->status : -1, r ? r->body : "");
    };
    post(path, wrong, good);
    post(path, key, Json{{"messages", task["sample"]["prompt"]}, {"n", 3}});
    post("/sessions/nosuch/v1", key, good);
    std::string nested = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"k\": ";
    for (int i = 0; i < 5000; ++i) nested += "[";
    for (int i = 0; i < 5000; ++i) nested += "]";
    nested += "}]}";
    auto deep = client.Post(path + "/chat/completions", key, nested, "application/json");
    seen.emplace_back(deep ? deep->status : -1, deep ? deep->body : "");
    Json short_reply = good;
    short_reply["max_tokens"] = 3;  // the request's own bound: a short reply, the session goes on
    post(path, key, short_reply);
    post(path, key, good);  // the same messages again: a divergence, restarted
    auto models = client.Get(path + "/models", key);
    seen.emplace_back(models ? models->status : -1, models ? models->body : "");
    res.set_content(Json{{"reward", 0.5}}.dump(), "application/json");
  });
  TextEngines engines(calculator_policy);
  const auto samples =
      run_sessions(harness_options(agent.url()), engines, {{"What is 12*3?", "36"}});
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen[0].first, 401);
  EXPECT_EQ(seen[1].first, 400);
  EXPECT_NE(seen[1].second.find("\\\"n\\\""), std::string::npos) << seen[1].second;
  EXPECT_EQ(seen[2].first, 404);
  EXPECT_EQ(seen[3].first, 400);
  EXPECT_NE(seen[3].second.find("nest"), std::string::npos) << seen[3].second;
  ASSERT_EQ(seen[4].first, 200) << seen[4].second;
  EXPECT_EQ(Json::parse(seen[4].second)["choices"][0]["finish_reason"], "length");
  ASSERT_EQ(seen[5].first, 200) << seen[5].second;
  EXPECT_EQ(samples[0].metadata["agent"]["divergences"], 1);
  const Json reply = Json::parse(seen[5].second);
  const Json& choice = reply["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "calculator");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"expression\": \"12*3\"}");
  const auto& logprobs = choice["logprobs"]["content"];
  ASSERT_EQ(logprobs.size(), static_cast<size_t>(samples[0].response_length));
  EXPECT_FLOAT_EQ(logprobs[0]["logprob"].get<float>(), samples[0].rollout_log_probs[0]);
  EXPECT_EQ(reply["usage"]["completion_tokens"], samples[0].response_length);
  EXPECT_EQ(seen[6].first, 200);
  EXPECT_EQ(samples[0].metadata["agent"]["reward"], 0.5);
  EXPECT_EQ(samples[0].metadata["agent"]["end_reason"], "done");
}

// Engines that refuse every request (a broken contract): the run fails with their error once
// every session has ended, instead of hanging or touching ended episodes.
class RefusingEngines : public RolloutEngines {
 public:
  void submit(engine::GenerateRequest, Done) override { FURLONG_FAIL("refused by the engines"); }
  void abort_all() override {}
  int64_t sync_weights(const WeightSource&, int64_t, bool) override { return 0; }
  std::string describe() const override { return "refusing"; }
};

TEST(HarnessSessions, EnginesThatRefuseFailTheRunAfterTheSessionsEnd) {
  auto agent = harness(testing::scratch_dir(), {});
  ASSERT_GT(agent.port(), 0) << "the example harness did not start";
  RolloutConfig o = harness_options(agent.url());
  AgentEpisodeRunner runner(o, qwen(), qwen_chat());
  std::vector<std::vector<rl::Sample>> groups;
  for (int i = 0; i < 4; ++i) {
    rl::Sample s;
    s.index = s.group_index = i;
    s.status = rl::SampleStatus::kPending;
    s.prompt = Json::parse(OrderedJson::array({user("What is 2*3?")}).dump());
    groups.push_back({std::move(s)});
  }
  RefusingEngines engines;
  engine::SamplingParams params;
  params.max_new_tokens = 16;
  const std::string error = testing::error_of([&] {
    runner.generate_groups(engines, std::move(groups), params,
                           [](std::vector<rl::Sample>&&) { return false; });
  });
  EXPECT_NE(error.find("refused by the engines"), std::string::npos) << error;
}

// A harness whose answer is not a JSON object ends its session as harness_error.
TEST(HarnessSessions, AnAnswerThatIsNotAnObjectIsAHarnessError) {
  testing::ScriptedServer agent([](const httplib::Request&, httplib::Response& res) {
    res.set_content("[1.0]", "application/json");
  });
  TextEngines engines(calculator_policy);
  const auto samples =
      run_sessions(harness_options(agent.url()), engines, {{"What is 12*3?", "36"}});
  const Json& a = samples[0].metadata["agent"];
  EXPECT_EQ(a["end_reason"], "harness_error");
  EXPECT_NE(a["error"].get<std::string>().find("JSON object"), std::string::npos) << a.dump();
}

}  // namespace
}  // namespace furlong::rollout
