#include "rollout/env_client.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "core/log.h"
#include "reward/http_util.h"

namespace furlong::rollout {
namespace {

struct Attempt {
  bool ok = false;
  bool retryable = true;
  bool timed_out = false;
  Json body;
  std::string error;
};

Attempt attempt_once(const std::string& base, const std::string& path, const std::string& body,
                     double timeout_s) {
  Attempt a;
  httplib::Client client(base);
  reward::set_http_timeouts(client, timeout_s);
  const auto t0 = std::chrono::steady_clock::now();
  auto res = client.Post(path.c_str(), body, "application/json");
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!res) {
    // cpp-httplib reports a read timeout as a read error: the clock tells them apart.
    a.timed_out = res.error() == httplib::Error::ConnectionTimeout ||
                  (res.error() == httplib::Error::Read && elapsed >= 0.95 * timeout_s);
    a.error = a.timed_out ? "no answer within " + std::to_string(timeout_s) + " s"
                          : "request failed (" + httplib::to_string(res.error()) + ")";
  } else if (res->status < 200 || res->status >= 300) {
    a.error = "HTTP " + std::to_string(res->status) + ": " + reward::body_excerpt(res->body);
    a.retryable = res->status >= 500 || res->status == 429;
  } else {
    try {
      a.body = parse_json(res->body, "the answer");
      a.ok = true;
    } catch (const std::exception&) {
      a.error = "the answer is not JSON: " + reward::body_excerpt(res->body);
    }
  }
  return a;
}

}  // namespace

EnvClient::EnvClient(EnvClientOptions options) : options_(std::move(options)) {
  const std::string& url = options_.url;
  FURLONG_CHECK(url.starts_with("http://") || url.starts_with("https://"), "--agent-env-url '", url,
                "' must look like http(s)://host[:port][/path]");
  FURLONG_CHECK(options_.timeout_s > 0, "--agent-env-timeout must be > 0, got ",
                options_.timeout_s);
  FURLONG_CHECK(options_.max_retries >= 0, "--agent-env-max-retries must be >= 0, got ",
                options_.max_retries);
  const size_t scheme_end = url.find("://") + 3;
  const size_t slash = url.find('/', scheme_end);
  const std::string authority = url.substr(scheme_end, slash - scheme_end);
  const size_t colon = authority.rfind(':');
  FURLONG_CHECK(!authority.substr(0, colon).empty(), "--agent-env-url '", url, "' names no host");
  if (colon != std::string::npos) {
    const std::string port = authority.substr(colon + 1);
    char* end = nullptr;
    const long value = std::strtol(port.c_str(), &end, 10);
    FURLONG_CHECK(!port.empty() && *end == '\0' && value > 0 && value < 65536, "--agent-env-url '",
                  url, "': port '", port, "' is not a number in 1..65535");
  }
  base_ = url.substr(0, slash);
  path_ = slash == std::string::npos ? "" : url.substr(slash);
  while (path_.ends_with('/')) path_.pop_back();
}

EnvReply EnvClient::post(const std::string& endpoint, const Json& payload) const {
  const std::string body = payload.dump(-1, ' ', false, Json::error_handler_t::replace);
  const std::string path = path_ + "/" + endpoint;
  EnvReply reply;
  const int attempts = 1 + options_.max_retries;
  for (int k = 1; k <= attempts; ++k) {
    if (k > 1) {
      const double wait =
          std::min(options_.max_backoff_s, options_.backoff_s * std::pow(2.0, k - 2));
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    reply.attempts = k;
    Attempt a = attempt_once(base_, path, body, options_.timeout_s);
    if (a.ok) {
      reply.ok = true;
      reply.timed_out = false;
      reply.body = std::move(a.body);
      return reply;
    }
    reply.timed_out = a.timed_out;
    reply.error = "agent env " + base_ + path + ": " + a.error;
    if (!a.retryable) return reply;
    if (k < attempts) LOG_WARN(reply.error, "; retrying");
  }
  reply.error += " (after " + std::to_string(attempts) + " attempt(s))";
  return reply;
}

std::optional<std::string> parse_start_reply(const Json& body, std::string& error) {
  if (!body.is_object() || !body.contains("episode_id") || !body["episode_id"].is_string() ||
      body["episode_id"].get<std::string>().empty()) {
    error = "/start must answer {\"episode_id\": a non-empty string}, got " + json_excerpt(body);
    return std::nullopt;
  }
  return body["episode_id"].get<std::string>();
}

namespace {

// A reward field: absent or null = none; a finite number; anything else sets `error`.
std::optional<double> reward_field(const Json& body, const char* endpoint, std::string& error) {
  auto it = body.find("reward");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number() || !std::isfinite(it->get<double>())) {
    error = std::string(endpoint) + ": \"reward\" must be a finite number or null, got " +
            json_excerpt(*it);
    return std::nullopt;
  }
  return it->get<double>();
}

}  // namespace

std::optional<StepReply> parse_step_reply(const Json& body, std::string& error) {
  if (!body.is_object()) {
    error = "/step must answer a JSON object, got " + json_excerpt(body);
    return std::nullopt;
  }
  StepReply reply;
  auto done = body.find("done");
  if (done == body.end() || !done->is_boolean()) {
    error = "/step: \"done\" must be true or false, got " +
            (done == body.end() ? std::string("nothing") : json_excerpt(*done));
    return std::nullopt;
  }
  reply.done = done->get<bool>();
  reply.reward = reward_field(body, "/step", error);
  if (!error.empty()) return std::nullopt;
  auto obs = body.find("observation");
  const bool has_obs = obs != body.end() && !obs->is_null();
  if (has_obs && !obs->is_array()) {
    error = "/step: \"observation\" must be a list of messages, got " + json_excerpt(*obs);
    return std::nullopt;
  }
  if (has_obs) {
    for (const auto& m : *obs) {
      const bool role_ok = m.is_object() && m.contains("role") && m["role"].is_string() &&
                           (m["role"] == "tool" || m["role"] == "user");
      if (!role_ok || !m.contains("content") || !m["content"].is_string() || m.size() != 2) {
        error =
            "/step: each observation message must be {\"role\": \"tool\" or \"user\", "
            "\"content\": a string}, got " +
            json_excerpt(m);
        return std::nullopt;
      }
      reply.observation.push_back(
          {{"role", m["role"].get<std::string>()}, {"content", m["content"].get<std::string>()}});
    }
  }
  if (!reply.done && reply.observation.empty()) {
    error = "/step: an episode that is not done needs a non-empty \"observation\"";
    return std::nullopt;
  }
  return reply;
}

std::optional<double> parse_finish_reply(const Json& body, std::string& error) {
  if (!body.is_object()) {
    error = "/finish must answer a JSON object, got " + json_excerpt(body);
    return std::nullopt;
  }
  return reward_field(body, "/finish", error);
}

}  // namespace furlong::rollout
