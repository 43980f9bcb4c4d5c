// Harness sessions (--agent-harness-url, docs/agents.md "Agent harnesses"): the agent program
// owns the loop. Each sample is one session: furlong POSTs the task (the sample, a base URL and
// an API key of the session's own) to the harness, which calls /v1/chat/completions on that base
// URL any number of times and answers the POST with the reward when it is done. Each chat
// request is one turn: its tokens come from HarnessConversation (the session's tokens as
// generated plus the harness's new messages rendered as an observation), the driver thread
// submits it to the engines like any turn, and the answer is the turn in OpenAI's form.
//
// Threads: the session (the POST) runs on a pool thread; its chat requests arrive on the session
// server's threads, one at a time per session (HarnessLink::mu). The POST's thread closes the link
// under that mutex before the episode ends, so a request never sees an ended episode.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/log.h"
#include "data/sample_builder.h"
#include "data/tool_calls.h"
#include "engine/server/api.h"
#include "engine/server/openai_api.h"
#include "rollout/agent_episode.h"
#include "rollout/agent_episode_impl.h"
#include "rollout/harness_conversation.h"
#include "rollout/session_server.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace furlong::rollout {
namespace {

std::string random_key() {
  std::random_device device;
  std::string key = "fl-";
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) key += hex[device() % 16];
  return key;
}

// The numbers of a harness's "metrics" object (absent or null: none); an error otherwise.
std::optional<Json> harness_metrics(const Json& body, std::string& error) {
  const auto it = body.find("metrics");
  if (it == body.end() || it->is_null()) return Json::object();
  bool numbers = it->is_object();
  if (numbers) {
    for (const auto& [name, v] : it->items())
      numbers = numbers && v.is_number() && std::isfinite(v.get<double>()) && !name.empty();
  }
  if (!numbers) {
    error = "harness: \"metrics\" must be an object of finite numbers, got " + json_excerpt(*it);
    return std::nullopt;
  }
  return *it;
}

// The context the rollout engines serve: --sglang-context-length, or the model's
// max_position_embeddings (0 when neither is known: no bound of its own).
int64_t engine_context_length(const RolloutConfig& o) {
  if (o.rollout.engine_context_length > 0) return o.rollout.engine_context_length;
  const std::filesystem::path config =
      std::filesystem::path(o.engine.hf_checkpoint) / "config.json";
  if (o.engine.hf_checkpoint.empty() || !std::filesystem::exists(config)) return 0;
  const OrderedJson c = read_ordered_json_file(config);
  const OrderedJson& text = c.contains("text_config") ? c["text_config"] : c;
  const auto v = text.value("max_position_embeddings", OrderedJson());
  return v.is_number_integer() ? v.get<int64_t>() : 0;
}

SessionReply session_ended(const std::string& id, const std::string& reason) {
  return session_error(400, "session_ended",
                       "agent session " + id + " takes no more turns: " + reason);
}

}  // namespace

EnvClientOptions harness_client_options(const AgentOptions& a) {
  EnvClientOptions o;
  o.url = a.agent_harness_url.value_or("");
  o.name = "agent harness";
  o.flag = "--agent-harness-url";
  o.timeout_flag = "--agent-session-timeout";
  o.timeout_s = a.agent_session_timeout;
  o.max_retries = 0;
  o.max_response_bytes = a.agent_env_max_response_bytes;
  return o;
}

// What a session's chat requests share with its episode.
struct AgentEpisodeRunner::HarnessLink {
  std::mutex mu;  // one request at a time; guards everything below
  std::string id, api_key;
  Run* run = nullptr;
  Episode* ep = nullptr;
  bool closed = false;  // the session ended: run and ep are not to be touched
  std::string ended;    // non-empty: the session takes no more turns, and why
  std::unique_ptr<HarnessConversation> conversation;
};

void AgentEpisodeRunner::start_harness(const RolloutConfig& options) {
  harness_ = std::make_unique<EnvClient>(harness_client_options(options.agent));
  model_name_ = options.engine.hf_checkpoint.empty()
                    ? "furlong"
                    : std::filesystem::path(options.engine.hf_checkpoint).filename().string();
  harness_context_ = engine_context_length(options);
  // One request in flight per session, at most --agent-env-concurrency sessions at once; the
  // rest of the threads answer requests for sessions that have ended.
  const int64_t threads = 2 * options.agent.agent_env_concurrency + 4;
  sessions_ = std::make_unique<SessionServer>(
      options.agent.agent_session_host, threads, model_name_,
      [this](const std::string& id, const std::string& auth, const std::string& body) {
        return on_chat(id, auth, body);
      });
}

