// Flags of multi-turn agent episodes (docs/agents.md); validated by validate_agent_options.
#include "app/flag_table_agent.h"

namespace furlong::app {

void add_agent_flags(config::FlagSet& f, rollout::AgentOptions& a) {
  f.set_group("Agent episodes (multi-turn, docs/agents.md)");
  f.add("agent-env-url", &a.agent_env_url,
        "environment server (http://host:port[/path]): every sample becomes a multi-turn "
        "episode against it, in the protocol of --agent-env-protocol");
  f.add("agent-max-turns", &a.agent_max_turns, "assistant turns per episode");
  f.add("agent-max-episode-tokens", &a.agent_max_episode_tokens,
        "response tokens per episode (generated and observation tokens after the prompt); each "
        "turn is also capped by --rollout-max-response-len");
  f.add("agent-env-timeout", &a.agent_env_timeout,
        "seconds per env request attempt, as a whole (connect, send, the answer's last byte)");
  f.add("agent-env-max-retries", &a.agent_env_max_retries,
        "retries of a failed env request (connection errors, timeouts, HTTP 5xx/429)");
  f.add("agent-env-max-response-bytes", &a.agent_env_max_response_bytes,
        "bytes an env answer may have; a longer one ends the episode (no retry), counted as "
        "rollout/agent/oversized_responses");
  f.add("agent-env-protocol", &a.agent_env_protocol,
        "how episodes talk to --agent-env-url: furlong (POST /start, /step, /finish), openenv "
        "(an OpenEnv WebSocket session per episode at <url>/ws) or openenv-http (OpenEnv's POST "
        "/reset, /step)")
      .choices = {"furlong", "openenv", "openenv-http"};
  f.add("agent-env-action-key", &a.agent_env_action_key,
        "OpenEnv: the action field that carries an assistant turn's text ({KEY: text})");
  f.add("agent-env-observation-key", &a.agent_env_observation_key,
        "OpenEnv: the observation field (a string) that becomes the user message; unset: the "
        "whole observation as JSON");
  f.add("agent-harness-url", &a.agent_harness_url,
        "agent harness (http://host:port[/path]): each sample is a task POSTed to it with an "
        "OpenAI base_url of its own; the harness drives the turns over /v1/chat/completions and "
        "answers with the reward");
  f.add("agent-session-timeout", &a.agent_session_timeout,
        "seconds a harness session may take, as a whole (the task's POST to its answer)");
  f.add("agent-session-host", &a.agent_session_host,
        "the address the harness sessions' OpenAI endpoint listens on (and their base_url names)");
  f.add("agent-harness-on-divergence", &a.agent_harness_on_divergence,
        "when a harness's messages do not extend its session's conversation: restart (the "
        "sample restarts from them; the earlier turns are not trained) or abort (the sample is "
        "dropped)")
      .choices = {"restart", "abort"};
  f.add("agent-env-concurrency", &a.agent_env_concurrency,
        "env requests in flight at once (worker threads); with --agent-env-protocol openenv "
        "also the WebSocket sessions (server-side environments) open at once, with "
        "--agent-harness-url the harness sessions");
}

}  // namespace furlong::app
