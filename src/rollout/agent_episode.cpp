#include "rollout/agent_episode.h"

#include "rollout/agent_episode_impl.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

#include "core/concurrency.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/strings.h"
#include "data/observation_render.h"
#include "data/sample_builder.h"
#include "data/tool_calls.h"
#include "rollout/engine_layout.h"
#include "rollout/env_client.h"
#include "rollout/env_session.h"
#include "rollout/rollout_engines.h"
#include "rollout/session_server.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::rollout {
namespace {

uint64_t mix(uint64_t a, uint64_t b) {  // splitmix64 of a combination of a and b
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The prompt as chat messages: a message list as given, a string as one user message (it was
// rendered under --apply-chat-template); an error for prompts sent without a template.
OrderedJson prompt_messages(const rl::Sample& s, bool apply_chat_template) {
  if (s.prompt.is_array()) return OrderedJson::parse(s.prompt.dump());
  FURLONG_CHECK(s.prompt.is_string() && apply_chat_template, "sample ", s.index,
                ": agent episodes render observations with the chat template, so the prompt "
                "must be chat-templated too: use message-list prompts or --apply-chat-template");
  return OrderedJson::array({{{"role", "user"}, {"content", s.prompt.get<std::string>()}}});
}

}  // namespace

bool removes_sample(const std::string& reason) {
  return reason == "env_error" || reason == "env_timeout" || reason == "env_response_too_large" ||
         reason == "harness_error" || reason == "harness_timeout" ||
         reason == "harness_response_too_large" || reason == "no_turns" ||
         reason == "history_diverged";
}

AgentEpisodeRunner::AgentEpisodeRunner(const RolloutConfig& options,
                                       const tokenizer::Tokenizer& tokenizer)
    : options_(options), tokenizer_(tokenizer) {
  const auto& hf = options.engine.hf_checkpoint;
  own_chat_ = options.data.chat_template_path
                  ? std::make_unique<tokenizer::ChatFormatter>(hf, *options.data.chat_template_path)
                  : std::make_unique<tokenizer::ChatFormatter>(hf);
  chat_ = own_chat_.get();
  if (options.agent.agent_env_url) envs_ = std::make_unique<EnvSessionFactory>(options.agent);
  if (options.agent.agent_harness_url) start_harness(options);
}

AgentEpisodeRunner::AgentEpisodeRunner(const RolloutConfig& options,
                                       const tokenizer::Tokenizer& tokenizer,
                                       const tokenizer::ChatFormatter& chat)
    : options_(options), tokenizer_(tokenizer), chat_(&chat) {
  if (options.agent.agent_env_url) envs_ = std::make_unique<EnvSessionFactory>(options.agent);
  if (options.agent.agent_harness_url) start_harness(options);
}

AgentEpisodeRunner::~AgentEpisodeRunner() = default;

void AgentEpisodeRunner::start_episode(Run& run, Episode& ep) {
  const rl::Sample& s = *ep.sample;
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(run.mu);
    stopping = run.stopping;
  }
  if (stopping) {  // the consumer has enough (an episode that waited for a session)
    ep.sample->status = rl::SampleStatus::kAborted;
    end_episode(run, ep, "aborted");
    return;
  }
  // One seed per group: OpenEnv environments draw their task from it, and a GRPO group must
  // share its task.
  const uint64_t seed =
      mix(static_cast<uint64_t>(options_.data.rollout_seed), static_cast<uint64_t>(s.group_index));
  if (harness_) {
    run_harness_session(run, ep, seed);
    return;
  }
  ep.history = prompt_messages(s, options_.data.apply_chat_template);
  OrderedJson extra = chat_template_kwargs(options_.data);
  if (s.metadata.contains("tools")) extra["tools"] = OrderedJson::parse(s.metadata["tools"].dump());
  ep.renderer = std::make_unique<data::ObservationRenderer>(*chat_, extra);
  ep.session = envs_->open();
  EnvAnswer start = ep.session->start(s, seed);
  if (start.ok() && start.step.done) start.error = "the env ended the episode at its start";
  if (!start.ok()) {
    end_episode(run, ep, ep.env_failure(start.reply, std::move(start.error)));
    return;
  }
  ep.session_open = true;
  if (!start.step.observation.empty()) open_with(ep, start.step.observation, extra);
  queue_turn(run, ep);
}

// The env's opening observation joins the prompt: its messages are appended to the prompt's
// and the prompt is rendered and tokenized again, as the dataset's prompts are.
void AgentEpisodeRunner::open_with(Episode& ep, const OrderedJson& observation,
                                   const OrderedJson& extra) {
  rl::Sample& s = *ep.sample;
  FURLONG_ASSERT(s.response_length == 0, "an opening observation after a turn");
  for (const auto& m : observation) ep.history.push_back(m);
  const std::string text = chat_->apply(ep.history, /*add_generation_prompt=*/true, extra);
  s.tokens = tokenizer_.encode(text, /*add_special_tokens=*/false);
  s.prompt = Json::parse(ep.history.dump());
}

// Sizes the next turn and hands it to the driver thread, or ends the episode when no token
// budget is left.
void AgentEpisodeRunner::queue_turn(Run& run, Episode& ep) {
  const rl::Sample& s = *ep.sample;
  const int64_t left = options_.agent.agent_max_episode_tokens - s.response_length;
  const int64_t budget =
      std::min(left, data::max_new_tokens_for(static_cast<int64_t>(s.tokens.size()), 0,
                                              run.params.max_new_tokens,
                                              options_.rollout.rollout_max_context_len));
  if (budget <= 0) {
    data::mark_no_budget(*ep.sample);  // TRUNCATED
    end_episode(run, ep, "token_budget");
    return;
  }
  ep.turn_budget = budget;
  {
    std::lock_guard<std::mutex> lock(run.mu);
    run.to_submit.push_back(&ep);
  }
  run.cv.notify_all();
}

void AgentEpisodeRunner::append_turn(Episode& ep, const engine::GenerateOutput& out) {
  rl::Sample& s = *ep.sample;
  const std::string text =
      tokenizer_.decode(out.output_ids, options_.rollout.rollout_skip_special_tokens);
  data::GeneratedResponse response{.token_ids = out.output_ids,
                                   .log_probs = out.output_logprobs,
                                   .finish_reason = engine::finish_reason_name(out.finish_reason),
                                   .text = text,
                                   .weight_version = out.weight_version};
  data::append_response(s, response, ep.turn_budget);
  s.metadata["weight_version"] = out.weight_version;
  ++ep.turns;
  ep.last_text = text;
}

void AgentEpisodeRunner::finish_turn(Run& run, Episode& ep, engine::GenerateOutput out) {
  append_turn(ep, out);
  if (out.finish_reason != engine::FinishReason::kStop) {
    const bool length = out.finish_reason == engine::FinishReason::kLength;
    if (length && ep.session->steps_truncated_turns()) {
      // The text a completed turn sends too: decoded without special tokens.
      EnvAnswer answer =
          ep.session->step(ep.turns - 1, Json::object(), tokenizer_.decode(out.output_ids, true));
      if (!answer.ok()) {
        end_episode(run, ep, ep.env_failure(answer.reply, std::move(answer.error)));
        return;
      }
      if (answer.step.reward) ep.env_reward = answer.step.reward;
      ep.env_done = answer.step.done;
    }
    end_episode(run, ep, length ? "length" : "aborted");
    return;
  }
  if (continue_after_turn(run, ep, tokenizer_.decode(out.output_ids, false),
                          tokenizer_.decode(out.output_ids, true))) {
    queue_turn(run, ep);
  }
}

// After a completed turn: the env's answer (or furlong's, for a malformed call), the limits,
// and the observation appended. False when the episode ended.
bool AgentEpisodeRunner::continue_after_turn(Run& run, Episode& ep, const std::string& raw_text,
                                             const std::string& text) {
  const data::ParsedTurn parsed = ep.session->parses_tool_calls()
                                      ? data::parse_tool_calls(text)
                                      : data::ParsedTurn{.content = text, .calls = {}, .error = {}};
  OrderedJson observation;
  if (parsed.malformed()) {
    ++ep.malformed;
    observation = OrderedJson::array(
        {{{"role", "tool"}, {"content", "error: malformed tool call: " + parsed.error}}});
  } else {
    ep.tool_calls += static_cast<int64_t>(parsed.calls.size());
    const Json message = {{"role", "assistant"},
                          {"content", parsed.content},
                          {"tool_calls", Json::parse(data::tool_calls_json(parsed.calls).dump())}};
    EnvAnswer answer = ep.session->step(ep.turns - 1, message, text);
    if (!answer.ok()) {
      end_episode(run, ep, ep.env_failure(answer.reply, std::move(answer.error)));
      return false;
    }
    StepReply* step = &answer.step;
    if (step->reward) ep.env_reward = step->reward;
    if (step->done) {
      ep.env_done = true;
      end_episode(run, ep, "done");
      return false;
    }
    observation = std::move(step->observation);
  }
  if (ep.turns >= options_.agent.agent_max_turns) {
    ep.sample->status = rl::SampleStatus::kTruncated;
    end_episode(run, ep, "turn_limit");
    return false;
  }
  const std::string delta = ep.renderer->render(ep.history, raw_text, observation);
  ep.history.push_back({{"role", "assistant"}, {"content", text}});
  for (const auto& m : observation) ep.history.push_back(m);
  const auto ids = tokenizer_.encode(delta, /*add_special_tokens=*/false);
  const rl::Sample& s = *ep.sample;
  // The observation only goes in with room for at least one more generated token: a sequence
  // never ends in tokens the model does not train on.
  const int64_t after = s.response_length + static_cast<int64_t>(ids.size());
  const auto context = options_.rollout.rollout_max_context_len;
  if (after >= options_.agent.agent_max_episode_tokens ||
      (context && static_cast<int64_t>(s.tokens.size() + ids.size()) >= *context)) {
    ep.sample->status = rl::SampleStatus::kTruncated;
    end_episode(run, ep, "token_budget");
    return false;
  }
  data::append_observation(*ep.sample, ids);
  ep.masked_tokens += static_cast<int64_t>(ids.size());
  return true;
}

void AgentEpisodeRunner::end_episode(Run& run, Episode& ep, const std::string& reason) {
  rl::Sample& s = *ep.sample;
  const bool env_failed = removes_sample(reason);
  if (!ep.env_done && ep.session_open && !env_failed) {
    // furlong ended it: the env may free its state and give a final reward.
    EnvAnswer finish = ep.session->finish(reason);
    if (!finish.ok()) {
      // Counted; the episode keeps its end reason (the env's last word is lost, not the turns).
      ++ep.env_errors;
      ep.timeouts += finish.reply.timed_out ? 1 : 0;
      ep.oversized += finish.reply.too_large ? 1 : 0;
      LOG_WARN("sample ", s.index, ": ", finish.error);
    }
    if (finish.step.reward) ep.env_reward = finish.step.reward;
  }
  if (env_failed) {
    s.status = rl::SampleStatus::kAborted;
    s.remove = true;  // nothing to learn from a broken episode
    LOG_WARN("sample ", s.index, ": episode ended after ", ep.turns, " turn(s): ", ep.error);
  }
  s.response = ep.last_text;
  // Every string in the record is valid UTF-8 (an env's bytes reach it through error texts), so
  // dumping it later (--save-debug-rollout-data, metrics) cannot fail.
  const std::string messages = ep.history.dump(-1, ' ', false, Json::error_handler_t::replace);
  Json record = {{"turns", ep.turns},
                 {"tool_calls", ep.tool_calls},
                 {"malformed", ep.malformed},
                 {"env_errors", ep.env_errors},
                 {"timeouts", ep.timeouts},
                 {"oversized", ep.oversized},
                 {"masked_tokens", ep.masked_tokens},
                 {"harness_errors", ep.harness_errors},
                 {"divergences", ep.divergences},
                 {"untrained_turns", ep.untrained_turns},
                 {"end_reason", reason},
                 {"messages", Json::parse(messages)}};
  if (ep.env_reward) {
    record["reward"] = *ep.env_reward;
    s.raw_reward = *ep.env_reward;
    s.reward = *ep.env_reward;
  }
  if (!ep.error.empty()) record["error"] = valid_utf8(ep.error);
  if (!ep.harness_metrics.empty()) record["harness_metrics"] = ep.harness_metrics;
  s.metadata["agent"] = std::move(record);
  release(run, ep);
}

void AgentEpisodeRunner::release(Run& run, Episode& ep) {
  if (ep.ended) return;
  ep.ended = true;
  ep.session.reset();  // an OpenEnv connection closes here (its server-side env with it)
  Episode* next = nullptr;
  {
    std::lock_guard<std::mutex> lock(run.mu);
    --run.active;
    if (--run.remaining[ep.group] == 0) {
      run.finished.push_back(ep.group);
      run.group_done[ep.group] = 1;
    }
    if (!run.waiting.empty()) {
      next = run.waiting.front();
      run.waiting.pop_front();
    }
  }
  if (next) {
    run.pool->post([this, &run, next] { guarded(run, *next, [&] { start_episode(run, *next); }); });
  }
  run.cv.notify_all();
}

// Runs `step` of episode `ep` on the calling (pool) thread; an internal error (a template or
// engine contract failure, not an env failure) ends the episode and is raised by the driver.
void AgentEpisodeRunner::guarded(Run& run, Episode& ep, const std::function<void()>& step) {
  try {
    step();
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(run.mu);
      if (run.error.empty())
        run.error = "sample " + std::to_string(ep.sample->index) + ": " + e.what();
    }
    ep.sample->status = rl::SampleStatus::kFailed;
    release(run, ep);
  }
}

