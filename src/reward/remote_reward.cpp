#include "reward/remote_reward.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "core/json_util.h"
#include "core/log.h"
#include "reward/http_util.h"

namespace furlong::reward {
namespace {

struct AttemptResult {
  bool ok = false;
  bool retryable = true;
  Json body;
  std::string error;
};

}  // namespace

RemoteRewardClient::RemoteRewardClient(RemoteRewardOptions options) : options_(std::move(options)) {
  const std::string& url = options_.url;
  FURLONG_CHECK(!url.empty(), "--rm-url is required for --rm-type remote_rm");
  const bool https = url.starts_with("https://");
  FURLONG_CHECK(https || url.starts_with("http://"), "--rm-url '", url,
                "' must look like http(s)://host[:port][/path]");
  FURLONG_CHECK(options_.timeout_s > 0, "reward server timeout_s must be > 0, got ",
                options_.timeout_s);
  FURLONG_CHECK(options_.max_retries >= 0, "reward server max_retries must be >= 0, got ",
                options_.max_retries);
  FURLONG_CHECK(options_.backoff_s >= 0 && options_.max_backoff_s >= 0,
                "reward server backoff must be >= 0");
  const size_t scheme_end = url.find("://") + 3;
  const size_t slash = url.find('/', scheme_end);
  const std::string authority = url.substr(scheme_end, slash - scheme_end);
  path_ = slash == std::string::npos ? "/" : url.substr(slash);
  const size_t colon = authority.rfind(':');
  const std::string host = authority.substr(0, colon);
  FURLONG_CHECK(!host.empty(), "--rm-url '", url, "' names no host");
  if (colon != std::string::npos) {
    std::string port = authority.substr(colon + 1);
    char* end = nullptr;
    long value = std::strtol(port.c_str(), &end, 10);
    FURLONG_CHECK(!port.empty() && *end == '\0' && value > 0 && value < 65536, "--rm-url '", url,
                  "': port '", port, "' is not a number in 1..65535");
  }
  base_ = url.substr(0, slash);
}

Json RemoteRewardClient::post(const Json& payload) const {
  ++stats_.requests;
  const std::string body = payload.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string last_error;
  const int attempts = 1 + options_.max_retries;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (attempt > 1) {
      ++stats_.retries;
      double wait =
          std::min(options_.max_backoff_s, options_.backoff_s * std::pow(2.0, attempt - 2));
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
    ++stats_.attempts;
    AttemptResult result;
    httplib::Client client(base_);
    set_http_timeouts(client, options_.timeout_s);
    auto res = client.Post(path_.c_str(), body, "application/json");
    if (!res) {
      result.error = "request failed (" + httplib::to_string(res.error()) + ")";
    } else if (res->status < 200 || res->status >= 300) {
      result.error = "HTTP " + std::to_string(res->status) + ": " + body_excerpt(res->body);
      result.retryable = res->status >= 500 || res->status == 429;
    } else {
      try {
        result.body = parse_json(res->body, "the reward server's response");
        result.ok = true;
      } catch (const std::exception&) {
        result.error = "the response is not JSON: " + body_excerpt(res->body);
      }
    }
    if (result.ok) return result.body;
    last_error = result.error;
    if (!result.retryable) {
      ++stats_.failures;
      FURLONG_FAIL("reward server ", options_.url, ": ", last_error, " (not retried)");
    }
    if (attempt < attempts)
      LOG_WARN("reward server ", options_.url, ": ", last_error, "; retrying");
  }
  ++stats_.failures;
  FURLONG_FAIL("reward server ", options_.url, ": ", last_error, " after ", attempts,
               " attempt(s) with a ", options_.timeout_s, " s timeout each");
}

Json remote_reward_payload(const rl::Sample& sample) {
  Json label = sample.label.empty() ? Json(nullptr) : Json(sample.label);
  return Json{{"prompt", sample.prompt}, {"response", sample.response}, {"label", label}};
}

Json RemoteRewardClient::score(const rl::Sample& sample) const {
  return post(remote_reward_payload(sample));
}

}  // namespace furlong::reward
