// `furlong serve` end to end: the built binary serves a tiny Qwen3 (random weights, the real
// Qwen3 tokenizer) on a free loopback port, and the tests drive every endpoint over HTTP with
// EngineClient, acting as miles' RL loop does (and, for weight updates, as trainer rank 0).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <random>
#include <regex>
#include <thread>

#include "common/test_util.h"
#include "common/tiny_models.h"
#include "core/digest.h"
#include "core/files.h"
#include "engine/routed_experts_codec.h"
#include "engine/server/client.h"
#include "engine/server/remote_weights.h"
#include "engine/weight_sync.h"
#include "models/causal_lm.h"
#include "models/hf_model.h"

extern char** environ;

namespace furlong::engine::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using furlong::testing::run_command;
using furlong::testing::shell_quote;

constexpr const char* kApiKey = "e2e-secret";
constexpr int64_t kContext = 4096;

// The tiny Qwen3 of these tests: the shared one, with a long context and large weights (so that
// sampled text varies).
Json tiny_qwen3_config() {
  return furlong::testing::tiny_model_config(
      furlong::testing::TinyFamily::kQwen3,
      {{"max_position_embeddings", kContext}, {"initializer_range", 0.5}});
}

// A `furlong serve` child process; SIGTERM and reaped on destruction.
class ServeProcess {
 public:
  ServeProcess(const fs::path& model, const fs::path& log, const std::vector<std::string>& extra)
      : log_(log) {
    std::vector<std::string> args = {furlong::testing::furlong_binary().string(),
                                     "serve",
                                     "--hf-checkpoint",
                                     model.string(),
                                     "--port",
                                     "0",
                                     "--num-threads",
                                     "2",
                                     "--dtype",
                                     "float32"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    FURLONG_CHECK(rc == 0, "cannot start ", args[0], ": ", std::strerror(rc));
    url_ = wait_for_url(120s);
  }
  ~ServeProcess() {
    if (pid_ > 0) terminate(30s);
  }
  const std::string& url() const { return url_; }
  std::string log() const { return read_file(log_); }

  // SIGTERM, then the exit status (-1 if it had to be killed after `limit`).
  int terminate(std::chrono::seconds limit) {
    kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(20ms);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  static std::string read_file(const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // The address the server prints once ready.
  std::string wait_for_url(std::chrono::seconds limit) {
    static const std::regex kListening("listening on (http://[0-9.]+:[0-9]+)");
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      std::string text = read_file(log_);
      if (std::regex_search(text, m, kListening)) return m[1];
      int status = 0;
      FURLONG_CHECK(waitpid(pid_, &status, WNOHANG) == 0, "furlong serve exited early:\n", text);
      std::this_thread::sleep_for(50ms);
    }
    FURLONG_FAIL("furlong serve did not start within the limit:\n", read_file(log_));
  }

  fs::path log_;
  pid_t pid_ = -1;
  std::string url_;
};

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = furlong::testing::binary_dir() / "testdata" / ("serve." + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    furlong::testing::init_model(dir_, "model", tiny_qwen3_config(),
                                 furlong::testing::tokenizer_dir("qwen3"), /*seed=*/11);
    if (::testing::Test::HasFailure()) return;
    server_ = new ServeProcess(model(), dir_ / "serve.log", {"--api-key", kApiKey});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static fs::path model() { return dir_ / "model"; }
  static EngineClient client() { return EngineClient(server_->url(), ClientOptions{kApiKey}); }

  static fs::path dir_;
  static ServeProcess* server_;
};
fs::path Serve::dir_;
ServeProcess* Serve::server_ = nullptr;

Json greedy(int64_t max_new_tokens) {
  return Json{{"max_new_tokens", max_new_tokens}, {"temperature", 0.0}, {"ignore_eos", true}};
}

std::vector<std::vector<int64_t>> prompts(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> id(0, 150000);
  std::vector<std::vector<int64_t>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int64_t> p(3 + (i * 7) % 29);
    for (auto& t : p) t = id(rng);
    out.push_back(p);
  }
  return out;
}

void wait_until(const std::function<bool()>& cond, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "condition not reached in time";
    std::this_thread::sleep_for(10ms);
  }
}

