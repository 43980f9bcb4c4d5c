// Private to the agent episode runner (agent_episode.cpp: furlong's and OpenEnv's episode
// loop; harness_episode.cpp: harness sessions): one episode's state and one generate_groups
// call's shared state.
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/concurrency.h"
#include "data/observation_render.h"
#include "engine/engine.h"
#include "rl/sample.h"
#include "rollout/agent_episode.h"
#include "rollout/env_client.h"
#include "rollout/env_session.h"

namespace furlong::rollout {

class RolloutEngines;

// One episode's state; only one thread works on an episode at a time (the turn's engine
// callback hands it to the pool, which hands it to the driver to submit the next turn).
struct AgentEpisodeRunner::Episode {
  rl::Sample* sample = nullptr;
  size_t group = 0;
  int64_t engine = 0;
  std::unique_ptr<EnvSession> session;  // open from a successful start to the episode's end
  bool session_open = false;
  OrderedJson history = OrderedJson::array();  // the conversation so far, as messages
  int64_t turns = 0;
  int64_t turn_budget = 0;  // max_new_tokens of the turn in flight
  bool env_done = false;
  std::optional<double> env_reward;
  std::string last_text;  // the last turn's text (as graded: --rollout-skip-special-tokens)
  int64_t tool_calls = 0, malformed = 0, env_errors = 0, timeouts = 0, masked_tokens = 0;
  int64_t oversized = 0;                                // env answers over the size bound
  std::string error;                                    // the env failure that ended it, if any
  std::unique_ptr<data::ObservationRenderer> renderer;  // with this sample's tools
  bool ended = false;
  // Harness sessions (--agent-harness-url): the turn a chat request waits for (set by the
  // request's thread, submitted by the driver), and what the session came to.
  std::vector<int64_t> harness_input;
  std::shared_ptr<std::promise<engine::GenerateOutput>> harness_turn;
  int64_t segment_turns = 0;  // turns in the sample's tokens (the rest were before a divergence)
  int64_t divergences = 0, untrained_turns = 0, harness_errors = 0;
  Json harness_metrics = Json::object();

  // Counts a failed env call (`error` says what failed: the call's or its answer's check) and
  // returns the end reason it gives the episode.
  std::string env_failure(const EnvReply& reply, std::string why) {
    ++env_errors;
    timeouts += reply.timed_out ? 1 : 0;
    oversized += reply.too_large ? 1 : 0;
    error = std::move(why);
    return reply.timed_out   ? "env_timeout"
           : reply.too_large ? "env_response_too_large"
                             : "env_error";
  }
};

// The shared state of one generate_groups call.
struct AgentEpisodeRunner::Run {
  RolloutEngines* engines = nullptr;
  engine::SamplingParams params;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Episode*> to_submit;  // next turns, submitted by the driver thread
  std::vector<int64_t> remaining;  // episodes still running, per group
  std::deque<size_t> finished;     // groups whose episodes all ended, in completion order
  std::vector<char> group_done;
  int64_t active = 0;  // episodes not yet ended
  // Episodes not started yet because OpenEnv WebSocket sessions are bounded
  // (--agent-env-concurrency, generate_groups): each episode that ends starts the next.
  std::deque<Episode*> waiting;
  bool stopping = false;
  std::string error;  // the first internal error (raised on the driver thread)
  std::unique_ptr<WorkerPool> pool;
};

// The client that POSTs tasks to --agent-harness-url: the whole session is one request, bounded
// by --agent-session-timeout, never retried (a harness run is not idempotent).
EnvClientOptions harness_client_options(const AgentOptions& a);

// Whether an episode that ended for `reason` is removed from the loss (ABORTED): env and
// harness failures, and sessions with nothing to train on.
bool removes_sample(const std::string& reason);

}  // namespace furlong::rollout
