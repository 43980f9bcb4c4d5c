// Request fields and server options checked against the model and the machine: stop token ids
// and prompt token ids outside the vocabulary are 400s naming the field, a handler-thread count
// beyond the limit is a clear error instead of an abort at start, and what each OpenAI format
// does with alternatives whose token texts coincide.
#include <gtest/gtest.h>

#include <set>

#include "common/test_util.h"
#include "engine/server/api.h"
#include "engine/server/openai_api.h"
#include "engine/server/server.h"
#include "scripted_backend.h"
#include "served.h"

namespace furlong::engine::server {
namespace {

using testing::make_backend;
using testing::Served;

// The error message of a request that must fail with 400.
std::string bad_request_message(const EngineClient& c, const std::string& path, const Json& body) {
  auto raw = c.request("POST", path, body.dump());
  EXPECT_EQ(raw.status, 400) << path << " " << body.dump() << " -> " << raw.body;
  Json json = Json::parse(raw.body, nullptr, false);
  if (!json.is_object() || !json.contains("error")) {
    ADD_FAILURE() << "not a JSON error body: " << raw.body;
    return "";
  }
  return json["error"]["message"].get<std::string>();
}

TEST(ServerValidation, StopTokenIdsOutsideTheVocabularyGet400NamingTheField) {
  Served s;
  const int64_t vocab = s.backend->vocab_size();
  const std::string range = "is outside the vocabulary [0, " + std::to_string(vocab) + ")";
  auto msg = bad_request_message(
      *s.client, "/generate",
      {{"input_ids", {1}}, {"sampling_params", {{"stop_token_ids", {2, vocab + 7}}}}});
  EXPECT_NE(msg.find("stop_token_ids[1] = " + std::to_string(vocab + 7) + " " + range),
            std::string::npos)
      << msg;
  msg = bad_request_message(*s.client, "/v1/completions",
                            {{"prompt", "Hi"}, {"max_tokens", 2}, {"stop_token_ids", {-1}}});
  EXPECT_NE(msg.find("/v1/completions: stop_token_ids[0] = -1 " + range), std::string::npos) << msg;
  msg = bad_request_message(*s.client, "/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                             {"max_tokens", 2},
                             {"stop_token_ids", {vocab}}});
  EXPECT_NE(msg.find("stop_token_ids[0] = " + std::to_string(vocab)), std::string::npos) << msg;
  // In range: served.
  Json ok = s.client->post("/v1/completions",
                           {{"prompt", "Hi"}, {"max_tokens", 2}, {"stop_token_ids", {vocab - 1}}});
  EXPECT_EQ(ok["choices"].size(), 1u) << ok.dump();
}

TEST(ServerValidation, CompletionPromptIdsOutsideTheVocabularyGet400NamingPrompt) {
  Served s;
  const std::string vocab = std::to_string(s.backend->vocab_size());
  auto msg = bad_request_message(*s.client, "/v1/completions", {{"prompt", {-1}}});
  EXPECT_NE(msg.find("/v1/completions: 'prompt' must hold token ids in [0, " + vocab +
                     "), got -1 at index 0"),
            std::string::npos)
      << msg;
  msg = bad_request_message(*s.client, "/v1/completions",
                            {{"prompt", {{1, 2}, {3, s.backend->vocab_size()}}}});
  EXPECT_NE(msg.find("'prompt[1]' must hold token ids in [0, " + vocab + "), got " + vocab +
                     " at index 1"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(s.client->health());
}

// Each handler thread is started by the listener; more than the process may create used to end
// in std::terminate (SIGABRT) inside start().
TEST(ServerValidation, MaxConcurrentRequestsBeyondTheLimitIsAClearError) {
  for (int64_t n : {int64_t{0}, kMaxConcurrentRequests + 1, int64_t{100000}}) {
    ServerOptions options;
    options.port = 0;
    options.max_concurrent_requests = n;
    auto msg = furlong::testing::error_of([&] { EngineServer server(make_backend(), options); });
    EXPECT_NE(msg.find("--max-concurrent-requests must be in [1, " +
                       std::to_string(kMaxConcurrentRequests) + "]"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("got " + std::to_string(n)), std::string::npos) << msg;
  }
}

// Token ids that all decode to the same text (lone UTF-8 continuation bytes render as U+FFFD).
std::vector<int64_t> ids_with_one_text(const tokenizer::Tokenizer& tok, size_t want) {
  std::map<std::string, std::vector<int64_t>> by_text;
  for (int64_t id = 0; id < 512; ++id) by_text[token_text(tok, id)].push_back(id);
  std::vector<int64_t> best;
  for (auto& [text, ids] : by_text) {
    if (ids.size() > best.size()) best = ids;
  }
  if (best.size() > want) best.resize(want);
  return best;
}

// Chat's top_logprobs is a list: every alternative asked for is there, duplicates of text
// included. Completions' is an object keyed by token text, as OpenAI's legacy format: ids whose
// texts coincide share one key, which holds the most likely one's log-prob (docs/engine.md).
TEST(OpenAiLogprobs, ChatListsEveryAlternativeAndCompletionsKeysOneEntryPerText) {
  auto backend = make_backend();
  const auto& tok = backend->tokenizer();
  ModelLimits limits{backend->vocab_size(), 64};
  const auto same = ids_with_one_text(tok, 4);
  ASSERT_GE(same.size(), 2u) << "no two ids of the test tokenizer decode alike";
  TopLogprobs tops;
  for (size_t i = 0; i < 20; ++i) {
    const int64_t id = i < same.size() ? same[i] : 1000 + static_cast<int64_t>(i);
    tops.emplace_back(id, -0.5f * static_cast<float>(i + 1));
  }
  GenerateOutput out;
  out.output_ids = {tops[0].first};
  out.output_logprobs = {tops[0].second};
  out.output_top_logprobs = {tops};
  out.finish_reason = FinishReason::kLength;

  auto chat =
      parse_chat_completion(OrderedJson{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                        {"max_tokens", 1},
                                        {"logprobs", true},
                                        {"top_logprobs", 20}},
                            tok, backend->chat_formatter(), limits);
  Json body = openai_response(chat, {out}, tok, {});
  const auto& listed = body["choices"][0]["logprobs"]["content"][0]["top_logprobs"];
  ASSERT_EQ(listed.size(), 20u) << listed.dump();
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(listed[i]["token"], token_text(tok, tops[i].first)) << i;
    EXPECT_FLOAT_EQ(listed[i]["logprob"].get<float>(), tops[i].second) << i;
  }

  auto completion =
      parse_completion(Json{{"prompt", "Hi"}, {"max_tokens", 1}, {"logprobs", 20}}, tok, limits);
  body = openai_response(completion, {out}, tok, {});
  const auto& keyed = body["choices"][0]["logprobs"]["top_logprobs"][0];
  std::set<std::string> texts;
  for (const auto& [id, lp] : tops) texts.insert(token_text(tok, id));
  EXPECT_EQ(keyed.size(), texts.size()) << keyed.dump();
  EXPECT_FLOAT_EQ(keyed[token_text(tok, same[0])].get<float>(), tops[0].second);
}

}  // namespace
}  // namespace furlong::engine::server
