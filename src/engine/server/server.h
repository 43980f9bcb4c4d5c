// The engine's HTTP server: SGLang's endpoint names and payload shapes (what miles calls), plus
// OpenAI-compatible completions. See docs in cmd_serve.cpp for the endpoint list.
//
// Threading: a fixed pool of max_concurrent_requests handler threads (cpp-httplib's task
// queue); a generation request blocks its handler until the engine's callback delivers the
// output, the client hangs up (the request is aborted) or the server stops (all aborted).
// Every handler catches everything: bad input is a 4xx JSON error, an engine failure a 500,
// never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/server/backend.h"

namespace furlong::engine::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless asked otherwise
  int port = 30000;                // 0 = any free port
  std::string api_key;             // non-empty: every endpoint but /health* needs Bearer <key>
  int64_t max_concurrent_requests = 256;  // handler threads (connections served at once)
  int64_t max_request_bytes = int64_t{64} << 20;
  std::string served_model_name;          // the "model" of OpenAI responses
  double health_generate_timeout_s = 60;  // /health_generate's one-token generation
};

class EngineServer {
 public:
  EngineServer(std::shared_ptr<EngineBackend> backend, ServerOptions options);
  ~EngineServer();  // stop()s
  EngineServer(const EngineServer&) = delete;
  EngineServer& operator=(const EngineServer&) = delete;

  // Binds and starts serving on a background thread; returns the bound port. furlong::Error if
  // the address cannot be bound.
  int start();
  // Blocks until the server has stopped.
  void wait();
  // Aborts in-flight generations, stops accepting, joins the handlers. Idempotent.
  void stop();
  int port() const;
  std::string url() const;  // http://host:port

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace furlong::engine::server
