// Client of an agent environment server (--agent-env-url): the HTTP+JSON protocol of
// docs/agents.md. Three POST endpoints under the URL's path:
//   /start   {"sample": {index, group_index, prompt, label, metadata}} -> {"episode_id": str}
//   /step    {"episode_id", "turn", "message": {role, content, tool_calls}, "text",
//             "finish_reason"} -> {"observation": [{role, content}...], "reward": num|null,
//             "done": bool}
//   /finish  {"episode_id", "reason"} -> {"reward": num|null}   (furlong ended the episode)
// Every attempt is bounded by a timeout (the whole attempt) and its answer by a size; connection
// failures, timeouts, HTTP 5xx/429 and bodies that are not JSON are retried a bounded number of
// times with exponential backoff (a step is identified by (episode_id, turn), so a server answers a
// repeated step as it did the first time); other HTTP errors fail at once. Failures are returned,
// never thrown: an episode that cannot reach its env ends, and the run goes on. Thread-safe (one
// connection per request).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/json_util.h"
#include "rollout/agent_options.h"

namespace furlong::rollout {

// The largest reward magnitude an env may give: rewards become float32 in training, and their
// group statistics (squares, sums) must stay finite; 1e308 would be inf there.
inline constexpr double kMaxEnvReward = 1e9;

struct EnvClientOptions {
  std::string url;                                   // --agent-env-url: http://host[:port][/path]
  std::string name = "agent env";                    // what errors call the server
  std::string flag = "--agent-env-url";              // the flag URL errors name
  std::string timeout_flag = "--agent-env-timeout";  // the flag timeout errors name
  // --agent-env-timeout: per attempt, as a whole (connect, send, the answer's last byte).
  double timeout_s = 30.0;
  int max_retries = 2;         // --agent-env-max-retries: attempts = 1 + max_retries
  double backoff_s = 0.2;      // wait before retry k: backoff_s * 2^(k-1), capped ...
  double max_backoff_s = 4.0;  // ... at this
  // --agent-env-max-response-bytes: a longer answer (declared or received) fails the call
  // without a retry, before more of it is held in memory.
  int64_t max_response_bytes = kDefaultEnvMaxResponseBytes;
};

// What one call came to after its attempts.
struct EnvReply {
  bool ok = false;
  bool timed_out = false;  // the last failed attempt ran into the timeout
  bool too_large = false;  // the last failed attempt's answer was over max_response_bytes
  int attempts = 0;
  Json body;          // ok: the JSON the server answered
  std::string error;  // !ok: what went wrong (names the endpoint); empty when ok
};

// A /step answer, checked.
struct StepReply {
  OrderedJson observation = OrderedJson::array();  // {role: "tool"|"user", content: string}
  std::optional<double> reward;
  bool done = false;
};

class EnvClient {
 public:
  // Checks the URL (a furlong::Error naming --agent-env-url otherwise).
  explicit EnvClient(EnvClientOptions options);
  // POSTs `payload` to <url>/<endpoint> (the URL itself when `endpoint` is empty), with
  // --agent-env-max-retries retries unless `max_retries` says otherwise.
  EnvReply post(const std::string& endpoint, const Json& payload,
                std::optional<int> max_retries = std::nullopt) const;
  const EnvClientOptions& options() const { return options_; }

 private:
  EnvClientOptions options_;
  std::string base_;  // scheme://host[:port]
  std::string path_;  // "" or "/prefix" (no trailing slash)
};

// The episode id of a /start answer, or an error text.
std::optional<std::string> parse_start_reply(const Json& body, std::string& error);
// A /step answer, or an error text: observation a list of {role, content} (role tool or user,
// content a string), required non-empty unless done; reward a number within kMaxEnvReward,
// null or absent. `error` is set on failure only (what it held before does not matter).
std::optional<StepReply> parse_step_reply(const Json& body, std::string& error);
// A reward field of an env answer: absent or null = none; a number within kMaxEnvReward;
// anything else sets `error` (naming `endpoint`).
std::optional<double> env_reward_field(const Json& body, const char* endpoint, std::string& error);
// The reward of a /finish answer (null or absent: none); an error text when it is not a number.
std::optional<double> parse_finish_reply(const Json& body, std::string& error);

}  // namespace furlong::rollout