void AgentEpisodeRunner::submit(Run& run, Episode& ep) {
  const rl::Sample& s = *ep.sample;
  engine::GenerateRequest request{.input_ids = ep.harness_turn ? ep.harness_input : s.tokens,
                                  .sampling = run.params};
  request.sampling.max_new_tokens = ep.turn_budget;
  // Per-sample, per-turn seeds: the same episode draws the same random numbers in a rerun,
  // whatever shares the engine's batch (docs/agents.md says what that does and does not fix).
  // (63 bits: servers take the seed as a non-negative integer.)
  request.sampling.seed =
      mix(mix(static_cast<uint64_t>(options_.data.rollout_seed), static_cast<uint64_t>(s.index)),
          static_cast<uint64_t>(ep.turns)) >>
      1;
  if (ep.harness_turn) {  // a harness's chat request waits for it (harness_episode.cpp)
    run.engines->submit_to(
        ep.engine, std::move(request),
        [turn = ep.harness_turn](engine::GenerateOutput out) { turn->set_value(std::move(out)); });
    return;
  }
  Episode* target = &ep;
  run.engines->submit_to(
      ep.engine, std::move(request), [this, &run, target](engine::GenerateOutput out) {
        // An engine thread: the work (env requests) goes to the pool.
        auto shared = std::make_shared<engine::GenerateOutput>(std::move(out));
        run.pool->post([this, &run, target, shared] {
          guarded(run, *target, [&] { finish_turn(run, *target, std::move(*shared)); });
        });
      });
}

