// A client for furlong's (and SGLang's) engine HTTP API: what the RL loop uses to drive engine
// processes in the disaggregated layout. Methods mirror the endpoints; each call opens its own
// connection, so one client may be used from many threads at once.
//
// Failures: a connection that cannot be established is retried (max_retries times, with
// exponential backoff) and then raised as furlong::Error naming the URL; a non-2xx answer
// raises HttpError carrying the status and the server's error message; a request that got no
// answer within read_timeout_s raises TimeoutError naming the URL and the bound. Requests that
// reached the server are never retried (a generation must not run twice).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_util.h"
#include "engine/engine.h"

namespace furlong::engine::server {

class HttpError : public Error {
 public:
  HttpError(int status, const std::string& message) : Error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// A request reached the server but no answer came within ClientOptions::read_timeout_s.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

struct ClientOptions {
  std::string api_key;  // sent as Authorization: Bearer <key> when non-empty
  double connect_timeout_s = 10;
  double read_timeout_s = 3600;  // generations can be long; <= 0: no bound
  int max_retries = 3;           // connection failures only
  double retry_backoff_s = 0.2;  // first wait; doubles each retry
};

// One /generate answer, decoded from SGLang's shape.
struct GenerateResult {
  std::string text;
  std::vector<int64_t> output_ids;
  std::vector<float> output_logprobs;  // from meta_info.output_token_logprobs (if asked)
  std::string finish_reason;           // stop | length | abort
  int64_t prompt_tokens = 0;
  int64_t weight_version = 0;
  std::string rid;
  // meta_info.routed_experts when the request asked for it: SGLang's base64 of int32
  // [prompt + output - 1, L, K] (engine/routed_experts_codec.h decodes it); empty otherwise.
  std::string routed_experts_base64;
  Json raw;  // the whole response object
};
GenerateResult parse_generate_result(const Json& response);

class EngineClient {
 public:
  explicit EngineClient(std::string base_url, ClientOptions options = {});

  const std::string& base_url() const { return base_url_; }

  // Raw calls: the parsed JSON answer of a 2xx response (HttpError otherwise).
  Json get(const std::string& path) const;
  Json post(const std::string& path, const Json& body) const;
  // The status and body of any answer (no HttpError); furlong::Error if no answer arrived.
  // `headers` are extra request headers.
  struct Raw {
    int status = 0;
    std::string body;
  };
  Raw request(const std::string& method, const std::string& path, const std::string& body,
              const std::vector<std::pair<std::string, std::string>>& headers = {}) const;

  // ---- generation ----
  Json generate(const Json& payload) const;  // the raw SGLang payload and answer
  GenerateResult generate(const std::vector<int64_t>& input_ids, const Json& sampling_params,
                          bool return_logprob = true, const std::string& rid = "",
                          bool return_routed_experts = false) const;
  // POST /generate with "stream": true (one prompt): on_event gets each server-sent event (the
  // output so far, finish_reason null until the last); returns the last (final) object.
  Json generate_stream(Json payload, const std::function<void(const Json&)>& on_event) const;
  void abort_request(const std::string& rid) const;
  void abort_all() const;

  // ---- health and info ----
  bool health() const;  // true on 200, false on any failure (never throws)
  // Polls /health until it answers 200; furlong::Error after timeout_s.
  void wait_until_healthy(double timeout_s) const;
  Json get_model_info() const;
  Json get_server_info() const;
  int64_t get_weight_version() const;

  // ---- control ----
  void flush_cache() const;
  void pause_generation(const std::string& mode = "retract") const;
  void continue_generation() const;

  // ---- weight updates ----
  void init_weights_update_group(const WeightGroupSpec& spec) const;
  void update_weights_from_distributed(const std::vector<WeightMeta>& metas, int64_t version,
                                       const std::string& group_name = "weight_sync") const;
  void destroy_weights_update_group(const std::string& group_name = "weight_sync") const;
  void update_weight_version(int64_t version) const;
  std::string get_weights_digest() const;

  // ---- memory (colocated hand-off) ----
  // tags: weights, kv_cache, cuda_graph (empty = all).
  void release_memory_occupation(const std::vector<std::string>& tags = {}) const;
  void resume_memory_occupation(const std::vector<std::string>& tags = {}) const;

 private:
  Json call(const std::string& method, const std::string& path, const std::string& body) const;

  std::string base_url_;
  ClientOptions options_;
};

}  // namespace furlong::engine::server
