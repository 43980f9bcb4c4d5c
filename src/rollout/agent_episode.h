// Multi-turn agent episodes on the rollout side (--agent-env-url; docs/agents.md). Each sample
// of a rollout becomes one episode against an environment server: furlong generates an
// assistant turn on the engines, parses its tool calls (data/tool_calls.h), sends the turn to
// the env, renders the env's observation with the chat template (data/observation_render.h)
// and appends it with loss mask 0, then generates the next turn, until the env says done or a
// limit (--agent-max-turns, --agent-max-episode-tokens, the context length) ends it.
//
// A sample's tokens are the prompt, then every turn's generated tokens (loss mask 1, their
// rollout log-probs) and the observation tokens between them (loss mask 0, log-prob 0).
// Env failures (after retries) and timeouts end the episode, never the run: the sample is
// ABORTED and removed from the loss, and counted in metrics. A malformed tool call is answered
// by furlong itself with an error observation (role tool); the env does not see that turn.
// The reward: the env's (the last non-null reward of /step or /finish) when it gives one,
// otherwise the configured reward function (--rm-type / --rm-url) grades the final turn's text.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "rl/sample.h"
#include "rollout/options.h"

namespace furlong::tokenizer {
class Tokenizer;
class ChatFormatter;
}  // namespace furlong::tokenizer

namespace furlong::rollout {

class RolloutEngines;
class EnvSessionFactory;
class EnvClient;
class SessionServer;
struct SessionReply;

class AgentEpisodeRunner {
 public:
  // Takes a finished group; returns true when the caller has enough (the rest is then aborted).
  using GroupConsumer = std::function<bool(std::vector<rl::Sample>&&)>;

  // The chat template comes from --hf-checkpoint (or --chat-template-path), as for prompts.
  AgentEpisodeRunner(const RolloutConfig& options, const tokenizer::Tokenizer& tokenizer);
  // For tests: a given formatter (which must outlive the runner).
  AgentEpisodeRunner(const RolloutConfig& options, const tokenizer::Tokenizer& tokenizer,
                     const tokenizer::ChatFormatter& chat);
  ~AgentEpisodeRunner();

  // Runs one episode per sample of `groups` (groups split over the engines as
  // split_groups_over_engines does) and hands each group to `consume` on this thread once all
  // its episodes ended: in completion order with one engine, in group order with several.
  // Every submit and dispatch to `engines` happens on this thread.
  void generate_groups(RolloutEngines& engines, std::vector<std::vector<rl::Sample>> groups,
                       const engine::SamplingParams& params, const GroupConsumer& consume);

 private:
  struct Run;
  struct Episode;
  void start_episode(Run& run, Episode& ep);
  void open_with(Episode& ep, const OrderedJson& observation, const OrderedJson& extra);
  // The generated turn joins the sample (mask 1, its log-probs); the turn count and text follow.
  void append_turn(Episode& ep, const engine::GenerateOutput& out);
  void finish_turn(Run& run, Episode& ep, engine::GenerateOutput out);
  bool continue_after_turn(Run& run, Episode& ep, const std::string& raw_text,
                           const std::string& text);
  void queue_turn(Run& run, Episode& ep);
  void end_episode(Run& run, Episode& ep, const std::string& reason);
  void release(Run& run, Episode& ep);
  void guarded(Run& run, Episode& ep, const std::function<void()>& step);
  void submit(Run& run, Episode& ep);
  void abort_turn(Run& run, Episode& ep);
  void drive(Run& run, std::vector<std::vector<rl::Sample>>& groups, const GroupConsumer& consume);
  // Harness sessions (harness_episode.cpp).
  struct HarnessLink;
  void start_harness(const RolloutConfig& options);
  void run_harness_session(Run& run, Episode& ep, uint64_t seed);
  SessionReply on_chat(const std::string& id, const std::string& auth, const std::string& body);
  SessionReply harness_turn(Run& run, Episode& ep, HarnessLink& link, const std::string& body);
  void commit_harness_turn(Episode& ep, HarnessLink& link, const engine::GenerateOutput& out,
                           bool restart, const std::vector<int64_t>& ids);

  const RolloutConfig options_;  // a copy: callers pass temporaries (train::rollout_config)
  const tokenizer::Tokenizer& tokenizer_;
  std::unique_ptr<tokenizer::ChatFormatter> own_chat_;
  const tokenizer::ChatFormatter* chat_ = nullptr;
  std::unique_ptr<EnvSessionFactory> envs_;  // --agent-env-url
  // --agent-harness-url: the harness's client, the sessions' endpoint, the open sessions.
  std::unique_ptr<EnvClient> harness_;
  std::string model_name_;
  int64_t harness_context_ = 0;  // the engines' context length (0: unknown)
  std::mutex links_mu_;
  std::map<std::string, std::shared_ptr<HarnessLink>> links_;
  int64_t next_session_ = 0;                 // guarded by links_mu_
  std::unique_ptr<SessionServer> sessions_;  // last: stopped first, before the links go
};

// Wraps the configured reward function (`reward`, null when neither --rm-type nor --rm-url is
// set) for agent rollouts: samples whose env gave a reward keep it; the others are graded by
// `reward`, or get 0 (metadata agent.reward_missing) when there is none.
std::function<void(std::vector<rl::Sample*>&)> with_env_rewards(
    std::function<void(std::vector<rl::Sample*>&)> reward);

// rollout/agent/* over the samples' episode records (metadata["agent"]): turns and tool_calls
// (means per episode), env_errors, timeouts, oversized_responses (answers over
// --agent-env-max-response-bytes), malformed_tool_calls, missing_reward (counts),
// masked_token_share (observation tokens / all response tokens). Nothing without episodes.
void add_agent_metrics(const std::vector<rl::Sample>& samples,
                       std::map<std::string, double>& metrics);

// The rules of the agent flags (called by validate_rl_options): errors name the flag.
void validate_agent_options(const RolloutConfig& options);

}  // namespace furlong::rollout