void AgentEpisodeRunner::generate_groups(RolloutEngines& engines,
                                         std::vector<std::vector<rl::Sample>> groups,
                                         const engine::SamplingParams& params,
                                         const GroupConsumer& consume) {
  Run run;
  run.engines = &engines;
  run.params = params;
  run.remaining.resize(groups.size());
  run.group_done.assign(groups.size(), 0);
  const auto engine_of_group =
      split_groups_over_engines(static_cast<int64_t>(groups.size()), engines.num_engines());
  std::vector<std::unique_ptr<Episode>> episodes;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    run.remaining[gi] = static_cast<int64_t>(groups[gi].size());
    for (auto& sample : groups[gi]) {
      auto ep = std::make_unique<Episode>();
      ep->sample = &sample;
      ep->group = gi;
      ep->engine = engine_of_group[gi];
      episodes.push_back(std::move(ep));
    }
  }
  run.active = static_cast<int64_t>(episodes.size());
  for (size_t gi = 0; gi < groups.size(); ++gi) {  // empty groups are done at once
    if (run.remaining[gi] == 0) {
      run.finished.push_back(gi);
      run.group_done[gi] = 1;
    }
  }
  run.pool = std::make_unique<WorkerPool>(std::clamp<int64_t>(
      static_cast<int64_t>(episodes.size()), 1, options_.agent.agent_env_concurrency));
  // OpenEnv WebSocket sessions each hold an environment on the server: at most
  // --agent-env-concurrency are open at once. furlong's protocol and OpenEnv's HTTP form keep
  // episodes by id, so their episodes all start at once.
  const bool bounded = options_.agent.agent_env_protocol == "openenv";
  const auto limit = static_cast<size_t>(options_.agent.agent_env_concurrency);
  for (size_t i = 0; i < episodes.size(); ++i) {
    Episode* e = episodes[i].get();
    if (bounded && i >= limit) {
      run.waiting.push_back(e);
      continue;
    }
    run.pool->post([this, &run, e] { guarded(run, *e, [&] { start_episode(run, *e); }); });
  }
  drive(run, groups, consume);
  run.pool.reset();  // every episode has ended: the queue is empty
  engines.rethrow_errors();
  FURLONG_CHECK(run.error.empty(), "agent rollout: ", run.error);
}

