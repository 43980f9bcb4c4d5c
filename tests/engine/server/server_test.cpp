// The HTTP layer of `furlong serve` against a scripted backend (no model): request parsing and
// validation, routing, auth, error bodies, concurrency, abort (by rid and on disconnect),
// pause/continue, memory release, weight-update plumbing and the OpenAI shapes, all driven
// through EngineClient.
#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <thread>

#include "common/test_util.h"
#include "engine/server/api.h"
#include "engine/server/client.h"
#include "engine/server/server.h"
#include "scripted_backend.h"
#include "served.h"

namespace furlong::engine::server {
namespace {

using namespace std::chrono_literals;
using furlong::engine::server::testing::scripted_output;
using furlong::engine::server::testing::ScriptedBackend;

using testing::kContext;
using testing::make_backend;
using testing::sampling;
using testing::Served;
using testing::wait_until;

// The {"error": {...}} body of a failed request; a test failure if it did not fail with
// `status`.
Json expect_error(const EngineClient& c, const std::string& path, const std::string& body,
                  int status) {
  auto raw = c.request("POST", path, body);
  EXPECT_EQ(raw.status, status) << path << " " << body << " -> " << raw.body;
  Json json = Json::parse(raw.body, nullptr, false);
  EXPECT_TRUE(json.contains("error") && json["error"].contains("message") &&
              json["error"].contains("type"))
      << raw.body;
  return json.contains("error") ? json["error"] : Json::object();
}

// ---- parsing, no sockets ----

TEST(ServerApi, ParsesSingleAndBatchedGenerateRequests) {
  auto backend = make_backend();
  ModelLimits limits{backend->vocab_size(), 64};
  int counter = 0;
  auto rid = [&] { return "r" + std::to_string(counter++); };
  auto single = parse_generate(
      Json{{"input_ids", {1, 2, 3}},
           {"sampling_params",
            {{"max_new_tokens", 5}, {"skip_special_tokens", false}, {"no_stop_trim", true}}},
           {"return_logprob", true}},
      backend->tokenizer(), limits, rid);
  ASSERT_EQ(single.items.size(), 1u);
  EXPECT_FALSE(single.batched);
  EXPECT_TRUE(single.return_logprob);
  EXPECT_EQ(single.items[0].request.input_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(single.items[0].request.sampling.max_new_tokens, 5);
  EXPECT_FALSE(single.items[0].text.skip_special_tokens);
  EXPECT_TRUE(single.items[0].text.no_stop_trim);
  EXPECT_EQ(single.items[0].rid, "r0");

  auto batch =
      parse_generate(Json{{"text", {"hello", "world wide"}},
                          {"sampling_params", {{{"max_new_tokens", 1}}, {{"max_new_tokens", 2}}}},
                          {"rid", {"a", "b"}}},
                     backend->tokenizer(), limits, rid);
  ASSERT_EQ(batch.items.size(), 2u);
  EXPECT_TRUE(batch.batched);
  EXPECT_EQ(batch.items[1].rid, "b");
  EXPECT_EQ(batch.items[1].request.sampling.max_new_tokens, 2);
  EXPECT_EQ(batch.items[0].request.input_ids, backend->tokenizer().encode("hello", true));
}

// SGLang's n: n items per prompt, prompt-major, sample j seeded seed + j; the penalties and
// log-prob options reach the engine's parameters.
TEST(ServerApi, ExpandsNPromptMajorAndCarriesPenaltiesAndLogprobOptions) {
  auto backend = make_backend();
  ModelLimits limits{backend->vocab_size(), 64};
  int counter = 0;
  auto rid = [&] { return "r" + std::to_string(counter++); };
  auto call = parse_generate(Json{{"input_ids", {{1, 2}, {3}}},
                                  {"sampling_params",
                                   {{"max_new_tokens", 4},
                                    {"n", 3},
                                    {"sampling_seed", 10},
                                    {"min_new_tokens", 2},
                                    {"repetition_penalty", 1.5},
                                    {"frequency_penalty", -1}}},
                                  {"return_logprob", true},
                                  {"logprob_start_len", 0},
                                  {"top_logprobs_num", 2}},
                             backend->tokenizer(), limits, rid);
  ASSERT_EQ(call.items.size(), 6u);
  EXPECT_EQ(call.n, 3);
  for (size_t k = 0; k < 6; ++k) {
    const auto& item = call.items[k];
    EXPECT_EQ(item.prompt_index, k / 3);
    EXPECT_EQ(item.sample_index, k % 3);
    EXPECT_EQ(*item.request.sampling.seed, 10 + k % 3);
    EXPECT_EQ(item.request.sampling.min_new_tokens, 2);
    EXPECT_EQ(item.request.sampling.repetition_penalty, 1.5);
    EXPECT_EQ(item.request.sampling.frequency_penalty, -1);
    EXPECT_EQ(item.request.sampling.top_logprobs_num, 2);
    EXPECT_TRUE(item.request.sampling.penalized());
  }
  EXPECT_EQ(call.items[4].rid, "r1-1");
  EXPECT_EQ(call.prompt_logprob_from(2), 1);
  // Defaults are not penalized, and the wire form of the RL client's params is unchanged.
  SamplingParams plain;
  EXPECT_FALSE(plain.penalized());
  EXPECT_FALSE(sampling_params_json(plain).contains("repetition_penalty"));
  auto message = [&](const Json& body) {
    try {
      parse_generate(body, backend->tokenizer(), limits, rid);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return std::string(e.what());
    }
    return std::string("<accepted>");
  };
  EXPECT_NE(message({{"input_ids", {1}}, {"sampling_params", {{"n", 0}}}}).find("'n'"),
            std::string::npos);
  EXPECT_NE(message({{"input_ids", {1}}, {"return_logprob", true}, {"logprob_start_len", -2}})
                .find("logprob_start_len"),
            std::string::npos);
  EXPECT_NE(message({{"input_ids", {1}}, {"stream", true}, {"sampling_params", {{"n", 2}}}})
                .find("stream"),
            std::string::npos);
  EXPECT_NE(message({{"input_ids", {1}}, {"sampling_params", {{"repetition_penalty", 0}}}})
                .find("repetition_penalty"),
            std::string::npos);
}

TEST(Server, TokenizeAndDetokenizeInSglangShapes) {
  Served s;
  Json one = s.client->post("/tokenize", Json{{"prompt", "hello world"}});
  EXPECT_EQ(one["tokens"], s.backend->tokenizer().encode("hello world", true));
  EXPECT_EQ(one["count"], one["tokens"].size());
  EXPECT_EQ(one["max_model_len"], testing::kContext);
  Json text = s.client->post("/detokenize", Json{{"tokens", one["tokens"]}});
  EXPECT_EQ(text["text"], "hello world");
  Json two = s.client->post("/detokenize", Json{{"tokens", {one["tokens"], Json::array()}}});
  EXPECT_EQ(two["text"], Json::array({"hello world", ""}));
  expect_error(*s.client, "/tokenize", R"({"text": "x"})", 400);
  // SGLang's failure shape: {success: false, message}, status 400.
  auto raw = s.client->request("POST", "/update_weights_from_disk", R"({"model_path": "/none"})");
  EXPECT_EQ(raw.status, 400);
  Json reply = Json::parse(raw.body);
  EXPECT_EQ(reply["success"], false);
  EXPECT_NE(reply["message"].get<std::string>().find("/none"), std::string::npos) << raw.body;
}

TEST(ServerApi, RejectsBadGenerateRequestsWithMessagesNamingTheField) {
  auto backend = make_backend();
  ModelLimits limits{backend->vocab_size(), 64};
  auto rid = [] { return std::string("r"); };
  auto message_of = [&](const Json& body) {
    try {
      parse_generate(body, backend->tokenizer(), limits, rid);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted " << body.dump();
    return std::string();
  };
  EXPECT_NE(message_of({{"input_ids", {1}}, {"sampling_param", Json::object()}})
                .find("unknown field 'sampling_param' (did you mean 'sampling_params'?)"),
            std::string::npos);
  EXPECT_NE(message_of({{"input_ids", "1 2"}}).find("input_ids"), std::string::npos);
  EXPECT_NE(message_of({{"input_ids", {1}}, {"sampling_params", {{"max_new_tokens", "8"}}}})
                .find("max_new_tokens"),
            std::string::npos);
  EXPECT_NE(message_of({{"input_ids", {1, 2}}, {"sampling_params", {{"max_new_tokens", 63}}}})
                .find("exceeds the context length 64"),
            std::string::npos);
  EXPECT_NE(message_of({{"input_ids", {1, backend->vocab_size()}}}).find("input_ids[1]"),
            std::string::npos);
  EXPECT_NE(message_of({{"input_ids", Json::array()}}).find("empty"), std::string::npos);
  EXPECT_NE(message_of({{"input_ids", {1}}, {"text", "x"}}).find("exactly one"), std::string::npos);
  EXPECT_NE(message_of({{"input_ids", {{1}, {2}}}, {"stream", true}}).find("stream"),
            std::string::npos);
  EXPECT_NE(message_of({{"input_ids", {{1}, {2}}}, {"rid", {"a"}}}).find("'rid' has 1"),
            std::string::npos);
}

TEST(ServerApi, TrimsStopStringsAndStopTokensUnlessAskedNotTo) {
  auto backend = make_backend();
  const auto& tok = backend->tokenizer();
  GenerateItem item;
  GenerateOutput out;
  out.output_ids = tok.encode("Hello world. Bye");
  out.matched_stop_string = ".";
  out.finish_reason = FinishReason::kStop;
  EXPECT_EQ(output_text(item, out, tok), "Hello world");
  item.text.no_stop_trim = true;
  EXPECT_EQ(output_text(item, out, tok), "Hello world. Bye");
}

// ---- over HTTP ----

TEST(Server, GenerateReturnsSglangShapedOutputWithLogprobs) {
  Served s;
  std::vector<int64_t> prompt = {5, 6, 7};
  auto r = s.client->generate(prompt, sampling(4), true, "my-rid");
  auto expected = scripted_output(prompt, 4, s.backend->vocab_size(), FinishReason::kLength);
  EXPECT_EQ(r.output_ids, expected.output_ids);
  EXPECT_EQ(r.output_logprobs, expected.output_logprobs);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.prompt_tokens, 3);
  EXPECT_EQ(r.rid, "my-rid");
  EXPECT_EQ(r.text, s.backend->tokenizer().decode(expected.output_ids, true));
  const Json& meta = r.raw["meta_info"];
  EXPECT_EQ(meta["completion_tokens"], 4);
  EXPECT_EQ(meta["finish_reason"]["length"], 4);
  EXPECT_EQ(meta["output_token_logprobs"][0][1], expected.output_ids[0]);
  EXPECT_TRUE(meta.contains("weight_version") && meta.contains("e2e_latency"));

  Json batch =
      s.client->generate(Json{{"input_ids", {{1, 2}, {9}}}, {"sampling_params", sampling(2)}});
  ASSERT_TRUE(batch.is_array());
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[1]["output_ids"],
            scripted_output({9}, 2, s.backend->vocab_size(), FinishReason::kLength).output_ids);
  EXPECT_FALSE(batch[0]["meta_info"].contains("output_token_logprobs"));
}

TEST(Server, ThirtyTwoConcurrentClientsGetTheirOwnAnswers) {
  Served s;
  constexpr int kClients = 32;
  std::vector<std::future<GenerateResult>> futures;
  for (int i = 0; i < kClients; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      return s.client->generate({100 + i, 200 + i}, sampling(20 + i));
    }));
  }
  for (int i = 0; i < kClients; ++i) {
    auto r = futures[i].get();
    auto expected =
        scripted_output({100 + i, 200 + i}, 20 + i, s.backend->vocab_size(), FinishReason::kLength);
    EXPECT_EQ(r.output_ids, expected.output_ids) << "client " << i;
  }
  // They were in the engine together (handlers do not serialize generation).
  EXPECT_GE(s.backend->max_running_seen.load(), kClients / 2);
}