std::string error_message(const EngineClient::Raw& raw) {
  Json json = Json::parse(raw.body, nullptr, false);
  if (!json.is_object() || !json.contains("error")) return "<no JSON error body: " + raw.body + ">";
  EXPECT_TRUE(json["error"].contains("type")) << raw.body;
  return json["error"]["message"].get<std::string>();
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST_F(Serve, InfoAndControlEndpointsAnswer) {
  auto c = client();
  EXPECT_TRUE(c.health());
  EXPECT_EQ(c.request("GET", "/health_generate", "").status, 200);
  Json info = c.get_model_info();
  EXPECT_EQ(info["weight_version"], "default");  // SGLang's type: a string
  EXPECT_EQ(info["is_generation"], true);
  Json server_info = c.get_server_info();
  EXPECT_EQ(server_info["context_length"], kContext);
  EXPECT_EQ(server_info["paused"], false);
  EXPECT_EQ(c.get_weight_version(), 0);
  EXPECT_EQ(c.get_weights_digest().size(), 16u);
  c.flush_cache();
  EXPECT_EQ(c.get("/v1/models")["data"].size(), 1u);
}

TEST_F(Serve, ThirtyTwoConcurrentClientsMatchOneByOne) {
  auto c = client();
  auto ps = prompts(32, 5);
  // Half greedy, half sampled with a fixed seed: both must not depend on the batch.
  auto params = [](int i) {
    Json p = greedy(12 + i % 5);
    if (i % 2) p.update({{"temperature", 0.8}, {"top_p", 0.9}, {"seed", 1000 + i}});
    return p;
  };
  std::vector<GenerateResult> one_by_one;
  for (int i = 0; i < 32; ++i) one_by_one.push_back(c.generate(ps[i], params(i)));
  std::vector<std::future<GenerateResult>> futures;
  for (int i = 0; i < 32; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      return EngineClient(server_->url(), ClientOptions{kApiKey}).generate(ps[i], params(i));
    }));
  }
  double max_dlogprob = 0;
  for (int i = 0; i < 32; ++i) {
    auto r = futures[i].get();
    EXPECT_EQ(r.output_ids, one_by_one[i].output_ids) << "request " << i;
    EXPECT_EQ(r.finish_reason, "length");
    ASSERT_EQ(r.output_logprobs.size(), one_by_one[i].output_logprobs.size());
    for (size_t t = 0; t < r.output_logprobs.size(); ++t) {
      max_dlogprob = std::max(
          max_dlogprob,
          static_cast<double>(std::abs(r.output_logprobs[t] - one_by_one[i].output_logprobs[t])));
    }
  }
  // fp32: batching may reorder reductions (matmul blocking); anything above float rounding
  // accumulated over two layers would be a real mismatch.
  EXPECT_LE(max_dlogprob, 1e-4);
  std::cout << "max |logprob(concurrent) - logprob(one by one)| = " << max_dlogprob << "\n";
}

// The n samples of one /generate call are queued at once (submit_all), so every sample after
// the first shares the prompt's prefill, however the HTTP thread and the scheduler interleave.
TEST_F(Serve, TheSamplesOfOneCallShareThePromptsPrefill) {
  auto c = client();
  auto prompt = prompts(2, 21)[1];  // 10 tokens
  for (int round = 0; round < 3; ++round) {
    const auto before = c.get_model_info()["prefix_shared_tokens"].get<int64_t>();
    Json out = c.post("/generate", Json{{"input_ids", prompt},
                                        {"sampling_params",
                                         {{"n", 4},
                                          {"max_new_tokens", 3},
                                          {"temperature", 1.0},
                                          {"sampling_seed", 7 + round}}}});
    ASSERT_TRUE(out.is_array()) << out.dump();
    EXPECT_EQ(out.size(), 4u);
    EXPECT_EQ(c.get_model_info()["prefix_shared_tokens"].get<int64_t>() - before,
              3 * static_cast<int64_t>(prompt.size()))
        << "round " << round;
  }
}

TEST_F(Serve, BadRequestsGetClearFourHundreds) {
  auto c = client();
  auto post = [&](const std::string& path, const std::string& body) {
    return c.request("POST", path, body);
  };
  auto expect_400 = [&](const std::string& body, const std::string& needle) {
    auto raw = post("/generate", body);
    EXPECT_EQ(raw.status, 400) << body;
    EXPECT_NE(error_message(raw).find(needle), std::string::npos)
        << body << " -> " << error_message(raw);
  };
  expect_400("{\"input_ids\": [1, 2,", "request body");
  expect_400(R"({"input_ids": "hello"})", "input_ids");
  expect_400(R"({"input_ids": [1], "sampling_params": {"top_k": 1.5}})", "top_k");
  expect_400(R"({"input_ids": [1], "sampling_params": {"temprature": 1}})", "temprature");
  expect_400(R"({"input_ids": [1], "return_logprobs": true})", "return_logprobs");
  expect_400(R"({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4095}})",
             "exceeds the context length 4096");
  expect_400(R"({"input_ids": [1, 99999999]})", "outside the vocabulary");
  auto raw = post("/v1/completions", R"({"prompt": [1, 2], "max_tokens": "many"})");
  EXPECT_EQ(raw.status, 400);
  EXPECT_NE(error_message(raw).find("max_new_tokens"), std::string::npos) << raw.body;
  EXPECT_TRUE(c.health());
}