// A turn that will not be generated: a harness's request is answered as aborted, an env
// episode ends as aborted.
void AgentEpisodeRunner::abort_turn(Run& run, Episode& ep) {
  if (ep.harness_turn) {
    engine::GenerateOutput aborted;
    aborted.finish_reason = engine::FinishReason::kAbort;
    try {
      ep.harness_turn->set_value(std::move(aborted));
    } catch (const std::future_error&) {  // its engine answered after all
    }
    return;
  }
  Episode* target = &ep;
  run.pool->post([this, &run, target] {
    guarded(run, *target, [&] {
      target->sample->status = rl::SampleStatus::kAborted;
      end_episode(run, *target, "aborted");
    });
  });
}

// The driver thread: submits queued turns, dispatches them, and hands finished groups to
// `consume` (in group order with several engines, so what is kept does not depend on timing).
void AgentEpisodeRunner::drive(Run& run, std::vector<std::vector<rl::Sample>>& groups,
                               const GroupConsumer& consume) {
  const bool in_order = run.engines->num_engines() > 1;
  size_t next_in_order = 0;
  auto ready = [&] {
    return in_order ? next_in_order < groups.size() && run.group_done[next_in_order] != 0
                    : !run.finished.empty();
  };
  int64_t total = 0;
  for (const auto& g : groups) total += static_cast<int64_t>(g.size());
  ProgressBar bar("episodes", total, "samples");
  std::exception_ptr failure;
  while (true) {
    std::unique_lock<std::mutex> lock(run.mu);
    run.cv.wait(lock, [&] { return !run.to_submit.empty() || ready() || run.active == 0; });
    std::deque<Episode*> submits;
    std::swap(submits, run.to_submit);
    const bool stopping = run.stopping;
    std::optional<size_t> take;
    if (ready()) {
      if (in_order) {
        take = next_in_order++;
      } else {
        take = run.finished.front();
        run.finished.pop_front();
      }
    }
    const bool idle = submits.empty() && !take && run.active == 0;
    lock.unlock();
    if (idle) break;
    if (stopping) {
      for (Episode* ep : submits) abort_turn(run, *ep);
    } else {
      try {
        for (Episode* ep : submits) submit(run, *ep);
        if (!submits.empty()) run.engines->dispatch();
      } catch (...) {
        // The engines refused the round: no callback comes for it. The run fails once every
        // episode has ended (their state lives in this frame and generate_groups').
        if (!failure) failure = std::current_exception();
        {
          std::lock_guard<std::mutex> guard(run.mu);
          run.stopping = true;
        }
        run.engines->abort_all();
        for (Episode* ep : submits) abort_turn(run, *ep);
        continue;
      }
    }
    if (!take) continue;
    bar.advance(static_cast<int64_t>(groups[*take].size()));
    if (stopping) continue;  // aborted leftovers after the consumer had enough
    bool enough = false;
    try {
      enough = consume(std::move(groups[*take]));
    } catch (...) {  // raised once every episode has ended (they use this frame's state)
      failure = std::current_exception();
      enough = true;
    }
    if (enough) {
      {
        std::lock_guard<std::mutex> guard(run.mu);
        run.stopping = true;
      }
      run.engines->abort_all();
    }
  }
  bar.finish();
  if (failure) std::rethrow_exception(failure);
}