void AgentEpisodeRunner::run_harness_session(Run& run, Episode& ep, uint64_t seed) {
  rl::Sample& s = *ep.sample;
  auto link = std::make_shared<HarnessLink>();
  link->api_key = random_key();
  link->run = &run;
  link->ep = &ep;
  link->conversation = std::make_unique<HarnessConversation>(*chat_, tokenizer_,
                                                             chat_template_kwargs(options_.data));
  {
    std::lock_guard<std::mutex> lock(links_mu_);
    link->id = "s" + std::to_string(next_session_++);
    links_[link->id] = link;
  }
  const Json task = {{"session_id", link->id},   {"base_url", sessions_->base_url(link->id)},
                     {"api_key", link->api_key}, {"model", model_name_},
                     {"seed", seed >> 1},        {"sample", sample_payload(s)}};
  // Whatever happens, the link is closed before the episode ends (a request in flight
  // finishes first), so no request touches an ended episode.
  auto close = [&] {
    {
      std::lock_guard<std::mutex> lock(link->mu);
      link->closed = true;
    }
    std::lock_guard<std::mutex> lock(links_mu_);
    links_.erase(link->id);
  };
  EnvReply reply;
  try {
    reply = harness_->post("", task);
  } catch (...) {
    close();
    throw;
  }
  close();
  std::string reason = link->ended.empty() ? "done" : link->ended;
  std::string error = reply.error;
  std::optional<double> reward;
  std::optional<Json> metrics;
  if (reply.ok && !reply.body.is_object()) {
    error = "harness: the answer must be a JSON object {\"reward\", \"metrics\"}, got " +
            json_excerpt(reply.body);
  } else if (reply.ok) {
    reward = env_reward_field(reply.body, "harness", error);
    metrics = harness_metrics(reply.body, error);
  }
  if (!reply.ok || !error.empty()) {
    ++ep.harness_errors;
    ep.timeouts += reply.timed_out ? 1 : 0;
    ep.oversized += reply.too_large ? 1 : 0;
    ep.error = "session " + link->id + ": " + error;
    reason = reply.timed_out   ? "harness_timeout"
             : reply.too_large ? "harness_response_too_large"
                               : "harness_error";
  } else {
    ep.env_reward = reward;
    ep.harness_metrics = std::move(*metrics);
    // Nothing to train on (the harness never called the model, or a limit refused its first
    // call).
    if (ep.turns == 0 && reason != "aborted") reason = "no_turns";
  }
  if (reason == "aborted") s.status = rl::SampleStatus::kAborted;
  ep.history = link->conversation->messages();
  if (ep.history.empty()) ep.history = OrderedJson::parse(s.prompt.dump());
  end_episode(run, ep, reason);
}

SessionReply AgentEpisodeRunner::on_chat(const std::string& id, const std::string& auth,
                                         const std::string& body) {
  std::shared_ptr<HarnessLink> link;
  {
    std::lock_guard<std::mutex> lock(links_mu_);
    const auto it = links_.find(id);
    if (it != links_.end()) link = it->second;
  }
  const SessionReply unknown =
      session_error(404, "not_found_error", "no open agent session '" + id + "'");
  if (!link) return unknown;
  if (!engine::server::same_secret(auth, "Bearer " + link->api_key)) {
    return session_error(401, "authentication_error",
                         "agent session " + id + ": send the session's api_key as the bearer key");
  }
  std::lock_guard<std::mutex> lock(link->mu);
  if (link->closed) return unknown;
  try {
    return harness_turn(*link->run, *link->ep, *link, body);
  } catch (const std::exception& e) {
    return session_error(400, "invalid_request_error", "agent session " + id + ": " + e.what());
  }
}