// The probes that used to crash the server (a body nested 60,000 deep), abort everyone's
// generation (max_new_tokens near 2^63 overflowed the context check) or answer 500 (1e400),
// sent while another request generates: each gets a 400, and the other request runs to its
// full length.
TEST_F(Serve, HostileRequestsGet400sAndDoNotEndOtherRequests) {
  auto c = client();
  const int64_t version_before = c.get_weight_version();
  const int64_t max_new = 3000;
  auto bystander = std::async(std::launch::async, [&] {
    return client().generate({5, 6, 7}, greedy(max_new), true, "bystander");
  });
  wait_until([&] { return c.get_server_info()["num_running"].get<int64_t>() == 1; }, 30s);
  auto expect_400 = [&](const std::string& path, const std::string& body,
                        const std::string& needle) {
    auto raw = c.request("POST", path, body);
    EXPECT_EQ(raw.status, 400) << body.substr(0, 100);
    EXPECT_NE(error_message(raw).find(needle), std::string::npos)
        << body.substr(0, 100) << " -> " << error_message(raw).substr(0, 300);
  };
  std::string deep = std::string(60000, '[') + std::string(60000, ']');
  expect_400("/generate", "{\"input_ids\": " + deep + "}", "nested deeper than 128");
  expect_400("/v1/chat/completions", "{\"messages\": " + deep + "}", "nested deeper than 128");
  expect_400("/generate",
             R"({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 9223372036854775807}})",
             "exceeds the context length 4096");
  expect_400("/generate",
             R"({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 9223372036854775806}})",
             "exceeds the context length 4096");
  for (const char* field : {"temperature", "top_p", "max_new_tokens"}) {
    expect_400("/generate",
               std::string(R"({"input_ids": [1], "sampling_params": {")") + field + R"(": 1e400}})",
               field);
  }
  expect_400("/update_weight_version", R"({"new_version": -5})", "'new_version' must be >= 0");
  auto r = bystander.get();
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(static_cast<int64_t>(r.output_ids.size()), max_new);
  EXPECT_EQ(c.get_weight_version(), version_before);
  EXPECT_TRUE(c.health());
}

TEST_F(Serve, AbortFromAnotherThreadReturnsPartialOutput) {
  auto c = client();
  const int64_t max_new = kContext - 8;
  auto pending = std::async(std::launch::async, [&] {
    return c.generate({1, 2, 3, 4}, greedy(max_new), true, "abort-me");
  });
  wait_until([&] { return c.get_server_info()["num_running"].get<int64_t>() == 1; }, 30s);
  std::this_thread::sleep_for(300ms);
  client().abort_request("abort-me");
  auto r = pending.get();
  EXPECT_EQ(r.finish_reason, "abort");
  EXPECT_GT(r.output_ids.size(), 0u);
  EXPECT_LT(static_cast<int64_t>(r.output_ids.size()), max_new);
  EXPECT_EQ(r.output_logprobs.size(), r.output_ids.size());
  // The partial output is a prefix of the full greedy continuation.
  auto full = c.generate({1, 2, 3, 4}, greedy(static_cast<int64_t>(r.output_ids.size())));
  EXPECT_EQ(full.output_ids, r.output_ids);
}

TEST_F(Serve, StreamingEndsWithTheSameOutputAsAPlainRequest) {
  auto c = client();
  auto plain = c.generate({21, 22, 23}, greedy(24));
  size_t events = 0;
  Json last = c.generate_stream(
      Json{{"input_ids", {21, 22, 23}}, {"sampling_params", greedy(24)}, {"return_logprob", true}},
      [&](const Json&) { ++events; });
  auto streamed = parse_generate_result(last);
  EXPECT_EQ(streamed.output_ids, plain.output_ids);
  EXPECT_EQ(streamed.output_logprobs, plain.output_logprobs);
  EXPECT_EQ(streamed.finish_reason, "length");
  EXPECT_GE(events, 2u);
}

TEST_F(Serve, ApiKeyIsEnforced) {
  EngineClient anonymous(server_->url());
  EngineClient wrong(server_->url(), ClientOptions{"not-the-key"});
  EXPECT_EQ(anonymous.request("POST", "/generate", R"({"input_ids": [1]})").status, 401);
  EXPECT_EQ(wrong.request("GET", "/get_model_info", "").status, 401);
  EXPECT_EQ(anonymous.request("GET", "/health", "").status, 200);
  EXPECT_EQ(client().generate({1}, greedy(1)).output_ids.size(), 1u);
}

TEST_F(Serve, PauseAndContinue) {
  auto c = client();
  auto expected = c.generate({7, 8, 9}, greedy(6));
  c.pause_generation("in_place");
  auto pending = std::async(std::launch::async, [&] { return c.generate({7, 8, 9}, greedy(6)); });
  EXPECT_EQ(pending.wait_for(500ms), std::future_status::timeout);
  EXPECT_EQ(c.get_server_info()["paused"], true);
  c.continue_generation();
  EXPECT_EQ(pending.get().output_ids, expected.output_ids);
}

// While paused, a queued request is still answered when aborted by rid (the engine's
// scheduler takes aborts without stepping), and the pause holds for the others.
TEST_F(Serve, AbortWhilePausedAnswersTheQueuedRequest) {
  auto c = client();
  c.pause_generation("in_place");
  auto queued = std::async(std::launch::async, [&] {
    return client().generate({7, 8, 9}, greedy(6), true, "queued-while-paused");
  });
  wait_until([&] { return c.get_server_info()["num_running"].get<int64_t>() == 1; }, 30s);
  EXPECT_EQ(queued.wait_for(300ms), std::future_status::timeout);
  c.abort_request("queued-while-paused");
  ASSERT_EQ(queued.wait_for(10s), std::future_status::ready);
  auto r = queued.get();
  EXPECT_EQ(r.finish_reason, "abort");
  EXPECT_TRUE(r.output_ids.empty());
  EXPECT_EQ(c.get_server_info()["paused"], true);
  c.continue_generation();
  EXPECT_EQ(c.generate({7, 8, 9}, greedy(3)).finish_reason, "length");
}

TEST_F(Serve, ReleaseAndResumeMemory) {
  auto c = client();
  auto expected = c.generate({5, 6}, greedy(5));
  c.release_memory_occupation({"kv_cache", "cuda_graph"});
  EXPECT_EQ(c.get_server_info()["memory_released"], true);
  c.resume_memory_occupation();
  EXPECT_EQ(c.generate({5, 6}, greedy(5)).output_ids, expected.output_ids);
}

// The test process is trainer rank 0 (connect_remote_engines / update_remote_weights): it
// joins the engine's weight group over HTTP + Gloo, broadcasts perturbed weights, and the
// engine's digest must equal the sender's.
TEST_F(Serve, WeightUpdateOverTheDistributedEndpointsMatchesTheDigest) {
  auto c = client();
  c10::InferenceMode guard;
  auto before = c.generate({11, 12, 13}, greedy(8));
  auto lm = models::load_hf_model(model());
  auto named = lm->named_weights();
  at::manual_seed(3);
  for (auto& [name, t] : named) t = t + 0.05 * at::randn_like(t);
  std::string expected_digest = tensors_digest(named);
  ASSERT_NE(expected_digest, c.get_weights_digest());

  // Released weights must be refilled by the update (miles' colocated order).
  c.release_memory_occupation();
  c.resume_memory_occupation({"weights"});
  WeightGroupSpec spec;
  spec.master_port = free_port();
  spec.backend = "gloo";
  auto group = connect_remote_engines({&c}, spec);
  update_remote_weights({&c}, group->world(), named, /*version=*/1, spec.group_name);
  c.resume_memory_occupation({"kv_cache"});

  EXPECT_EQ(c.get_weights_digest(), expected_digest);
  EXPECT_EQ(c.get_weight_version(), 1);
  auto after = c.generate({11, 12, 13}, greedy(8));
  EXPECT_EQ(after.weight_version, 1);
  EXPECT_NE(after.output_logprobs, before.output_logprobs);
  c.destroy_weights_update_group(spec.group_name);
}

// Two engines in one group (ranks 1 and 2 of 3) receive the same broadcast.
TEST_F(Serve, TwoEnginesReceiveOneBroadcast) {
  ServeProcess second(model(), dir_ / "second_engine.log", {});
  auto first = client();
  EngineClient other(second.url());
  c10::InferenceMode guard;
  auto named = models::load_hf_model(model())->named_weights();
  for (auto& [name, t] : named) t = t * 0.9;
  WeightGroupSpec spec;
  spec.master_port = free_port();
  spec.backend = "gloo";
  spec.group_name = "two_engines";
  auto group = connect_remote_engines({&first, &other}, spec);
  update_remote_weights({&first, &other}, group->world(), named, /*version=*/5, spec.group_name);
  EXPECT_EQ(first.get_weights_digest(), tensors_digest(named));
  EXPECT_EQ(other.get_weights_digest(), tensors_digest(named));
  EXPECT_EQ(other.get_weight_version(), 5);
  EXPECT_EQ(first.generate({4, 5}, greedy(6)).output_ids,
            other.generate({4, 5}, greedy(6)).output_ids);
  first.destroy_weights_update_group(spec.group_name);
  other.destroy_weights_update_group(spec.group_name);
}

TEST_F(Serve, OpenAiCompletionsAndChat) {
  auto c = client();
  Json completion = c.post(
      "/v1/completions",
      Json{{"prompt", {1, 2, 3}}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}});
  auto expected = c.generate({1, 2, 3}, greedy(4));
  EXPECT_EQ(completion["choices"][0]["text"], expected.text);
  EXPECT_EQ(completion["usage"]["completion_tokens"], 4);
  Json chat =
      c.post("/v1/chat/completions", Json{{"messages", {{{"role", "user"}, {"content", "Say hi"}}}},
                                          {"max_tokens", 3},
                                          {"temperature", 0}});
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_GT(chat["usage"]["prompt_tokens"].get<int64_t>(), 5);
}

