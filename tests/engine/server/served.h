// What the server tests share: an EngineServer on a free loopback port around a fresh scripted
// backend (no model), a client for it, and small helpers for requests and waiting.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "common/test_util.h"
#include "engine/server/client.h"
#include "engine/server/server.h"
#include "scripted_backend.h"

namespace furlong::engine::server::testing {

inline constexpr int64_t kContext = 100000;  // the scripted backend's context length

inline std::shared_ptr<ScriptedBackend> make_backend() {
  using namespace std::chrono_literals;
  return std::make_shared<ScriptedBackend>(furlong::testing::tokenizer_dir("qwen3"), kContext, 2ms);
}

struct Served {
  explicit Served(ServerOptions options = {}) : backend(make_backend()) {
    options.port = 0;
    server = std::make_unique<EngineServer>(backend, options);
    server->start();
    ClientOptions client_options{options.api_key};
    client_options.read_timeout_s = 20;  // a hang fails the test instead of stalling it
    client = std::make_unique<EngineClient>(server->url(), client_options);
  }
  std::shared_ptr<ScriptedBackend> backend;
  std::unique_ptr<EngineServer> server;
  std::unique_ptr<EngineClient> client;
};

// Greedy sampling_params with a token budget.
inline Json sampling(int64_t max_new_tokens) {
  return Json{{"max_new_tokens", max_new_tokens}, {"temperature", 0.0}};
}

// Polls `cond` every 5 ms; a test failure if it is not true within `limit`.
inline void wait_until(const std::function<bool()>& cond,
                       std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "condition not reached in time";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace furlong::engine::server::testing
