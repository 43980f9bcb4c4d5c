// Requests that are hostile by size or shape, against the HTTP layer and a scripted backend:
// nesting 60,000 deep, numbers beyond a double or int64, megabyte field names, bodies over
// --max-request-bytes, negative weight versions, out-of-range ports; and what pause means for
// new requests (queued, yet abortable by rid, ended by a disconnect, and bounded by
// --paused-request-timeout). Each gets a JSON answer; the server keeps serving.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <future>
#include <thread>

#include "common/test_util.h"
#include "engine/server/client.h"
#include "engine/server/server.h"
#include "scripted_backend.h"
#include "served.h"

namespace furlong::engine::server {
namespace {

using namespace std::chrono_literals;
using furlong::engine::server::testing::ScriptedBackend;

using testing::kContext;
using testing::sampling;
using testing::Served;
using testing::wait_until;

// The error message of a request that must fail with `status`.
std::string error_message(const EngineClient& c, const std::string& path, const std::string& body,
                          int status) {
  auto raw = c.request("POST", path, body);
  EXPECT_EQ(raw.status, status) << path << " " << body.substr(0, 200) << " -> "
                                << raw.body.substr(0, 300);
  Json json = Json::parse(raw.body, nullptr, false);
  if (!json.is_object() || !json.contains("error")) {
    ADD_FAILURE() << "not a JSON error body: " << raw.body.substr(0, 300);
    return "";
  }
  return json["error"]["message"].get<std::string>();
}

TEST(ServerLimits, DeeplyNestedBodiesGet400AndTheServerKeepsServing) {
  Served s;
  std::string deep = std::string(60000, '[') + std::string(60000, ']');
  for (const char* path :
       {"/generate", "/v1/completions", "/v1/chat/completions", "/update_weight_version"}) {
    auto msg = error_message(*s.client, path, "{\"input_ids\": " + deep + "}", 400);
    EXPECT_NE(msg.find("nested deeper than 128 levels"), std::string::npos) << path << ": " << msg;
  }
  EXPECT_TRUE(s.client->health());
  EXPECT_EQ(s.client->generate({1}, sampling(2)).output_ids.size(), 2u);
}

TEST(ServerLimits, NumbersBeyondTheirTypeGet400NamingTheField) {
  Served s;
  for (const char* field : {"temperature", "top_p", "max_new_tokens"}) {
    auto body =
        std::string(R"({"input_ids": [1], "sampling_params": {")") + field + R"(": 1e400}})";
    auto msg = error_message(*s.client, "/generate", body, 400);
    EXPECT_NE(msg.find(std::string("sampling_params.") + field), std::string::npos) << msg;
  }
  // Near 2^63 the prompt + max_new_tokens sum used to overflow and pass the context check.
  for (const char* huge : {"9223372036854775807", "9223372036854775806"}) {
    auto body = std::string(R"({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": )") +
                huge + "}}";
    auto msg = error_message(*s.client, "/generate", body, 400);
    EXPECT_NE(msg.find("exceeds the context length"), std::string::npos) << msg;
  }
  auto msg = error_message(
      *s.client, "/generate",
      R"({"input_ids": [1], "sampling_params": {"max_new_tokens": 9223372036854775808}})", 400);
  EXPECT_NE(msg.find("max_new_tokens"), std::string::npos) << msg;
  msg = error_message(*s.client, "/v1/completions",
                      R"({"prompt": [1, 2], "max_tokens": 9223372036854775807})", 400);
  EXPECT_NE(msg.find("exceeds the context length"), std::string::npos) << msg;
  EXPECT_EQ(s.backend->num_running(), 0);
}

TEST(ServerLimits, HugeUnknownFieldNameIsAnsweredFastWithATruncatedName) {
  Served s;
  std::string name(10 << 20, 'q');
  auto start = std::chrono::steady_clock::now();
  auto msg =
      error_message(*s.client, "/generate", "{\"input_ids\": [1], \"" + name + "\": 1}", 400);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);  // the did-you-mean search used to take ~30 s of CPU
  EXPECT_LT(msg.size(), 1000u);
  EXPECT_NE(msg.find("unknown field 'qqq"), std::string::npos) << msg.substr(0, 300);
  EXPECT_NE(msg.find("(10485760 bytes)"), std::string::npos) << msg.substr(0, 300);
  // A typo still gets its suggestion.
  msg = error_message(*s.client, "/generate", R"({"input_ids": [1], "sampling_param": {}})", 400);
  EXPECT_NE(msg.find("did you mean 'sampling_params'"), std::string::npos) << msg;
}

TEST(ServerLimits, BodyOverMaxRequestBytesGets413) {
  ServerOptions options;
  options.max_request_bytes = 4096;
  Served s(options);
  Json big = {{"input_ids", std::vector<int64_t>(3000, 7)}};  // ~6000 bytes
  auto msg = error_message(*s.client, "/generate", big.dump(), 413);
  EXPECT_NE(msg.find("--max-request-bytes (4096 bytes)"), std::string::npos) << msg;
  EXPECT_EQ(s.client->generate({1}, sampling(1)).output_ids.size(), 1u);
  options.max_request_bytes = 10;
  EXPECT_THROW(EngineServer(s.backend, options), Error);
}

TEST(ServerLimits, NegativeWeightVersionsGet400NamingTheField) {
  Served s;
  s.client->update_weight_version(3);
  for (const char* version : {"-5", "\"-5\""}) {
    auto msg = error_message(*s.client, "/update_weight_version",
                             std::string(R"({"new_version": )") + version + "}", 400);
    EXPECT_NE(msg.find("'new_version' must be >= 0, got -5"), std::string::npos) << msg;
  }
  auto msg =
      error_message(*s.client, "/update_weights_from_distributed",
                    R"({"names": [], "dtypes": [], "shapes": [], "weight_version": -1})", 400);
  EXPECT_NE(msg.find("'weight_version' must be >= 0, got -1"), std::string::npos) << msg;
  msg = error_message(*s.client, "/update_weight_version",
                      R"({"new_version": 9223372036854775808})", 400);
  EXPECT_NE(msg.find("new_version"), std::string::npos) << msg;
  EXPECT_EQ(s.client->get_weight_version(), 3);
}

TEST(ServerLimits, OutOfRangeIntegersAreReportedAsGiven) {
  Served s;
  auto body = [](const std::string& port, const std::string& rank, const std::string& world) {
    return R"({"master_address": "127.0.0.1", "master_port": )" + port + R"(, "rank_offset": )" +
           rank + R"(, "world_size": )" + world + "}";
  };
  auto msg =
      error_message(*s.client, "/init_weights_update_group", body("1099511627776", "1", "2"), 400);
  EXPECT_NE(msg.find("'master_port' must be in [1, 65535], got 1099511627776"), std::string::npos)
      << msg;
  msg =
      error_message(*s.client, "/init_weights_update_group", body("1234", "4294967297", "2"), 400);
  EXPECT_NE(msg.find("got 4294967297"), std::string::npos) << msg;
  msg =
      error_message(*s.client, "/init_weights_update_group", body("1234", "1", "4294967298"), 400);
  EXPECT_NE(msg.find("got 4294967298"), std::string::npos) << msg;
}

// ---- pause: new requests queue (SGLang's behaviour), and stay abortable and bounded ----

TEST(ServerPaused, QueuedRequestCanBeAbortedByRid) {
  Served s;
  s.client->pause_generation("in_place");
  auto pending = std::async(std::launch::async, [&] {
    return s.client->generate({1, 2}, sampling(100), true, "queued");
  });
  wait_until([&] { return s.backend->num_running() == 1; });
  EXPECT_EQ(pending.wait_for(200ms), std::future_status::timeout);  // queued, not answered
  s.client->abort_request("queued");
  ASSERT_EQ(pending.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(pending.get().finish_reason, "abort");
  s.client->continue_generation();
}

TEST(ServerPaused, ClientDisconnectEndsTheQueuedRequest) {
  Served s;
  s.client->pause_generation("retract");
  httplib::Client impatient(s.server->url());
  impatient.set_read_timeout(0, 300000);  // gives up (and closes) after 0.3 s
  Json body = {{"input_ids", {4, 5}}, {"sampling_params", sampling(10)}};
  EXPECT_FALSE(impatient.Post("/generate", body.dump(), "application/json"));
  impatient.stop();
  wait_until([&] { return s.backend->num_running() == 0; }, 3s);
  s.client->continue_generation();
}

TEST(ServerPaused, PausedRequestTimeoutAnswers503) {
  ServerOptions options;
  options.paused_request_timeout_s = 0.3;
  Served s(options);
  s.client->pause_generation("in_place");
  auto start = std::chrono::steady_clock::now();
  auto raw = s.client->request("POST", "/generate",
                               R"({"input_ids": [3], "sampling_params": {"max_new_tokens": 5}})");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(raw.status, 503) << raw.body;
  EXPECT_NE(raw.body.find("--paused-request-timeout"), std::string::npos) << raw.body;
  EXPECT_GE(seconds, 0.3);
  EXPECT_LT(seconds, 3.0);
  EXPECT_EQ(s.backend->num_running(), 0);
  // Once continued, requests are served as usual, and an unpaused wait is not bounded.
  s.client->continue_generation();
  EXPECT_EQ(s.client->generate({3}, sampling(200)).finish_reason, "length");
  options.paused_request_timeout_s = -1;
  EXPECT_THROW(EngineServer(s.backend, options), Error);
}

}  // namespace
}  // namespace furlong::engine::server