std::function<void(std::vector<rl::Sample*>&)> with_env_rewards(
    std::function<void(std::vector<rl::Sample*>&)> reward) {
  return [reward = std::move(reward)](std::vector<rl::Sample*>& samples) {
    std::vector<rl::Sample*> todo;
    for (rl::Sample* s : samples) {
      const bool env_graded =
          s->metadata.contains("agent") && s->metadata["agent"].contains("reward");
      if (!env_graded) todo.push_back(s);
    }
    if (todo.empty()) return;
    if (reward) {
      reward(todo);
      return;
    }
    for (rl::Sample* s : todo) {
      s->raw_reward = 0.0;
      s->reward = 0.0;
      // Aborted episodes (env failures, stopped rollouts) are counted elsewhere.
      const bool counted = s->metadata.contains("agent") && s->status != rl::SampleStatus::kAborted;
      if (counted) s->metadata["agent"]["reward_missing"] = true;
    }
  };
}

void add_agent_metrics(const std::vector<rl::Sample>& samples,
                       std::map<std::string, double>& metrics) {
  double episodes = 0, turns = 0, calls = 0, errors = 0, timeouts = 0, malformed = 0, oversized = 0;
  double missing = 0, masked = 0, response = 0, harness_errors = 0, divergences = 0, untrained = 0;
  std::map<std::string, std::pair<double, double>> reported;  // harness metric: sum, count
  for (const auto& s : samples) {
    if (!s.metadata.contains("agent")) continue;
    const Json& a = s.metadata["agent"];
    episodes += 1;
    turns += a.value("turns", 0.0);
    calls += a.value("tool_calls", 0.0);
    errors += a.value("env_errors", 0.0);
    timeouts += a.value("timeouts", 0.0);
    oversized += a.value("oversized", 0.0);
    malformed += a.value("malformed", 0.0);
    missing += a.value("reward_missing", false) ? 1.0 : 0.0;
    masked += a.value("masked_tokens", 0.0);
    harness_errors += a.value("harness_errors", 0.0);
    divergences += a.value("divergences", 0.0);
    untrained += a.value("untrained_turns", 0.0);
    response += static_cast<double>(s.response_length);
    const Json harness = a.value("harness_metrics", Json::object());
    for (const auto& [name, v] : harness.items()) {
      reported[name].first += v.get<double>();
      reported[name].second += 1;
    }
  }
  if (episodes == 0) return;
  metrics["rollout/agent/turns"] = turns / episodes;
  metrics["rollout/agent/tool_calls"] = calls / episodes;
  metrics["rollout/agent/env_errors"] = errors;
  metrics["rollout/agent/timeouts"] = timeouts;
  metrics["rollout/agent/oversized_responses"] = oversized;
  metrics["rollout/agent/malformed_tool_calls"] = malformed;
  metrics["rollout/agent/missing_reward"] = missing;
  metrics["rollout/agent/masked_token_share"] = response > 0 ? masked / response : 0.0;
  metrics["rollout/agent/harness_errors"] = harness_errors;
  metrics["rollout/agent/history_divergences"] = divergences;
  metrics["rollout/agent/untrained_turns"] = untrained;
  for (const auto& [name, sum_count] : reported)
    metrics["rollout/agent/harness/" + name] = sum_count.first / sum_count.second;
}