TEST(Server, StreamsServerSentEventsEndingWithTheFinalOutput) {
  Served s;
  std::vector<Json> events;
  Json last = s.client->generate_stream(
      Json{{"input_ids", {3, 4}}, {"sampling_params", sampling(30)}, {"return_logprob", true}},
      [&](const Json& e) { events.push_back(e); });
  auto expected = scripted_output({3, 4}, 30, s.backend->vocab_size(), FinishReason::kLength);
  EXPECT_EQ(last["output_ids"], expected.output_ids);
  EXPECT_EQ(last["meta_info"]["finish_reason"]["type"], "length");
  ASSERT_GE(events.size(), 3u);  // 2 ms per token: several batches of tokens
  size_t previous = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_TRUE(events[i]["meta_info"]["finish_reason"].is_null());
    size_t n = events[i]["output_ids"].size();
    EXPECT_GT(n, previous);  // cumulative, growing
    previous = n;
    std::vector<int64_t> prefix(expected.output_ids.begin(), expected.output_ids.begin() + n);
    EXPECT_EQ(events[i]["output_ids"], prefix);
  }
  // A streamed request can be aborted by rid like any other.
  auto pending = std::async(std::launch::async, [&] {
    return s.client->generate_stream(
        Json{{"input_ids", {1}}, {"sampling_params", sampling(50000)}, {"rid", "streamed"}},
        [](const Json&) {});
  });
  wait_until([&] { return s.backend->num_running() == 1; });
  s.client->abort_request("streamed");
  EXPECT_EQ(pending.get()["meta_info"]["finish_reason"]["type"], "abort");
  try {
    s.client->generate_stream(Json{{"input_ids", {{1}, {2}}}}, [](const Json&) {});
    ADD_FAILURE() << "a streamed batch was accepted";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("one prompt"), std::string::npos) << e.what();
  }
}

