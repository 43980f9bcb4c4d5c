// The engine's HTTP server (see server.h): lifecycle, auth, error bodies, blocking generation,
// and the control, weight, memory and info routes (generation routes: generation_routes.cpp).
#include "engine/server/server.h"

#include <strings.h>

#include <cmath>

#include <algorithm>
#include <limits>
#include <utility>

#include "core/log.h"
#include "engine/server/connection_watch.h"
#include "engine/server/server_impl.h"
#include "engine/weight_sync.h"
#include "tokenizer/tokenizer.h"

namespace furlong::engine::server {
namespace {

// An integer field that must lie in [lo, hi]; the message shows the value as given (never a
// narrowed one: a port of 2^40 is not reported as 0).
int int_field(const Json& body, const char* field, int64_t lo, int64_t hi,
              const std::string& where) {
  auto value = json_get<int64_t>(body, field, where);
  if (value < lo || value > hi) {
    bad_request(where + ": '" + field + "' must be in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "], got " + std::to_string(value));
  }
  return static_cast<int>(value);
}

}  // namespace

void EngineServer::Impl::register_rids(const std::vector<GenerateItem>& items) {
  std::lock_guard<std::mutex> lock(rids_mutex);
  for (size_t i = 0; i < items.size(); ++i) {
    if (active.count(items[i].rid)) {
      for (size_t j = 0; j < i; ++j) active.erase(items[j].rid);
      bad_request("rid '" + items[i].rid + "' is already in use by a running request");
    }
    active.emplace(items[i].rid, -1);
  }
}

void EngineServer::Impl::unregister_rids(const std::vector<GenerateItem>& items) {
  std::lock_guard<std::mutex> lock(rids_mutex);
  for (const auto& item : items) active.erase(item.rid);
}

// Submits every item, then waits for all outputs; aborts them when the client hangs up or the
// server stops (their outputs then come back with finish_reason abort).
std::vector<GenerateOutput> EngineServer::Impl::run(const Request& req,
                                                    std::vector<GenerateItem>& items) {
  const auto arrived = Clock::now();
  register_rids(items);
  auto waiter = std::make_shared<Waiter>();
  waiter->outputs.resize(items.size());
  waiter->remaining = items.size();
  std::vector<RequestId> ids;
  auto abort_submitted = [&] {
    for (RequestId id : ids) backend->abort(id);
  };
  std::vector<Engine::Submission> batch;
  for (size_t i = 0; i < items.size(); ++i) {
    auto on_done = [waiter, i](RequestId, GenerateOutput output) {
      std::lock_guard<std::mutex> lock(waiter->mutex);
      waiter->outputs[i] = std::move(output);
      --waiter->remaining;
      waiter->done.notify_all();
    };
    batch.push_back({items[i].request, std::move(on_done), {}});
  }
  try {
    // All at once: the n samples of a prompt are admitted together (and share its prefill),
    // and a rejected prompt fails the whole call with none queued.
    ids = backend->submit_all(std::move(batch));
  } catch (...) {
    unregister_rids(items);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(rids_mutex);
    for (size_t i = 0; i < items.size(); ++i) active[items[i].rid] = ids[i];
  }
  std::optional<ConnectionWatch> watch;
  bool aborted = false;
  bool paused_too_long = false;
  std::unique_lock<std::mutex> lock(waiter->mutex);
  while (!waiter->done.wait_for(lock, std::chrono::milliseconds(100),
                                [&] { return waiter->remaining == 0; })) {
    if (aborted) continue;
    if (!watch) watch.emplace(req.remote_addr, req.remote_port, req.local_port);
    paused_too_long = waited_paused_too_long(arrived);
    if (stopping || paused_too_long || watch->peer_closed()) {
      LOG_INFO("aborting ", ids.size(), " request(s): ",
               stopping          ? "the server is stopping"
               : paused_too_long ? "generation has been paused longer than the bound"
                                 : "the client disconnected");
      lock.unlock();
      abort_submitted();
      lock.lock();
      aborted = true;
    }
  }
  lock.unlock();
  unregister_rids(items);
  if (paused_too_long) {
    throw ApiError(503, "unavailable",
                   "generation is paused (/pause_generation) and this request waited longer "
                   "than --paused-request-timeout (" +
                       std::to_string(options.paused_request_timeout_s) +
                       " s) for /continue_generation; retry later");
  }
  std::vector<GenerateOutput> outputs;
  for (auto& o : waiter->outputs) outputs.push_back(std::move(*o));
  return outputs;
}

void EngineServer::Impl::install_control_routes() {
  post("/pause_generation", [this](const Request& req, Response& res) {
    Json body = optional_body(req, "/pause_generation");
    check_known_fields(body, {"mode"}, "/pause_generation");
    auto mode = json_get_or<std::string>(body, "mode", "retract", "/pause_generation");
    if (mode != "retract" && mode != "in_place" && mode != "abort") {
      bad_request("/pause_generation: 'mode' must be retract, in_place or abort, got '" + mode +
                  "'");
    }
    // Running requests keep their KV cache either way; "abort" ends them first.
    if (mode == "abort") backend->abort_all();
    backend->pause_generation();
    if (!paused) paused_since = Clock::now().time_since_epoch().count();
    paused = true;
    send_json(res, ok("generation paused (" + mode + ")"));
  });
  post("/continue_generation", [this](const Request& req, Response& res) {
    check_known_fields(optional_body(req, "/continue_generation"), {}, "/continue_generation");
    backend->continue_generation();
    paused = false;
    send_json(res, ok("generation continued"));
  });
  auto flush = [this](const Request&, Response& res) {
    backend->flush_cache();
    send_json(res, ok("cache flushed"));
  };
  get("/flush_cache", flush);
  post("/flush_cache", flush);
}

void EngineServer::Impl::install_weight_routes() {
  post("/init_weights_update_group", [this](const Request& req, Response& res) {
    const std::string where = "/init_weights_update_group";
    Json body = parse_body(req.body, where);
    check_known_fields(
        body,
        {"master_address", "master_port", "rank_offset", "world_size", "group_name", "backend"},
        where);
    WeightGroupSpec spec;
    spec.master_addr = json_get<std::string>(body, "master_address", where);
    spec.master_port = int_field(body, "master_port", 1, 65535, where);
    spec.world_size = int_field(body, "world_size", 2, std::numeric_limits<int>::max(), where);
    spec.rank_offset = int_field(body, "rank_offset", 1, spec.world_size - 1, where);
    spec.group_name = json_get_or<std::string>(body, "group_name", spec.group_name, where);
    spec.backend = json_get_or<std::string>(body, "backend", spec.backend, where);
    backend->init_weights_update_group(spec);
    send_json(res, ok("joined weight update group '" + spec.group_name + "'"));
  });
  post("/destroy_weights_update_group", [this](const Request& req, Response& res) {
    check_known_fields(optional_body(req, "/destroy_weights_update_group"), {"group_name"},
                       "/destroy_weights_update_group");
    backend->destroy_weights_update_group();
    send_json(res, ok("weight update group destroyed"));
  });
  post("/update_weights_from_distributed", [this](const Request& req, Response& res) {
    const std::string where = "/update_weights_from_distributed";
    Json body = parse_body(req.body, where);
    check_known_fields(body,
                       {"names", "dtypes", "shapes", "group_name", "flush_cache", "selector",
                        "weight_version", "load_format", "abort_all_requests"},
                       where);
    const auto metas = parse_weight_metas(body, where);
    int64_t version = -1;
    if (body.contains("weight_version") && !body["weight_version"].is_null())
      version = parse_weight_version(body["weight_version"], "weight_version", where);
    backend->update_weights_from_distributed(metas, version);
    Json reply = ok("updated " + std::to_string(metas.size()) + " tensors");
    reply["weight_version"] = weight_version_json(backend->weight_version());
    send_json(res, reply);
  });
  post("/update_weight_version", [this](const Request& req, Response& res) {
    const std::string where = "/update_weight_version";
    Json body = parse_body(req.body, where);
    check_known_fields(body, {"new_version", "abort_all_requests"}, where);
    FURLONG_CHECK(body.contains("new_version"), where, ": required field 'new_version' is missing");
    int64_t version = parse_weight_version(body["new_version"], "new_version", where);
    if (json_get_or<bool>(body, "abort_all_requests", false, where)) backend->abort_all();
    backend->set_weight_version(version);
    send_json(res, Json{{"success", true},
                        {"weight_version", weight_version_json(backend->weight_version())}});
  });
  // SGLang's UpdateWeightFromDiskReqInput: a HF directory of the same architecture. Answers
  // {success, message} (400 with success false on failure; the served weights are untouched).
  post("/update_weights_from_disk", [this](const Request& req, Response& res) {
    const std::string where = "/update_weights_from_disk";
    Json body = parse_body(req.body, where);
    check_known_fields(
        body,
        {"model_path", "load_format", "abort_all_requests", "weight_version", "is_async",
         "torch_empty_cache", "keep_pause", "recapture_cuda_graph", "token_step", "flush_cache"},
        where);
    auto path = json_get<std::string>(body, "model_path", where);
    auto format = json_get_or<std::string>(body, "load_format", "auto", where);
    if (format != "auto" && format != "safetensors") {
      bad_request(where + ": 'load_format' = '" + format + "' is not served (auto or safetensors)");
    }
    int64_t version = -1;
    if (body.contains("weight_version") && !body["weight_version"].is_null())
      version = parse_weight_version(body["weight_version"], "weight_version", where);
    if (json_get_or<bool>(body, "abort_all_requests", false, where)) backend->abort_all();
    try {
      backend->update_weights_from_disk(path, version);
    } catch (const Error& e) {
      return send_json(res, Json{{"success", false}, {"message", e.what()}}, 400);
    }
    Json reply = ok("loaded the weights of " + path);
    reply["num_paused_requests"] = 0;
    reply["weight_version"] = weight_version_json(backend->weight_version());
    send_json(res, reply);
  });
  get("/get_weight_version", [this](const Request&, Response& res) {
    send_json(res, Json{{"weight_version", weight_version_json(backend->weight_version())}});
  });
  auto digest = [this](const Request&, Response& res) {
    send_json(res, Json{{"digest", backend->weights_digest()},
                        {"weight_version", weight_version_json(backend->weight_version())}});
  };
  get("/get_weights_digest", digest);
  post("/get_weights_digest", digest);
}

void EngineServer::Impl::install_memory_routes() {
  // SGLang's tags: weights, kv_cache, cuda_graph (absent = all). The engine releases the KV
  // cache with any of them, and the weights too when "weights" is named.
  auto tags_of = [](const Json& body, const std::string& where) {
    check_known_fields(body, {"tags"}, where);
    std::vector<std::string> tags = {"weights", "kv_cache", "cuda_graph"};
    if (body.contains("tags") && !body["tags"].is_null())
      tags = json_get<std::vector<std::string>>(body, "tags", where);
    for (const auto& t : tags) {
      FURLONG_CHECK(t == "weights" || t == "kv_cache" || t == "cuda_graph", where, ": tag '", t,
                    "' is not one of weights, kv_cache, cuda_graph");
    }
    return tags;
  };
  post("/release_memory_occupation", [this, tags_of](const Request& req, Response& res) {
    const std::string where = "/release_memory_occupation";
    auto tags = tags_of(optional_body(req, where), where);
    bool weights = std::find(tags.begin(), tags.end(), "weights") != tags.end();
    if (!backend->memory_released()) backend->release_memory(weights);
    send_json(res, ok(weights ? "released KV cache and weights" : "released KV cache"));
  });
  post("/resume_memory_occupation", [this, tags_of](const Request& req, Response& res) {
    const std::string where = "/resume_memory_occupation";
    tags_of(optional_body(req, where), where);
    if (backend->memory_released()) backend->resume_memory();
    send_json(res, ok("memory resumed"));
  });
}

// One greedy token from a one-token prompt, bounded in time.
bool EngineServer::Impl::health_generate() {
  GenerateRequest request;
  request.input_ids = {0};
  request.sampling.temperature = 0;
  request.sampling.max_new_tokens = 1;
  auto waiter = std::make_shared<Waiter>();
  waiter->remaining = 1;
  RequestId id = backend->submit(request,
                                 [waiter](RequestId, GenerateOutput) {
                                   std::lock_guard<std::mutex> lock(waiter->mutex);
                                   waiter->remaining = 0;
                                   waiter->done.notify_all();
                                 },
                                 {});
  std::unique_lock<std::mutex> lock(waiter->mutex);
  auto timeout = std::chrono::duration<double>(options.health_generate_timeout_s);
  if (waiter->done.wait_for(lock, timeout, [&] { return waiter->remaining == 0; })) return true;
  lock.unlock();
  backend->abort(id);
  return false;
}

void EngineServer::Impl::install_info_routes() {
  get("/health", [](const Request&, Response& res) { send_json(res, Json{{"status", "ok"}}); });
  get("/health_generate", [this](const Request&, Response& res) {
    // Paused or released engines cannot generate by design; they are healthy.
    if (paused || backend->memory_released())
      return send_json(res, Json{{"status", "ok"}, {"generated", false}});
    try {
      if (!health_generate())
        return send_error(res, 503, "unavailable", "the engine did not generate in time");
    } catch (const Error& e) {
      return send_error(res, 503, "unavailable",
                        std::string("the engine cannot generate: ") + e.what());
    }
    send_json(res, Json{{"status", "ok"}, {"generated", true}});
  });
  auto model_info = [this](const Request&, Response& res) {
    Json info = model_info_json();
    info["is_generation"] = true;
    info["weight_version"] = weight_version_json(backend->weight_version());
    info["served_model_name"] = options.served_model_name;
    send_json(res, info);
  };
  get("/get_model_info", model_info);
  get("/model_info", model_info);
  auto server_info = [this](const Request&, Response& res) {
    send_json(res, Json{{"host", options.host},
                        {"port", port},
                        {"max_concurrent_requests", options.max_concurrent_requests},
                        {"context_length", backend->context_length()},
                        {"paused", paused.load()},
                        {"memory_released", backend->memory_released()},
                        {"num_running", backend->num_running()},
                        {"weight_version", weight_version_json(backend->weight_version())},
                        {"model_info", model_info_json()}});
  };
  get("/get_server_info", server_info);
  get("/server_info", server_info);
  get("/v1/models", [this](const Request&, Response& res) {
    send_json(res, Json{{"object", "list"},
                        {"data", Json::array({{{"id", options.served_model_name},
                                               {"object", "model"},
                                               {"owned_by", "furlong"}}})}});
  });
}

bool EngineServer::Impl::authorized(const Request& req) const {
  return options.api_key.empty() || req.path.rfind("/health", 0) == 0 ||
         same_secret(req.get_header_value("Authorization"), "Bearer " + options.api_key);
}

void EngineServer::Impl::install_hooks() {
  GateOptions gate;
  gate.header_timeout_s = options.header_timeout_s;
  gate.max_waiting = static_cast<size_t>(options.max_waiting_connections);
  gate.handler_threads = static_cast<size_t>(options.max_concurrent_requests);
  http.configure(gate, options.max_request_bytes);
  http.set_payload_max_length(static_cast<size_t>(options.max_request_bytes));
  // Runs once the header is in, before any of the body is read.
  http.set_pre_routing_handler([this](const Request& req, Response& res) {
    if (!authorized(req)) {
      send_error(res, 401, "authentication_error",
                 "missing or wrong API key: send the header 'Authorization: Bearer <key>'");
      return httplib::Server::HandlerResponse::Handled;
    }
    // cpp-httplib would inflate it with no bound: --max-request-bytes caps only the bytes sent.
    const std::string encoding = req.get_header_value("Content-Encoding");
    if (!encoding.empty() && strcasecmp(encoding.c_str(), "identity") != 0) {
      send_error(res, 415, "invalid_request_error",
                 "request bodies with Content-Encoding '" + encoding.substr(0, 40) +
                     "' are not accepted: send them uncompressed");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([this](const Request& req, Response& res) {
    const RequestStream* stream = HttpServer::current_stream();
    // A chunked body stopped at the limit fails cpp-httplib's read, which it answers 400.
    if (stream && res.status == 400 && stream->body_too_large()) {
      res.status = 413;
      res.body.clear();
    }
    // The rest of an unread body would be taken for the next request: this one is the last.
    if (stream && !stream->body_complete()) res.set_header("Connection", "close");
    if (!res.body.empty()) return;  // an endpoint's own error body
    if (res.status == 404) {
      send_error(res, 404, "not_found_error", "no endpoint " + req.method + " " + req.path);
    } else if (res.status == 413) {
      send_error(res, 413, "invalid_request_error",
                 "the request body is larger than --max-request-bytes (" +
                     std::to_string(options.max_request_bytes) + " bytes)");
    } else {
      send_error(res, res.status, "invalid_request_error",
                 "HTTP error " + std::to_string(res.status));
    }
  });
  http.set_logger([](const Request& req, const Response& res) {
    LOG_DEBUG(req.method, " ", req.path, " -> ", res.status, " (", req.remote_addr, ":",
              req.remote_port, ")");
  });
  http.set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
    send_error(res, 500, "internal_error", "internal error");
  });
}

EngineServer::EngineServer(std::shared_ptr<EngineBackend> backend, ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(backend), std::move(options))) {
  FURLONG_CHECK(impl_->backend != nullptr, "EngineServer: no engine backend");
  FURLONG_CHECK(impl_->options.max_concurrent_requests >= 1 &&
                    impl_->options.max_concurrent_requests <= kMaxConcurrentRequests,
                "--max-concurrent-requests must be in [1, ", kMaxConcurrentRequests,
                "] (one handler thread each), got ", impl_->options.max_concurrent_requests);
  FURLONG_CHECK(impl_->options.max_request_bytes >= 1024,
                "--max-request-bytes must be >= 1024, got ", impl_->options.max_request_bytes);
  FURLONG_CHECK(impl_->options.paused_request_timeout_s >= 0 &&
                    std::isfinite(impl_->options.paused_request_timeout_s),
                "--paused-request-timeout must be a finite number of seconds >= 0 (0 = wait), got ",
                impl_->options.paused_request_timeout_s);
  const auto& o = impl_->options;
  FURLONG_CHECK(o.header_timeout_s > 0 && o.header_timeout_s <= 86400,
                "--header-timeout must be in (0, 86400] seconds, got ", o.header_timeout_s);
  FURLONG_CHECK(o.max_waiting_connections >= 1, "--max-waiting-connections must be >= 1, got ",
                o.max_waiting_connections);
  FURLONG_CHECK(o.max_samples_per_request >= 1, "--max-samples-per-request must be >= 1, got ",
                o.max_samples_per_request);
  if (impl_->options.served_model_name.empty()) {
    impl_->options.served_model_name =
        impl_->backend->model_info().value("model_path", std::string("furlong"));
  }
  impl_->install_hooks();
  impl_->install_info_routes();
  impl_->install_generation_routes();
  impl_->install_control_routes();
  impl_->install_weight_routes();
  impl_->install_memory_routes();
}

EngineServer::~EngineServer() {
  stop();
}

int EngineServer::start() {
  impl_->port = impl_->http.bind(impl_->options.host, impl_->options.port);
  impl_->http.widen_backlog();
  impl_->listener = std::thread([this] { impl_->http.listen_after_bind(); });
  // httplib::Server::stop() does nothing until the accept loop runs: a stop() right after
  // start() would then leave the listener accepting and wait() joining it forever.
  for (int i = 0; i < 5000 && !impl_->http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return impl_->port;
}

void EngineServer::wait() {
  if (impl_->listener.joinable()) impl_->listener.join();
}

void EngineServer::stop() {
  if (impl_->stopped.exchange(true)) return;
  impl_->stopping = true;
  impl_->http.stop();
  wait();
  impl_->http.stop_gate();
}

int EngineServer::port() const {
  return impl_->port;
}

std::string EngineServer::url() const {
  return "http://" + impl_->options.host + ":" + std::to_string(impl_->port);
}

}  // namespace furlong::engine::server
