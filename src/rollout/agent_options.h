// Options of multi-turn agent episodes (docs/agents.md): with --agent-env-url every rollout
// sample is an episode against an environment server instead of one generation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace furlong::rollout {

// The default of --agent-env-max-response-bytes (8 MiB): far above any observation that fits a
// context, far below what would strain the trainer's memory.
inline constexpr int64_t kDefaultEnvMaxResponseBytes = int64_t{8} << 20;

struct AgentOptions {
  std::optional<std::string> agent_env_url;  // unset: single-turn rollouts
  int64_t agent_max_turns = 4;               // assistant turns per episode
  // Response tokens per episode (the model's turns and the observations between them, the
  // tokens after the prompt); each turn is also capped by --rollout-max-response-len.
  int64_t agent_max_episode_tokens = 8192;
  double agent_env_timeout = 30.0;  // seconds per env request attempt, as a whole
  int64_t agent_env_max_retries = 2;
  // An env answer longer than this ends the episode (counted as oversized_responses).
  int64_t agent_env_max_response_bytes = kDefaultEnvMaxResponseBytes;
  // env requests in flight at once (worker threads); openenv: also sessions open at once
  int64_t agent_env_concurrency = 16;
  // furlong | openenv (WebSocket sessions) | openenv-http (rollout/env_session.h)
  std::string agent_env_protocol = "furlong";
  std::string agent_env_action_key = "message";          // OpenEnv: the action's text field
  std::optional<std::string> agent_env_observation_key;  // OpenEnv: the observation's text field
  // Harness sessions (docs/agents.md "Agent harnesses"): each sample is a task POSTed to this
  // URL; the harness drives the conversation over the OpenAI API and answers with the reward.
  std::optional<std::string> agent_harness_url;
  double agent_session_timeout = 600.0;                 // seconds per session, as a whole
  std::string agent_session_host = "127.0.0.1";         // where the sessions' endpoint listens
  std::string agent_harness_on_divergence = "restart";  // restart | abort
};

// Whether rollout samples are agent episodes (an env or a harness) rather than one generation.
inline bool agent_rollouts(const AgentOptions& a) {
  return a.agent_env_url.has_value() || a.agent_harness_url.has_value();
}

}  // namespace furlong::rollout