SessionReply AgentEpisodeRunner::harness_turn(Run& run, Episode& ep, HarnessLink& link,
                                              const std::string& body) {
  if (!link.ended.empty()) return session_ended(link.id, link.ended);
  // Bounded nesting: copies and comparisons of the messages recurse.
  const OrderedJson parsed_body = parse_ordered_json(body, "the chat request body");
  std::string error;
  const auto request = parse_harness_chat(parsed_body, error);
  if (!request) return session_error(400, "invalid_request_error", error);
  const auto next = link.conversation->next(*request);
  rl::Sample& s = *ep.sample;
  const auto& a = options_.agent;
  if (next.diverged && a.agent_harness_on_divergence == "abort") {
    ++ep.divergences;
    link.ended = "history_diverged";
    return session_ended(link.id,
                         "the messages do not extend the session's conversation "
                         "(--agent-harness-on-divergence abort)");
  }
  if (ep.turns >= a.agent_max_turns) {
    link.ended = "turn_limit";
    s.status = rl::SampleStatus::kTruncated;
    return session_ended(
        link.id, "turn_limit (--agent-max-turns " + std::to_string(a.agent_max_turns) + ")");
  }
  std::vector<int64_t> input = next.ids;
  if (!next.restart) input.insert(input.begin(), s.tokens.begin(), s.tokens.end());
  const int64_t used = next.restart ? 0 : s.response_length + static_cast<int64_t>(next.ids.size());
  // furlong's limits: the episode's tokens, the turn's, the context (the rollout's bound and the
  // engine's, which would refuse the request); the request may ask for fewer.
  const auto input_length = static_cast<int64_t>(input.size());
  int64_t limit = std::min(a.agent_max_episode_tokens - used,
                           data::max_new_tokens_for(input_length, 0, run.params.max_new_tokens,
                                                    options_.rollout.rollout_max_context_len));
  if (harness_context_ > 0) limit = std::min(limit, harness_context_ - input_length);
  const int64_t budget =
      std::min(limit, request->max_tokens.value_or(std::numeric_limits<int64_t>::max()));
  if (budget <= 0) {
    link.ended = "token_budget";
    if (ep.turns > 0) s.status = rl::SampleStatus::kTruncated;
    return session_ended(link.id, "token_budget (--agent-max-episode-tokens, the context)");
  }
  auto turn = std::make_shared<std::promise<engine::GenerateOutput>>();
  auto done = turn->get_future();
  ep.harness_input = std::move(input);
  ep.turn_budget = budget;
  ep.harness_turn = turn;
  {
    std::lock_guard<std::mutex> lock(run.mu);
    run.to_submit.push_back(&ep);
  }
  run.cv.notify_all();
  const engine::GenerateOutput out = done.get();  // the engines always answer (abort included)
  ep.harness_turn.reset();
  const auto prompt_tokens = static_cast<int64_t>(ep.harness_input.size());
  if (out.finish_reason == engine::FinishReason::kAbort) {
    link.ended = "aborted";
    return session_ended(link.id, "the rollout stopped (it has the samples it needs)");
  }
  // The reply's parts that can fail come before the turn is committed.
  const Json logprobs = request->logprobs ? engine::server::chat_token_logprobs(
                                                out.output_ids, out.output_logprobs, tokenizer_)
                                          : Json();
  commit_harness_turn(ep, link, out, next.restart, next.ids);
  // Cut by furlong's limit, the session is over; cut by the request's max_tokens, it is just a
  // short reply (OpenAI's meaning).
  if (out.finish_reason == engine::FinishReason::kLength && budget == limit) link.ended = "length";
  const OrderedJson& message = link.conversation->last_answer();
  const bool calls = message.contains("tool_calls");
  const char* finish = out.finish_reason == engine::FinishReason::kLength ? "length"
                       : calls                                            ? "tool_calls"
                                                                          : "stop";
  Json choice = {{"index", 0},
                 {"message", Json::parse(message.dump())},
                 {"finish_reason", finish},
                 {"logprobs", logprobs}};
  const auto completion = static_cast<int64_t>(out.output_ids.size());
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return {200, Json{{"id", "chatcmpl-" + link.id + "-" + std::to_string(ep.turns - 1)},
                    {"object", "chat.completion"},
                    {"created", std::chrono::duration_cast<std::chrono::seconds>(now).count()},
                    {"model", model_name_},
                    {"choices", Json::array({choice})},
                    {"usage",
                     {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion},
                      {"total_tokens", prompt_tokens + completion}}}}};
}

// The generated turn joins the sample: after the observation tokens (mask 0), or as the first
// turn of a new prompt (the first request, or one whose history diverged: the turns before
// are then not trained).
void AgentEpisodeRunner::commit_harness_turn(Episode& ep, HarnessLink& link,
                                             const engine::GenerateOutput& out, bool restart,
                                             const std::vector<int64_t>& ids) {
  rl::Sample& s = *ep.sample;
  if (restart) {
    if (ep.turns > 0) {
      ++ep.divergences;
      ep.untrained_turns += ep.segment_turns;
      LOG_WARN("sample ", s.index, ": agent session ", link.id,
               ": the harness's messages do not extend the session's conversation; the sample "
               "restarts from them and its ",
               ep.segment_turns, " earlier turn(s) are not trained");
    }
    ep.segment_turns = 0;
    ep.masked_tokens = 0;
    s.tokens = ids;
    s.response_length = 0;
    s.loss_mask.clear();
    s.rollout_log_probs.clear();
    s.weight_versions.clear();
    s.status = rl::SampleStatus::kPending;
  } else if (!ids.empty()) {
    data::append_observation(s, ids);
    ep.masked_tokens += static_cast<int64_t>(ids.size());
  }
  append_turn(ep, out);
  ++ep.segment_turns;
  const std::string plain = tokenizer_.decode(out.output_ids, true);
  const data::ParsedTurn parsed = data::parse_tool_calls(plain);
  if (parsed.malformed()) {
    ++ep.malformed;
  } else {
    ep.tool_calls += static_cast<int64_t>(parsed.calls.size());
  }
  link.conversation->record_turn(harness_assistant_message(parsed, plain, ep.turns - 1), plain,
                                 tokenizer_.decode(out.output_ids, false));
}

}  // namespace furlong::rollout
