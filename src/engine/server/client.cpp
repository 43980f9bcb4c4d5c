// EngineClient over cpp-httplib (see client.h).
#include "engine/server/client.h"

#include <httplib.h>

#include <chrono>
#include <sstream>
#include <thread>
#include <utility>

#include "engine/weight_sync.h"

namespace furlong::engine::server {
namespace {

// A bound of a year stands for "no bound" (httplib has no unbounded setting).
constexpr double kNoBoundSeconds = 365.0 * 24 * 3600;

void set_timeout(httplib::Client& client, double seconds,
                 void (httplib::Client::*setter)(time_t, time_t)) {
  if (seconds <= 0) seconds = kNoBoundSeconds;
  auto whole = static_cast<time_t>(seconds);
  auto micro = static_cast<time_t>((seconds - static_cast<double>(whole)) * 1e6);
  (client.*setter)(whole, micro);
}

// The server's error message from a JSON error body, else the body itself (truncated).
std::string error_message(const std::string& body) {
  try {
    Json json = parse_json(body, "the engine's error response");
    if (json.contains("error") && json["error"].contains("message"))
      return json["error"]["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  return body.size() > 500 ? body.substr(0, 500) + "..." : body;
}

// A weight version as servers send it: SGLang's string ("default" = 0, else digits) or an
// integer (furlong before it followed SGLang's type).
int64_t version_of(const Json& value, const std::string& where) {
  if (value.is_number_integer()) return value.get<int64_t>();
  FURLONG_CHECK(value.is_string(), where, ": weight_version must be a string, got ",
                json_type_name(value));
  const auto& s = value.get_ref<const std::string&>();
  if (s == "default") return 0;
  try {
    size_t used = 0;
    int64_t v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  FURLONG_FAIL(where, ": weight_version '", s, "' is not \"default\" or an integer");
}

}  // namespace

GenerateResult parse_generate_result(const Json& response) {
  const std::string where = "/generate response";
  GenerateResult r;
  r.raw = response;
  r.text = json_get<std::string>(response, "text", where);
  r.output_ids = json_get<std::vector<int64_t>>(response, "output_ids", where);
  const Json& meta = response.at("meta_info");
  r.finish_reason = json_get<std::string>(meta.at("finish_reason"), "type", where);
  r.prompt_tokens = json_get_or<int64_t>(meta, "prompt_tokens", 0, where);
  if (meta.contains("weight_version") && !meta["weight_version"].is_null())
    r.weight_version = version_of(meta["weight_version"], where);
  r.rid = json_get_or<std::string>(meta, "id", "", where);
  if (meta.contains("output_token_logprobs")) {
    for (const auto& entry : meta["output_token_logprobs"])
      r.output_logprobs.push_back(entry.at(0).get<float>());
  }
  if (meta.contains("routed_experts") && !meta["routed_experts"].is_null()) {
    r.routed_experts_base64 = json_get<std::string>(meta, "routed_experts", where);
  }
  return r;
}

EngineClient::EngineClient(std::string base_url, ClientOptions options)
    : base_url_(std::move(base_url)), options_(std::move(options)) {
  while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
  FURLONG_CHECK(base_url_.rfind("http://", 0) == 0,
                "engine URL must start with http:// (e.g. http://127.0.0.1:30000), got '",
                base_url_, "'");
  FURLONG_CHECK(options_.max_retries >= 0, "EngineClient: max_retries must be >= 0");
}

namespace {

std::string format_seconds(double seconds) {
  std::ostringstream out;
  out << seconds;
  return out.str();
}

// A read (or write) that failed after the whole bound had passed: the server did not answer.
bool timed_out(httplib::Error error, double waited_s, double bound_s) {
  if (bound_s <= 0) return false;
  const bool transfer_failed = error == httplib::Error::Read || error == httplib::Error::Write;
  return transfer_failed && waited_s >= 0.9 * bound_s;
}

// Runs `send` on a fresh connection, retrying (with backoff) only when no connection could be
// made: a request that reached the server is never sent twice.
httplib::Result send_with_retries(const std::string& base_url, const ClientOptions& options,
                                  const std::string& what,
                                  const std::function<httplib::Result(httplib::Client&)>& send) {
  double backoff = options.retry_backoff_s;
  for (int attempt = 0;; ++attempt) {
    httplib::Client client(base_url);
    set_timeout(client, options.connect_timeout_s, &httplib::Client::set_connection_timeout);
    set_timeout(client, options.read_timeout_s, &httplib::Client::set_read_timeout);
    set_timeout(client, options.read_timeout_s, &httplib::Client::set_write_timeout);
    const auto sent_at = std::chrono::steady_clock::now();
    httplib::Result result = send(client);
    if (result) return result;
    auto error = result.error();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - sent_at).count();
    if (timed_out(error, waited, options.read_timeout_s)) {
      throw TimeoutError(what + " got no answer within " + format_seconds(options.read_timeout_s) +
                         " s (the server may be stopped, hung or overloaded)");
    }
    bool connect_failed =
        error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout;
    FURLONG_CHECK(connect_failed && attempt < options.max_retries, what,
                  " failed: ", httplib::to_string(error),
                  connect_failed ? " (after " + std::to_string(attempt) + " retries)" : "");
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff *= 2;
  }
}

httplib::Headers request_headers(const ClientOptions& options,
                                 const std::vector<std::pair<std::string, std::string>>& extra) {
  httplib::Headers headers;
  if (!options.api_key.empty()) headers.emplace("Authorization", "Bearer " + options.api_key);
  for (const auto& [k, v] : extra) headers.emplace(k, v);
  return headers;
}

}  // namespace

EngineClient::Raw EngineClient::request(
    const std::string& method, const std::string& path, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) const {
  auto all_headers = request_headers(options_, headers);
  auto result = send_with_retries(
      base_url_, options_, method + " " + base_url_ + path, [&](httplib::Client& client) {
        return method == "GET" ? client.Get(path, all_headers)
                               : client.Post(path, all_headers, body, "application/json");
      });
  return Raw{result->status, result->body};
}

Json EngineClient::generate_stream(Json payload,
                                   const std::function<void(const Json&)>& on_event) const {
  const std::string what = "POST " + base_url_ + "/generate (stream)";
  payload["stream"] = true;
  std::string received, pending;
  Json last;
  auto consume = [&](const char* data, size_t size, uint64_t, uint64_t) {
    received.append(data, size);
    pending.append(data, size);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      last = parse_json(event.substr(6), what + " event");
      on_event(last);
    }
    return true;
  };
  auto result = send_with_retries(base_url_, options_, what, [&](httplib::Client& client) {
    httplib::Request req;
    req.method = "POST";
    req.path = "/generate";
    req.headers = request_headers(options_, {{"Content-Type", "application/json"}});
    req.body = payload.dump();
    req.content_receiver = consume;
    return client.send(req);
  });
  if (result->status != 200) {
    const std::string& body = received.empty() ? result->body : received;
    throw HttpError(result->status, what + " -> HTTP " + std::to_string(result->status) + ": " +
                                        error_message(body));
  }
  FURLONG_CHECK(last.is_object() && last.contains("meta_info") &&
                    !last["meta_info"]["finish_reason"].is_null(),
                what, ": the stream ended without a final event");
  return last;
}

Json EngineClient::call(const std::string& method, const std::string& path,
                        const std::string& body) const {
  Raw raw = request(method, path, body);
  if (raw.status < 200 || raw.status >= 300) {
    throw HttpError(raw.status, method + " " + base_url_ + path + " -> HTTP " +
                                    std::to_string(raw.status) + ": " + error_message(raw.body));
  }
  if (raw.body.empty()) return Json::object();
  return parse_json(raw.body, method + " " + base_url_ + path + " response");
}

Json EngineClient::get(const std::string& path) const {
  return call("GET", path, "");
}
Json EngineClient::post(const std::string& path, const Json& body) const {
  return call("POST", path, body.dump());
}

Json EngineClient::generate(const Json& payload) const {
  return post("/generate", payload);
}

GenerateResult EngineClient::generate(const std::vector<int64_t>& input_ids,
                                      const Json& sampling_params, bool return_logprob,
                                      const std::string& rid, bool return_routed_experts) const {
  Json payload = {{"input_ids", input_ids},
                  {"sampling_params", sampling_params},
                  {"return_logprob", return_logprob}};
  if (!rid.empty()) payload["rid"] = rid;
  if (return_routed_experts) payload["return_routed_experts"] = true;
  return parse_generate_result(generate(payload));
}

void EngineClient::abort_request(const std::string& rid) const {
  post("/abort_request", Json{{"rid", rid}});
}
void EngineClient::abort_all() const {
  post("/abort_request", Json{{"abort_all", true}});
}

bool EngineClient::health() const {
  try {
    return request("GET", "/health", "").status == 200;
  } catch (const std::exception&) {
    return false;
  }
}

void EngineClient::wait_until_healthy(double timeout_s) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  EngineClient quick(base_url_, ClientOptions{options_.api_key, 1.0, 5.0, 0, 0.0});
  while (!quick.health()) {
    FURLONG_CHECK(std::chrono::steady_clock::now() < deadline, "engine at ", base_url_,
                  " did not become healthy within ", timeout_s, " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Json EngineClient::get_model_info() const {
  return get("/get_model_info");
}
Json EngineClient::get_server_info() const {
  return get("/get_server_info");
}
int64_t EngineClient::get_weight_version() const {
  Json reply = get("/get_weight_version");
  FURLONG_CHECK(reply.contains("weight_version"), base_url_,
                "/get_weight_version: no weight_version");
  return version_of(reply["weight_version"], base_url_ + "/get_weight_version");
}

void EngineClient::flush_cache() const {
  post("/flush_cache", Json::object());
}
void EngineClient::pause_generation(const std::string& mode) const {
  post("/pause_generation", Json{{"mode", mode}});
}
void EngineClient::continue_generation() const {
  post("/continue_generation", Json::object());
}

void EngineClient::init_weights_update_group(const WeightGroupSpec& spec) const {
  post("/init_weights_update_group", Json{{"master_address", spec.master_addr},
                                          {"master_port", spec.master_port},
                                          {"rank_offset", spec.rank_offset},
                                          {"world_size", spec.world_size},
                                          {"group_name", spec.group_name},
                                          {"backend", spec.backend}});
}

void EngineClient::update_weights_from_distributed(const std::vector<WeightMeta>& metas,
                                                   int64_t version,
                                                   const std::string& group_name) const {
  // SGLang's weight_version is a string.
  Json body{{"group_name", group_name},
            {"flush_cache", false},
            {"weight_version", std::to_string(version)}};
  add_weight_metas(metas, body);
  post("/update_weights_from_distributed", body);
}

void EngineClient::destroy_weights_update_group(const std::string& group_name) const {
  post("/destroy_weights_update_group", Json{{"group_name", group_name}});
}
void EngineClient::update_weight_version(int64_t version) const {
  post("/update_weight_version", Json{{"new_version", std::to_string(version)}});
}
std::string EngineClient::get_weights_digest() const {
  return json_get<std::string>(get("/get_weights_digest"), "digest", base_url_);
}

void EngineClient::release_memory_occupation(const std::vector<std::string>& tags) const {
  post("/release_memory_occupation", tags.empty() ? Json::object() : Json{{"tags", tags}});
}
void EngineClient::resume_memory_occupation(const std::vector<std::string>& tags) const {
  post("/resume_memory_occupation", tags.empty() ? Json::object() : Json{{"tags", tags}});
}

}  // namespace furlong::engine::server