TEST(Server, BadRequestsGetJsonErrorsNotCrashes) {
  Served s;
  auto& c = *s.client;
  EXPECT_NE(
      expect_error(c, "/generate", "{\"input_ids\": [1, 2", 400)["message"].get<std::string>().find(
          "request body"),
      std::string::npos);
  expect_error(c, "/generate", "[1, 2]", 400);
  expect_error(c, "/generate", R"({"input_ids": [1], "sampling_params": {"temperature": "hot"}})",
               400);
  auto unknown = expect_error(c, "/generate", R"({"input_ids": [1], "max_tokens": 3})", 400);
  EXPECT_NE(unknown["message"].get<std::string>().find("unknown field 'max_tokens'"),
            std::string::npos);
  auto long_prompt = Json{{"input_ids", {1, 2, 3}}, {"sampling_params", sampling(kContext)}};
  EXPECT_NE(
      expect_error(c, "/generate", long_prompt.dump(), 400)["message"].get<std::string>().find(
          "exceeds the context length"),
      std::string::npos);
  expect_error(c, "/abort_request", R"({"rid": 7})", 400);
  expect_error(c, "/pause_generation", R"({"mode": "sideways"})", 400);
  expect_error(c, "/update_weights_from_distributed",
               R"({"names": ["a"], "dtypes": ["float32", "float32"], "shapes": [[1]]})", 400);
  auto missing = expect_error(c, "/no_such_endpoint", "{}", 404);
  EXPECT_EQ(missing["type"], "not_found_error");
  std::string garbage(5000, '\xff');
  expect_error(c, "/generate", garbage, 400);
  EXPECT_TRUE(c.health());  // still serving
}

