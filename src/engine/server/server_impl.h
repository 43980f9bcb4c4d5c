// Private to the server: EngineServer::Impl and the helpers its route files share
// (server.cpp: lifecycle, control, weight, memory and info routes; generation_routes.cpp:
// /generate, OpenAI and tokenizer routes).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/log.h"
#include "engine/server/api.h"
#include "engine/server/connection_watch.h"
#include "engine/server/http_server.h"
#include "engine/server/openai_api.h"
#include "engine/server/server.h"

namespace furlong::engine::server {

using Clock = std::chrono::steady_clock;
using httplib::Request;
using httplib::Response;

inline void send_json(Response& res, const Json& body, int status = 200) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

inline void send_error(Response& res, int status, const std::string& type,
                       const std::string& message) {
  send_json(res, error_body(message, type, status), status);
}

inline Json ok(const std::string& message) {
  return Json{{"success", true}, {"message", message}};
}

// A request body that may be empty (then {}).
inline Json optional_body(const Request& req, const std::string& endpoint) {
  if (req.body.find_first_not_of(" \t\r\n") == std::string::npos) return Json::object();
  return parse_body(req.body, endpoint);
}

// Outputs of submitted requests, filled by engine callbacks (engine thread).
struct Waiter {
  std::mutex mutex;
  std::condition_variable done;
  std::vector<std::optional<GenerateOutput>> outputs;
  size_t remaining = 0;
};

inline std::string sse_event(const Json& data) {
  return "data: " + data.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

// A streamed generation: tokens so far (engine thread appends) and the final output.
struct Stream {
  std::mutex mutex;
  std::condition_variable changed;
  GenerateOutput partial;
  std::optional<GenerateOutput> final_output;
  size_t sent_tokens = 0;
  RequestId id = -1;
};

// One choice of a streamed OpenAI call: what the engine produced and what was sent.
struct ChoiceStream {
  GenerateOutput partial;
  std::optional<GenerateOutput> final_output;
  size_t sent_tokens = 0;
  std::string sent_text;
  bool started = false;   // the first chunk (chat: the role) went out
  bool finished = false;  // the chunk with the finish reason went out
  RequestId id = -1;
};

struct OpenAiStream {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<ChoiceStream> choices;
};

struct EngineServer::Impl {
  std::shared_ptr<EngineBackend> backend;
  ServerOptions options;
  HttpServer http;
  std::thread listener;
  int port = -1;
  std::atomic<bool> stopping{false};
  std::atomic<bool> stopped{false};
  std::atomic<bool> paused{false};
  // When /pause_generation paused the server (steady-clock ticks); meaningful while paused.
  std::atomic<Clock::rep> paused_since{0};
  std::atomic<int64_t> next_rid{0};
  std::mutex rids_mutex;
  std::unordered_map<std::string, RequestId> active;  // rid -> engine id

  Impl(std::shared_ptr<EngineBackend> b, ServerOptions o)
      : backend(std::move(b)), options(std::move(o)) {}

  ModelLimits limits() const {
    return {backend->vocab_size(), backend->context_length(), options.max_samples_per_request};
  }
  // The API key, when one is set, is given (every /health* endpoint is open).
  bool authorized(const Request& req) const;
  // With --paused-request-timeout: whether a request that arrived at `arrived` has waited
  // longer than the bound while generation is paused (counted from the later of its arrival
  // and the pause).
  bool waited_paused_too_long(Clock::time_point arrived) const {
    if (options.paused_request_timeout_s <= 0 || !paused) return false;
    auto since = std::max(arrived, Clock::time_point(Clock::duration(paused_since.load())));
    return Clock::now() - since > std::chrono::duration<double>(options.paused_request_timeout_s);
  }
  // The engine's model info with the weight version in SGLang's type (a string).
  Json model_info_json() const {
    Json info = backend->model_info();
    info["weight_version"] = weight_version_json(backend->weight_version());
    return info;
  }
  std::string make_rid() { return "furlong-" + std::to_string(next_rid.fetch_add(1)); }

  // Runs one endpoint; every exception becomes a JSON error response.
  template <typename Fn>
  void guarded(const Request& req, Response& res, Fn&& fn) {
    try {
      fn();
    } catch (const ApiError& e) {
      send_error(res, e.status(), e.type(), e.what());
    } catch (const std::bad_alloc&) {
      // The request's own allocations are gone by now (unwound): the server can answer.
      LOG_ERROR(req.method, " ", req.path, ": out of memory");
      send_error(res, 503, "unavailable",
                 "out of memory while serving this request: retry later, or ask for fewer "
                 "samples or tokens (--max-samples-per-request)");
    } catch (const Error& e) {
      send_error(res, 400, "invalid_request_error", e.what());
    } catch (const std::exception& e) {
      LOG_ERROR(req.method, " ", req.path, " failed: ", e.what());
      send_error(res, 500, "internal_error", std::string("internal error: ") + e.what());
    } catch (...) {
      send_error(res, 500, "internal_error", "internal error (unknown exception)");
    }
  }
  template <typename Fn>
  void get(const std::string& path, Fn fn) {
    http.Get(path, [this, fn](const Request& q, Response& r) { guarded(q, r, [&] { fn(q, r); }); });
  }
  template <typename Fn>
  void post(const std::string& path, Fn fn) {
    http.Post(path,
              [this, fn](const Request& q, Response& r) { guarded(q, r, [&] { fn(q, r); }); });
  }

  std::vector<GenerateOutput> run(const Request& req, std::vector<GenerateItem>& items);
  void stream(const Request& req, Response& res, GenerateCall call);
  bool stream_step(const std::shared_ptr<Stream>& st, const GenerateCall& call,
                   const ConnectionWatch& watch, Clock::time_point start, httplib::DataSink& sink);
  // OpenAI's streamed completions: one SSE chunk per choice as its text grows, then the usage
  // chunk (when asked) and `data: [DONE]`.
  void openai_stream(const Request& req, Response& res, std::shared_ptr<OpenAiCall> call,
                     OpenAiIds ids);
  bool openai_stream_step(const std::shared_ptr<OpenAiStream>& st, const OpenAiCall& call,
                          const OpenAiIds& ids, const ConnectionWatch& watch,
                          Clock::time_point start, httplib::DataSink& sink);
  // Scores the prompts whose log-probs a call asked for (one full forward each).
  void fill_prompt_logprobs(GenerateCall& call);
  void fill_prompt_logprobs(OpenAiCall& call);
  void register_rids(const std::vector<GenerateItem>& items);
  void unregister_rids(const std::vector<GenerateItem>& items);

  void install_hooks();
  void install_generation_routes();
  void install_control_routes();
  void install_weight_routes();
  void install_memory_routes();
  void install_info_routes();
  void install_openai_routes();
  void install_tokenizer_routes();
  bool health_generate();
};

}  // namespace furlong::engine::server
