// Client of a remote reward server (--rm-type remote_rm with --rm-url): POST the JSON payload
// miles sends ({"prompt", "response", "label"}) and return the JSON body (a number, or an object
// from which --reward-key selects the reward). Every attempt is bounded by a timeout; failures
// (no connection, timeout, HTTP 5xx/429, a body that is not JSON) are retried a bounded number
// of times with exponential backoff; other HTTP errors (4xx) fail at once. The last failure is a
// furlong::Error naming the URL, the number of attempts and what went wrong.
// Thread-safe: each call uses its own connection, so compute_rewards may call it concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/json_util.h"
#include "rl/sample.h"

namespace furlong::reward {

struct RemoteRewardOptions {
  std::string url;             // --rm-url: http://host[:port][/path]
  double timeout_s = 60.0;     // per attempt: connect, send and each read
  int max_retries = 3;         // attempts = 1 + max_retries
  double backoff_s = 0.5;      // wait before retry k (k = 1, 2, ...): backoff_s * 2^(k-1) ...
  double max_backoff_s = 8.0;  // ... capped at this
};

struct RemoteRewardStats {
  std::atomic<int64_t> requests{0};  // calls to score()
  std::atomic<int64_t> attempts{0};  // HTTP requests sent
  std::atomic<int64_t> retries{0};
  std::atomic<int64_t> failures{0};  // calls that exhausted their attempts
};

class RemoteRewardClient {
 public:
  explicit RemoteRewardClient(RemoteRewardOptions options);
  // The JSON body the server answered for `payload`.
  Json post(const Json& payload) const;
  // post() with the payload of `sample`.
  Json score(const rl::Sample& sample) const;
  const RemoteRewardOptions& options() const { return options_; }
  const RemoteRewardStats& stats() const { return stats_; }

 private:
  RemoteRewardOptions options_;
  std::string base_;  // scheme://host[:port]
  std::string path_;
  mutable RemoteRewardStats stats_;
};

// {"prompt": sample.prompt, "response": sample.response, "label": sample.label or null}.
Json remote_reward_payload(const rl::Sample& sample);

}  // namespace furlong::reward