TEST(Server, AbortByRidEndsARunningRequestWithPartialOutput) {
  Served s;
  auto pending = std::async(std::launch::async, [&] {
    return s.client->generate({1, 2, 3}, sampling(50000), true, "long-one");
  });
  wait_until([&] { return s.backend->num_running() == 1; });
  std::this_thread::sleep_for(50ms);
  s.client->abort_request("long-one");
  auto r = pending.get();
  EXPECT_EQ(r.finish_reason, "abort");
  EXPECT_GT(r.output_ids.size(), 0u);
  EXPECT_LT(r.output_ids.size(), 50000u);
  EXPECT_EQ(r.output_logprobs.size(), r.output_ids.size());
}

TEST(Server, ClientDisconnectAbortsItsRequest) {
  Served s;
  httplib::Client impatient(s.server->url());
  impatient.set_read_timeout(0, 300000);  // gives up (and closes) after 0.3 s
  Json body = {{"input_ids", {4, 5}}, {"sampling_params", sampling(50000)}};
  auto result = impatient.Post("/generate", body.dump(), "application/json");
  EXPECT_FALSE(result);  // timed out
  impatient.stop();
  wait_until([&] { return s.backend->num_running() == 0; }, 3s);
  // The same for a streamed request (the response's releaser aborts it).
  body["stream"] = true;
  std::atomic<bool> first_event{false};
  httplib::Client streaming(s.server->url());
  std::thread reader([&] {
    httplib::Request req;
    req.method = "POST";
    req.path = "/generate";
    req.body = body.dump();
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      first_event = true;
      return false;  // hang up after the first event
    };
    streaming.send(req);
  });
  reader.join();
  EXPECT_TRUE(first_event.load());
  wait_until([&] { return s.backend->num_running() == 0; }, 3s);
}

