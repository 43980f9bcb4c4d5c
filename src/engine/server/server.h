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

// 64 MiB: a batch of 256 prompts of 32k token ids as JSON text fits; a body is held in memory
// once per connection being served.
inline constexpr int64_t kDefaultMaxRequestBytes = int64_t{64} << 20;
// Handler threads are all started with the listener; beyond what the process may create, that
// start would end in std::terminate, so the count is bounded up front.
inline constexpr int64_t kMaxConcurrentRequests = 4096;

// 256 prompts x 16 samples: a GRPO rollout batch sent as one /generate call.
inline constexpr int64_t kDefaultMaxSamplesPerRequest = 4096;

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless asked otherwise
  int port = 30000;                // 0 = any free port
  std::string api_key;             // non-empty: every endpoint but /health* needs Bearer <key>
  int64_t max_concurrent_requests = 256;  // handler threads (connections served at once)
  // Larger bodies are answered 413 before they are read into memory (or parsed, or tokenized).
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  // Request line and headers must arrive within this many seconds of the connection (or of a
  // kept-alive connection's next first byte), else 408 and closed. A connection waiting for its
  // header holds no handler thread.
  double header_timeout_s = 10;
  // Connections waiting for a request header (new, slow or idle kept-alive) beyond this bound
  // are closed, the one waiting longest first.
  int64_t max_waiting_connections = 512;
  // Generations one request may queue: prompts x n of /generate and the OpenAI routes (400
  // beyond), so a small body cannot demand unbounded memory.
  int64_t max_samples_per_request = kDefaultMaxSamplesPerRequest;
  std::string served_model_name;          // the "model" of OpenAI responses
  double health_generate_timeout_s = 60;  // /health_generate's one-token generation
  // While generation is paused, requests queue (SGLang's behaviour, what miles expects) until
  // /continue_generation; abort and client disconnects still end them. A positive bound answers
  // a request 503 once it has waited that many seconds in a paused server (0 = wait).
  double paused_request_timeout_s = 0;
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
