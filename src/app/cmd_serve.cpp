// furlong serve: one rollout engine behind an HTTP server, the role an SGLang server plays for
// miles in the disaggregated layout. Endpoints (SGLang's names and payloads):
//   POST /generate                  {input_ids | text (one or a batch), sampling_params,
//                                    return_logprob, rid}
//   POST /abort_request             {rid} or {abort_all: true}
//   GET  /health, /health_generate, /get_model_info, /get_server_info, /get_weight_version,
//        /get_weights_digest, /v1/models
//   GET|POST /flush_cache;  POST /pause_generation {mode}, /continue_generation
//   POST /init_weights_update_group, /update_weights_from_distributed,
//        /destroy_weights_update_group, /update_weight_version
//   POST /release_memory_occupation {tags}, /resume_memory_occupation {tags}
//   POST /v1/completions, /v1/chat/completions (OpenAI-compatible, non-streaming)
// The listening address is printed on stdout once the model is loaded; SIGINT/SIGTERM abort
// running generations and stop the server.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>

#include "app/common.h"
#include "core/log.h"
#include "engine/server/server.h"

namespace furlong::app {
namespace {

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1";
}

engine::server::ServerOptions server_options(const ServeOptions& o) {
  FURLONG_CHECK(o.port >= 0 && o.port <= 65535, "--port must be in [0, 65535], got ", o.port);
  engine::server::ServerOptions s;
  s.host = o.host;
  s.port = static_cast<int>(o.port);
  s.api_key = o.api_key;
  s.max_concurrent_requests = o.max_concurrent_requests;
  s.max_request_bytes = o.max_request_bytes;
  s.paused_request_timeout_s = o.paused_request_timeout_s;
  s.header_timeout_s = o.header_timeout_s;
  s.max_waiting_connections = o.max_waiting_connections;
  s.max_samples_per_request = o.max_samples_per_request;
  s.served_model_name = o.served_model_name;
  if (!is_loopback(o.host) && o.api_key.empty()) {
    LOG_WARN("serving on ", o.host, " without --api-key: anyone who can reach it can use it");
  }
  return s;
}

}  // namespace

int run_serve(const std::vector<std::string>& args) {
  ServeOptions o;
  config::FlagSet flags("furlong serve",
                        "Serve a HF model over HTTP with SGLang's endpoints (/generate, weight "
                        "updates, pause/continue, memory release) and OpenAI's completions.");
  register_flags(flags, o);
  if (!flags.parse(args)) return 0;
  auto server_opts = server_options(o);
  // SIGINT/SIGTERM are blocked in every thread (the engine's and the server's threads inherit
  // the mask) and taken here by sigwait, so shutdown runs as ordinary code, not in a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::shared_ptr<engine::Engine> engine = engine::Engine::load(o.hf_checkpoint, o.engine);
  engine::server::EngineServer server(engine::server::make_engine_backend(engine, o.hf_checkpoint),
                                      server_opts);
  server.start();
  std::printf("furlong serve: listening on %s\n", server.url().c_str());
  std::fflush(stdout);
  LOG_INFO("serving ", o.hf_checkpoint, " on ", server.url(),
           o.api_key.empty() ? "" : " (API key required)");
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LOG_INFO("received ", strsignal(signal_number), ": aborting running requests and stopping");
  server.stop();
  return 0;
}

}  // namespace furlong::app