TEST(Server, ApiKeyIsRequiredExceptForHealth) {
  ServerOptions options;
  options.api_key = "sesame";
  Served s(options);
  EngineClient anonymous(s.server->url());
  EngineClient wrong(s.server->url(), ClientOptions{"sesam"});
  EXPECT_EQ(anonymous.request("GET", "/get_model_info", "").status, 401);
  auto raw = wrong.request("POST", "/generate", R"({"input_ids": [1]})");
  EXPECT_EQ(raw.status, 401);
  EXPECT_EQ(Json::parse(raw.body)["error"]["type"], "authentication_error");
  EXPECT_TRUE(anonymous.health());
  EXPECT_EQ(s.client->generate({1}, sampling(2)).output_ids.size(), 2u);
}

TEST(Server, PauseHoldsGenerationUntilContinue) {
  Served s;
  s.client->pause_generation("in_place");
  auto pending =
      std::async(std::launch::async, [&] { return s.client->generate({8}, sampling(3)); });
  wait_until([&] { return s.backend->num_running() == 1; });
  EXPECT_EQ(pending.wait_for(300ms), std::future_status::timeout);
  EXPECT_TRUE(s.client->get_server_info()["paused"].get<bool>());
  EXPECT_EQ(s.client->request("GET", "/health_generate", "").status, 200);
  s.client->continue_generation();
  EXPECT_EQ(pending.get().finish_reason, "length");
  s.client->flush_cache();
}

TEST(Server, ReleasedMemoryRefusesGenerationUntilResumed) {
  Served s;
  s.client->release_memory_occupation({"kv_cache", "weights"});
  EXPECT_TRUE(s.client->get_server_info()["memory_released"].get<bool>());
  auto err = expect_error(*s.client, "/generate", R"({"input_ids": [1]})", 400);
  EXPECT_NE(err["message"].get<std::string>().find("resume_memory"), std::string::npos);
  s.client->resume_memory_occupation({"weights"});
  s.client->resume_memory_occupation({"kv_cache", "cuda_graph"});
  EXPECT_EQ(s.client->generate({1}, sampling(1)).finish_reason, "length");
  expect_error(*s.client, "/release_memory_occupation", R"({"tags": ["gpu"]})", 400);
}

