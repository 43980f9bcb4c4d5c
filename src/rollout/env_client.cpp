#include "rollout/env_client.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/log.h"
#include "reward/http_util.h"

namespace furlong::rollout {
namespace {

using Clock = std::chrono::steady_clock;

struct Attempt {
  bool ok = false;
  bool retryable = true;
  bool timed_out = false;
  bool too_large = false;
  Json body;
  std::string error;
};

// Shuts `client`'s connection down once `seconds` have passed, unless the attempt ended first:
// per-read timeouts do not bound an answer that trickles in a byte at a time. httplib's stop()
// may be called while a request runs; one that comes before the connection exists is repeated
// until the attempt ends.
class AttemptDeadline {
 public:
  AttemptDeadline(httplib::Client& client, double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(seconds));
    watch_ = std::thread([this, &client, deadline] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_until(lock, deadline, [&] { return done_; })) return;
      fired_ = true;
      while (!done_) {
        lock.unlock();
        client.stop();
        lock.lock();
        cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return done_; });
      }
    });
  }
  ~AttemptDeadline() { finish(); }
  AttemptDeadline(const AttemptDeadline&) = delete;
  AttemptDeadline& operator=(const AttemptDeadline&) = delete;
  // Ends the watch; true when the deadline had stopped the attempt.
  bool finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (watch_.joinable()) watch_.join();
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, fired_ = false;
  std::thread watch_;
};

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << seconds;
  return out.str();
}

// What an attempt that got a whole answer came to.
void read_answer(const httplib::Response& res, const std::string& received, Attempt& a) {
  if (res.status < 200 || res.status >= 300) {
    a.error = "HTTP " + std::to_string(res.status) + ": " + reward::body_excerpt(received);
    a.retryable = res.status >= 500 || res.status == 429;
    return;
  }
  try {
    a.body = parse_json(received, "the answer");
    a.ok = true;
  } catch (const std::exception&) {
    a.error = "the answer is not JSON: " + reward::body_excerpt(received);
  }
}

// One POST, bounded in time as a whole (timeout_s from connect to the answer's last byte) and in
// the answer's size (max_bytes, the body as received).
Attempt attempt_once(const std::string& base, const std::string& path, const std::string& body,
                     const EnvClientOptions& o) {
  Attempt a;
  httplib::Client client(base);
  reward::set_http_timeouts(client, o.timeout_s);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string received;
  const auto cap = static_cast<uint64_t>(o.max_response_bytes);
  req.response_handler = [&](const httplib::Response& res) {
    // A declared length over the cap ends the attempt before any of the body is read.
    const std::string length = res.get_header_value("Content-Length");
    a.too_large = !length.empty() && std::strtoull(length.c_str(), nullptr, 10) > cap;
    return !a.too_large;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    a.too_large = received.size() + size > cap;
    if (!a.too_large) received.append(data, size);
    return !a.too_large;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const auto t0 = Clock::now();
  AttemptDeadline deadline(client, o.timeout_s);
  const bool answered = client.send(req, res, error);
  const bool stopped = deadline.finish();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  if (a.too_large) {
    a.retryable = false;  // the same request gets the same answer
    a.error = "the answer is larger than " + std::to_string(o.max_response_bytes) +
              " bytes (--agent-env-max-response-bytes)";
  } else if (!answered) {
    // cpp-httplib reports a read timeout as a read error: the clock tells them apart.
    a.timed_out = stopped || error == httplib::Error::ConnectionTimeout ||
                  (error == httplib::Error::Read && elapsed >= 0.95 * o.timeout_s);
    a.error = a.timed_out ? "no whole answer within " + seconds_text(o.timeout_s) + " s (" +
                                o.timeout_flag + ")"
                          : "request failed (" + httplib::to_string(error) + ")";
  } else {
    read_answer(res, received, a);
  }
  return a;
}

}  // namespace

EnvClient::EnvClient(EnvClientOptions options) : options_(std::move(options)) {
  const std::string& url = options_.url;
  FURLONG_CHECK(url.starts_with("http://") || url.starts_with("https://"), options_.flag + " '",
                url, "' must look like http(s)://host[:port][/path]");
  FURLONG_CHECK(options_.timeout_s > 0, "--agent-env-timeout must be > 0, got ",
                options_.timeout_s);
  FURLONG_CHECK(options_.max_retries >= 0, "--agent-env-max-retries must be >= 0, got ",
                options_.max_retries);
  FURLONG_CHECK(options_.max_response_bytes >= 1,
                "--agent-env-max-response-bytes must be >= 1, got ", options_.max_response_bytes);
  const size_t scheme_end = url.find("://") + 3;
  const size_t slash = url.find('/', scheme_end);
  const std::string authority = url.substr(scheme_end, slash - scheme_end);
  const size_t colon = authority.rfind(':');
  FURLONG_CHECK(!authority.substr(0, colon).empty(), options_.flag + " '", url, "' names no host");
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

EnvReply EnvClient::post(const std::string& endpoint, const Json& payload,
                         std::optional<int> max_retries) const {
  const std::string body = payload.dump(-1, ' ', false, Json::error_handler_t::replace);
  // An empty endpoint is the URL itself.
  const std::string path =
      endpoint.empty() ? (path_.empty() ? "/" : path_) : path_ + "/" + endpoint;
  EnvReply reply;
  const int attempts = 1 + max_retries.value_or(options_.max_retries);
  for (int k = 1; k <= attempts; ++k) {
    if (k > 1) {
      const double wait =
          std::min(options_.max_backoff_s, options_.backoff_s * std::pow(2.0, k - 2));
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    reply.attempts = k;
    Attempt a = attempt_once(base_, path, body, options_);
    if (a.ok) {
      // Nothing of a failed attempt before it survives into the answer.
      reply.ok = true;
      reply.timed_out = false;
      reply.error.clear();
      reply.body = std::move(a.body);
      return reply;
    }
    reply.timed_out = a.timed_out;
    reply.too_large = a.too_large;
    reply.error = options_.name + " " + base_ + path + ": " + a.error;
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

std::optional<double> env_reward_field(const Json& body, const char* endpoint, std::string& error) {
  auto it = body.find("reward");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number() || !(std::abs(it->get<double>()) <= kMaxEnvReward)) {
    error = std::string(endpoint) + ": \"reward\" must be null or a finite number within +-" +
            json_excerpt(Json(kMaxEnvReward)) + " (training computes in float32), got " +
            json_excerpt(*it);
    return std::nullopt;
  }
  return it->get<double>();
}

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
  std::string reward_error;  // whatever `error` held before is not this answer's
  reply.reward = env_reward_field(body, "/step", reward_error);
  if (!reward_error.empty()) {
    error = std::move(reward_error);
    return std::nullopt;
  }
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
  return env_reward_field(body, "/finish", error);
}

}  // namespace furlong::rollout