TEST_F(Serve, SigtermAbortsRunningRequestsAndExitsCleanly) {
  ServeProcess second(model(), dir_ / "second.log", {});
  EngineClient c(second.url());
  auto pending = std::async(std::launch::async, [&] {
    try {
      return c.generate({1, 2}, greedy(kContext - 4)).finish_reason;
    } catch (const Error& e) {
      return std::string("error: ") + e.what();
    }
  });
  wait_until([&] { return c.get_server_info()["num_running"].get<int64_t>() == 1; }, 30s);
  EXPECT_EQ(second.terminate(20s), 0) << second.log();
  EXPECT_EQ(pending.get(), "abort");
}

// `furlong serve --enable-return-routed-experts` on a tiny Qwen3-MoE: /generate answers SGLang's
// meta_info.routed_experts (base64 int32 [prompt + output - 1, L, K], valid distinct ids in the
// sparse layer, -1 in the dense one); without the flag the request is a 400 naming it.
TEST_F(Serve, EnableReturnRoutedExpertsAnswersSglangsField) {
  // Two layers, the first dense.
  const Json config = furlong::testing::as_qwen3_moe(
      tiny_qwen3_config(), {{"num_hidden_layers", 2}, {"mlp_only_layers", {0}}});
  const auto moe = furlong::testing::init_model(dir_, "moe", config,
                                                furlong::testing::tokenizer_dir("qwen3"), 5);
  ASSERT_FALSE(HasFailure());
  ServeProcess recording(moe, dir_ / "moe.log", {"--enable-return-routed-experts"});
  EngineClient c(recording.url());
  EXPECT_TRUE(c.get_model_info()["record_routed_experts"].get<bool>());
  const std::vector<int64_t> prompt = {11, 22, 33, 44, 55};
  auto out = c.generate(prompt, greedy(6), true, "", /*return_routed_experts=*/true);
  const int64_t T = static_cast<int64_t>(prompt.size() + out.output_ids.size()), L = 2, K = 2;
  auto bytes = base64_decode(out.routed_experts_base64, "test");
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), (T - 1) * L * K * 4) << out.raw.dump();
  auto routed = routed_experts_from_sglang(out.routed_experts_base64, T, L, K, "test");
  for (int64_t t = 0; t < T - 1; ++t) {
    const auto* dense = routed.ids.data() + (t * L + 0) * K;
    const auto* sparse = routed.ids.data() + (t * L + 1) * K;
    EXPECT_EQ(dense[0], -1);
    EXPECT_EQ(dense[1], -1);
    EXPECT_NE(sparse[0], sparse[1]);
    for (int k = 0; k < K; ++k) EXPECT_TRUE(sparse[k] >= 0 && sparse[k] < 8) << sparse[k];
  }

  ServeProcess plain(moe, dir_ / "moe_plain.log", {});
  auto raw = EngineClient(plain.url())
                 .request("POST", "/generate",
                          Json{{"input_ids", prompt}, {"return_routed_experts", true}}.dump());
  EXPECT_EQ(raw.status, 400);
  EXPECT_NE(error_message(raw).find("--enable-return-routed-experts"), std::string::npos)
      << raw.body;
}

}  // namespace
}  // namespace furlong::engine::server