TEST(Server, WeightUpdateEndpointsReachTheEngine) {
  Served s;
  WeightGroupSpec spec;
  spec.master_addr = "127.0.0.1";
  spec.master_port = 12345;
  spec.rank_offset = 1;
  spec.world_size = 3;
  spec.group_name = "g";
  spec.backend = "gloo";
  s.client->init_weights_update_group(spec);
  EXPECT_EQ(s.backend->last_group.master_port, 12345);
  EXPECT_EQ(s.backend->last_group.world_size, 3);
  EXPECT_EQ(s.backend->last_group.backend, "gloo");
  s.client->update_weights_from_distributed({{"model.norm.weight", "bfloat16", {64}}}, 7, "g");
  ASSERT_EQ(s.backend->last_metas.size(), 1u);
  EXPECT_EQ(s.backend->last_metas[0].shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(s.client->get_weight_version(), 7);
  EXPECT_EQ(s.client->get_weights_digest(), "digest-v7");
  // SGLang sends weight_version as a string and dtypes as torch names.
  s.client->post("/update_weights_from_distributed", Json{{"names", {"w"}},
                                                          {"dtypes", {"torch.float32"}},
                                                          {"shapes", {{2, 2}}},
                                                          {"weight_version", "8"}});
  EXPECT_EQ(s.backend->last_metas[0].dtype, "float32");
  EXPECT_EQ(s.client->generate({3}, sampling(1)).weight_version, 8);
  s.client->update_weight_version(9);
  // On the wire a weight version is SGLang's string; 0 is SGLang's "default".
  EXPECT_EQ(s.client->get_model_info()["weight_version"], "9");
  EXPECT_EQ(s.client->get("/get_weight_version")["weight_version"], "9");
  s.client->update_weight_version(0);
  EXPECT_EQ(s.client->get("/get_weight_version")["weight_version"], "default");
  s.client->post("/update_weight_version", Json{{"new_version", "default"}});
  EXPECT_EQ(s.client->get_weight_version(), 0);
  expect_error(*s.client, "/update_weight_version", R"({"new_version": "v1"})", 400);
  s.client->destroy_weights_update_group("g");
}

TEST(Server, OpenAiCompletionsAndChat) {
  Served s;
  Json completion =
      s.client->post("/v1/completions",
                     Json{{"model", "m"}, {"prompt", "Hello"}, {"max_tokens", 3}, {"logprobs", 0}});
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_EQ(completion["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(completion["usage"]["completion_tokens"], 3);
  EXPECT_EQ(completion["choices"][0]["logprobs"]["token_logprobs"].size(), 3u);
  Json chat = s.client->post(
      "/v1/chat/completions",
      Json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}});
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  auto prompt = s.backend->chat_formatter()->apply(
      OrderedJson::array({{{"role", "user"}, {"content", "Hi"}}}), true);
  EXPECT_EQ(chat["usage"]["prompt_tokens"], s.backend->tokenizer().encode(prompt).size());
  expect_error(*s.client, "/v1/chat/completions", R"({"messages": [], "max_tokens": 2})", 400);
  Json two = s.client->post("/v1/completions", Json{{"prompt", "x"}, {"n", 2}, {"max_tokens", 1}});
  EXPECT_EQ(two["choices"].size(), 2u);
  expect_error(*s.client, "/v1/completions", R"({"prompt": "x", "n": 0})", 400);
  expect_error(*s.client, "/v1/completions", R"({"prompt": "x", "logit_bias": {"1": 2}})", 400);
  EXPECT_EQ(s.client->get("/v1/models")["data"][0]["object"], "model");
}

TEST(Server, StopAbortsInFlightGenerations) {
  Served s;
  auto pending =
      std::async(std::launch::async, [&] { return s.client->generate({1}, sampling(50000)); });
  wait_until([&] { return s.backend->num_running() == 1; });
  s.server->stop();
  EXPECT_EQ(pending.get().finish_reason, "abort");
  EXPECT_FALSE(s.client->health());
}

TEST(Client, RetriesConnectionFailuresThenNamesTheUrl) {
  EngineClient nobody("http://127.0.0.1:1", ClientOptions{"", 0.2, 1.0, 2, 0.01});
  auto message = furlong::testing::error_of([&] { nobody.get_model_info(); });
  EXPECT_NE(message.find("http://127.0.0.1:1/get_model_info"), std::string::npos) << message;
  EXPECT_NE(message.find("after 2 retries"), std::string::npos) << message;
  EXPECT_NE(furlong::testing::error_of([] { EngineClient("localhost:3000"); }).find("http://"),
            std::string::npos);
}

}  // namespace
}  // namespace furlong::engine::server