void validate_agent_options(const RolloutConfig& o) {
  const auto& a = o.agent;
  if (!agent_rollouts(a)) return;
  FURLONG_CHECK(!(a.agent_env_url && a.agent_harness_url),
                "--agent-env-url and --agent-harness-url cannot be combined: either furlong drives "
                "the episodes against an env, or a harness drives them over the OpenAI API");
  FURLONG_CHECK(a.agent_max_turns >= 1, "--agent-max-turns must be >= 1, got ", a.agent_max_turns);
  FURLONG_CHECK(a.agent_max_episode_tokens >= 1, "--agent-max-episode-tokens must be >= 1, got ",
                a.agent_max_episode_tokens);
  FURLONG_CHECK(a.agent_env_timeout > 0, "--agent-env-timeout must be > 0 seconds, got ",
                a.agent_env_timeout);
  FURLONG_CHECK(a.agent_env_max_retries >= 0 && a.agent_env_max_retries <= 100,
                "--agent-env-max-retries must be in 0..100, got ", a.agent_env_max_retries);
  FURLONG_CHECK(a.agent_env_max_response_bytes >= 1,
                "--agent-env-max-response-bytes must be >= 1, got ",
                a.agent_env_max_response_bytes);
  FURLONG_CHECK(a.agent_env_concurrency >= 1 && a.agent_env_concurrency <= 1024,
                "--agent-env-concurrency must be in 1..1024, got ", a.agent_env_concurrency);
  FURLONG_CHECK(!o.engine.record_routing,
                "agent episodes with --use-rollout-routing-replay are not supported: the "
                "engines' expert ids cover one generation, an episode has several");
  FURLONG_CHECK(!o.rollout.partial_rollout,
                "agent episodes with --partial-rollout are not supported: an episode cannot be "
                "resumed in a later rollout (its env state is gone)");
  if (a.agent_env_url) {
    EnvSessionFactory check(a);  // the protocol and the URL's form
    return;
  }
  FURLONG_CHECK(a.agent_session_timeout > 0 && a.agent_session_timeout <= 86400,
                "--agent-session-timeout must be in (0, 86400] seconds, got ",
                a.agent_session_timeout);
  FURLONG_CHECK(
      a.agent_harness_on_divergence == "restart" || a.agent_harness_on_divergence == "abort",
      "--agent-harness-on-divergence must be restart or abort, got '",
      a.agent_harness_on_divergence, "'");
  // The host is also the base_url's: a wildcard address would name no reachable host.
  const std::string& host = a.agent_session_host;
  FURLONG_CHECK(!host.empty() && host != "0.0.0.0" && host.find(':') == std::string::npos,
                "--agent-session-host must be a host name or IPv4 address the harness reaches "
                "(it is bound and named in each session's base_url), got '",
                host, "'");
  EnvClient check(harness_client_options(a));  // the URL's form
}

}  // namespace furlong::rollout
