// One episode's conversation with its environment, in the protocol --agent-env-protocol names
// (docs/agents.md):
//   furlong       furlong's own HTTP protocol (env_client.h): /start, /step, /finish.
//   openenv       OpenEnv's WebSocket session: one connection to <url>/ws per episode,
//                 {"type": "reset"|"step"|"close", "data": ...} messages, answers
//                 {"type": "observation", "data": {observation, reward, done}} or
//                 {"type": "error", "data": {message, code}}.
//   openenv-http  OpenEnv's HTTP form: POST <url>/reset {seed, episode_id, ...} and
//                 POST <url>/step {"action": {...}}, each answering {observation, reward, done}.
//
// OpenEnv mapping. The reset observation opens the conversation: it is appended to the prompt as
// a user message (the prompt tokens are rendered again with it). An assistant turn becomes the
// action {<--agent-env-action-key>: the turn's text}; a step's observation becomes one user
// message, its field --agent-env-observation-key (a string) or, without that flag, the whole
// observation object as compact JSON. The episode's reward is the sum of the steps' non-null
// rewards (none when every one is null), the return of the episode. Between requests a
// keepalive thread answers the server's pings (uvicorn drops a silent client after 40 s). A
// turn cut at its token
// limit is still sent as a step, then the episode ends (truncated). Steps are not retried (an
// OpenEnv step is not idempotent); a reset is, on a fresh connection.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/json_util.h"
#include "rl/sample.h"
#include "rollout/agent_options.h"
#include "rollout/env_client.h"

namespace furlong::rollout {

// What one session call came to: `reply` says how the transport went (timed out, too large,
// attempts), `error` is set when the call or its answer failed (the episode then ends).
struct EnvAnswer {
  EnvReply reply;
  std::string error;
  StepReply step;  // start: the opening observation (maybe empty); step: the answer;
                   // finish: step.reward only
  bool ok() const { return error.empty(); }
};

class WsKeepalive;

class EnvSession {
 public:
  virtual ~EnvSession() = default;
  // Opens the episode of `sample`; `seed` is the same for every sample of a group.
  virtual EnvAnswer start(const rl::Sample& sample, uint64_t seed) = 0;
  // Sends assistant turn `turn` (0-based): `message` is {role, content, tool_calls} as parsed,
  // `text` the turn's text as graded.
  virtual EnvAnswer step(int64_t turn, const Json& message, const std::string& text) = 0;
  // furlong ended an episode the env did not end (`reason`): the env may give a final reward.
  virtual EnvAnswer finish(const std::string& reason) = 0;
  // Whether furlong parses the model's tool calls (and answers malformed ones itself) before
  // the env sees a turn; OpenEnv environments read the turn's text as their action.
  virtual bool parses_tool_calls() const = 0;
  // Whether a turn cut at its token limit is still sent as a step (OpenEnv: the env grades
  // whatever the agent produced, as TRL's OpenEnv rollouts do) before the episode ends as
  // truncated; furlong's protocol ends it with /finish instead.
  virtual bool steps_truncated_turns() const = 0;
};

// Makes sessions of the configured protocol; thread-safe (each session is used by one thread at
// a time). Throws a furlong::Error naming the flag for a bad URL or protocol.
class EnvSessionFactory {
 public:
  explicit EnvSessionFactory(const AgentOptions& options);
  ~EnvSessionFactory();
  std::unique_ptr<EnvSession> open() const;

 private:
  AgentOptions options_;
  std::unique_ptr<EnvClient> http_;  // furlong and openenv-http
  std::string ws_host_, ws_path_;    // openenv
  int ws_port_ = 0;
  std::unique_ptr<WsKeepalive> keepalive_;  // openenv: answers the open sessions' pings
};

// A sample as env and harness requests carry it: {index, group_index, prompt, label (null when
// none), metadata}.
Json sample_payload(const rl::Sample& s);

// An OpenEnv observation object as the user message furlong appends (see above), or an error
// naming --agent-env-observation-key.
std::optional<std::string> openenv_observation_text(const Json& observation, const std::string& key,
                                                    std::string& error);
// An OpenEnv result {observation, reward, done} as a StepReply; `total` is the episode's reward
// so far (updated). `where` names the message in errors.
std::optional<StepReply> parse_openenv_result(const Json& data, const std::string& observation_key,
                                              std::optional<double>& total,
                                              const std::string& where, std::string& error);

}  // namespace furlong::rollout
