#include "rollout/rollout_collector.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>

#include "core/concurrency.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/timer.h"
#include "data/dynamic_filter.h"
#include "metrics/diagnostics.h"
#include "metrics/run_report.h"
#include "rl/advantages.h"
#include "rollout/agent_episode.h"
#include "rollout/engine_layout.h"
#include "rollout/group_completion.h"
#include "tokenizer/tokenizer.h"

namespace furlong::rollout {
namespace {

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// rollout/response_len/* and the truncated ratio over `samples`.
void add_length_metrics(const std::vector<const rl::Sample*>& samples, const std::string& prefix,
                        std::map<std::string, double>& m) {
  std::vector<double> lengths;
  double truncated = 0;
  for (const auto* s : samples) {
    lengths.push_back(s->mask_sum());
    truncated += s->status == rl::SampleStatus::kTruncated ? 1.0 : 0.0;
  }
  if (lengths.empty()) return;
  double sum = 0;
  for (double l : lengths) sum += l;
  m[prefix + "response_len/mean"] = sum / static_cast<double>(lengths.size());
  m[prefix + "response_len/median"] = median(lengths);
  m[prefix + "response_len/max"] = *std::max_element(lengths.begin(), lengths.end());
  m[prefix + "response_len/min"] = *std::min_element(lengths.begin(), lengths.end());
  m[prefix + "truncated_ratio"] = truncated / static_cast<double>(lengths.size());
}

double binomial_ratio(int64_t n, int64_t c, int64_t k) {
  // C(n - c, k) / C(n, k) = prod_{i=0}^{k-1} (n - c - i) / (n - i)
  if (n - c < k) return 0.0;
  double r = 1.0;
  for (int64_t i = 0; i < k; ++i) r *= static_cast<double>(n - c - i) / static_cast<double>(n - i);
  return r;
}

// The engine's expert ids of prompt + response into the sample (rows = sample.tokens.size(),
// which append_response has just extended by the whole output). A request that never reached
// an engine (aborted) has none; one that ran and has none is an error.
void take_routed_experts(rl::Sample& sample, engine::GenerateOutput&& out, bool requested) {
  if (!requested) return;
  auto& r = out.routed_experts;
  if (r.empty()) {
    FURLONG_CHECK(out.finish_reason == engine::FinishReason::kAbort, "sample ", sample.index,
                  ": --use-rollout-routing-replay asked the engine for routed experts and it "
                  "returned none");
    return;
  }
  FURLONG_CHECK(r.num_tokens() == static_cast<int64_t>(sample.tokens.size()), "sample ",
                sample.index, ": the engine returned routed experts for ", r.num_tokens(),
                " tokens, but the sample has ", sample.tokens.size(), " (prompt + response)");
  sample.routed_experts = std::move(r);
}

// What the zero-reward-spread warning names: where rewards come from and the flags that
// change what is graded.
metrics::RewardSetup reward_setup(const RolloutConfig& o) {
  metrics::RewardSetup setup;
  if (o.rollout.rm_type) {
    setup.grader = "--rm-type " + reward::reward_type_name(*o.rollout.rm_type);
  } else if (o.rollout.rm_url) {
    setup.grader = "--rm-url " + *o.rollout.rm_url;
  } else if (o.agent.agent_env_url) {
    setup.grader = "the environment at --agent-env-url " + *o.agent.agent_env_url;
  } else if (o.agent.agent_harness_url) {
    setup.grader = "the harness at --agent-harness-url " + *o.agent.agent_harness_url;
  } else {
    setup.grader = "the reward function";
  }
  setup.label_key = o.data.label_key;
  setup.skip_special_tokens = o.rollout.rollout_skip_special_tokens;
  setup.advantage_estimator = o.advantage_estimator;
  setup.group_normalized = o.group_normalized_rewards;
  return setup;
}

// The prompt as the report's eval table shows it: a string prompt as it is, a message list
// as "role: content" lines.
std::string prompt_text(const Json& prompt) {
  if (prompt.is_string()) return prompt.get<std::string>();
  if (!prompt.is_array()) return prompt.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  for (const auto& m : prompt) {
    const auto content = m.is_object() ? m.value("content", Json()) : m;
    out += (out.empty() ? "" : "\n") + (m.is_object() ? m.value("role", std::string("?")) : "?") +
           ": " +
           (content.is_string() ? content.get<std::string>()
                                : content.dump(-1, ' ', false, Json::error_handler_t::replace));
  }
  return out;
}

// The first metrics::kEvalSampleRows prompts' (by row) first sample of an eval.
std::vector<metrics::EvalSampleRow> eval_sample_rows(
    const std::vector<std::vector<rl::Sample>>& done) {
  std::vector<const rl::Sample*> firsts;
  for (const auto& g : done) {
    if (!g.empty()) firsts.push_back(&g.front());
  }
  std::sort(firsts.begin(), firsts.end(),
            [](const auto* a, const auto* b) { return a->group_index < b->group_index; });
  std::vector<metrics::EvalSampleRow> rows;
  for (size_t i = 0; i < firsts.size() && i < metrics::kEvalSampleRows; ++i) {
    const auto& s = *firsts[i];
    rows.push_back({prompt_text(s.prompt), s.response, s.label, s.raw_reward});
  }
  return rows;
}

}  // namespace

std::map<int64_t, double> pass_at_k(const std::vector<std::vector<double>>& group_rewards) {
  std::map<int64_t, double> out;
  if (group_rewards.empty()) return out;
  const auto n = static_cast<int64_t>(group_rewards.front().size());
  for (int64_t k = 1; k <= n; k *= 2) {
    double sum = 0;
    for (const auto& g : group_rewards) {
      int64_t c = 0;
      for (double r : g) c += r == 1.0 ? 1 : 0;
      sum += 1.0 - binomial_ratio(static_cast<int64_t>(g.size()), c, k);
    }
    out[k] = sum / static_cast<double>(group_rewards.size());
  }
  return out;
}

RolloutCollector::RolloutCollector(const RolloutConfig& options, RolloutEngines& engines,
                                   data::RolloutDataSource& source,
                                   const tokenizer::Tokenizer& tokenizer, RewardFn reward)
    : options_(options),
      engines_(engines),
      source_(source),
      tokenizer_(tokenizer),
      reward_(std::move(reward)) {
  if (agent_rollouts(options.agent)) {  // env rewards first; the reward function for the rest
    const bool graded = options.rollout.rm_type.has_value() || options.rollout.rm_url.has_value();
    reward_ = with_env_rewards(graded ? std::move(reward_) : RewardFn());
    agent_ = std::make_shared<AgentEpisodeRunner>(options, tokenizer);
  }
  if (options.rollout.partial_rollout) {
    partial_buffer_ = std::make_unique<data::RolloutBuffer>(options.data.n_samples_per_prompt);
  }
}

std::string RolloutCollector::decode_text(const std::vector<int64_t>& ids) const {
  return tokenizer_.decode(ids, options_.rollout.rollout_skip_special_tokens);
}

engine::SamplingParams RolloutCollector::sampling_params(bool eval) const {
  const auto& r = options_.rollout;
  const auto& e = options_.eval;
  engine::SamplingParams p;
  p.temperature = eval ? e.eval_temperature.value_or(r.rollout_temperature) : r.rollout_temperature;
  p.top_p = eval ? e.eval_top_p.value_or(r.rollout_top_p) : r.rollout_top_p;
  p.top_k = eval ? e.eval_top_k.value_or(r.rollout_top_k) : r.rollout_top_k;
  p.max_new_tokens = eval ? e.eval_max_response_len.value_or(r.rollout_max_response_len)
                          : r.rollout_max_response_len;
  p.stop = r.rollout_stop;
  p.stop_token_ids = r.rollout_stop_token_ids;
  return p;
}

// One request per sample that still needs tokens, with the budget it has left and a seed of its
// own; the others count as done at once.
void RolloutCollector::submit_groups(std::vector<std::vector<rl::Sample>>& groups,
                                     const engine::SamplingParams& params, bool routed_experts,
                                     GroupCompletion& completion, FirstError& callback_error) {
  const auto engine_of_group =
      split_groups_over_engines(static_cast<int64_t>(groups.size()), engines_.num_engines());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (auto& sample : groups[gi]) {
      // A partial sample continues from its tokens with the budget it has left (miles).
      const int64_t budget = data::max_new_tokens_for(static_cast<int64_t>(sample.tokens.size()),
                                                      sample.response_length, params.max_new_tokens,
                                                      options_.rollout.rollout_max_context_len);
      if (!data::needs_generation(sample) || budget <= 0) {
        // Finished in an earlier rollout, or no token budget: no request (miles).
        if (data::needs_generation(sample)) data::mark_no_budget(sample);
        completion.skip_sample(gi);
        continue;
      }
      completion.expect_request();
      rl::Sample* target = &sample;
      auto done = [this, &completion, &callback_error, gi, budget, target,
                   routed_experts](engine::GenerateOutput out) {
        // Runs on an engine thread; a failure is raised on the driver thread after the round.
        completion.request_done(gi, [&] {
          try {
            record_output(*target, std::move(out), budget, routed_experts);
          } catch (const std::exception& e) {
            callback_error.record(e.what());
          }
        });
      };
      engines_.submit_to(engine_of_group[gi], request_for(sample, params, budget, routed_experts),
                         std::move(done));
    }
  }
}

engine::GenerateRequest RolloutCollector::request_for(const rl::Sample& sample,
                                                      const engine::SamplingParams& params,
                                                      int64_t budget, bool routed_experts) const {
  engine::GenerateRequest request{
      .input_ids = sample.tokens, .sampling = params, .return_routed_experts = routed_experts};
  request.sampling.max_new_tokens = budget;
  // Per-sample seed from the run seed and the sample's running index: the same sample draws
  // the same random numbers in a rerun, whatever else shares the engine's batch (and with
  // colocated engines, which queue a round at once, gets the same tokens).
  // (63 bits: servers take the seed as a non-negative JSON integer.)
  request.sampling.seed = mix_seed(static_cast<uint64_t>(options_.data.rollout_seed),
                                   static_cast<uint64_t>(sample.index)) >>
                          1;
  return request;
}

void RolloutCollector::record_output(rl::Sample& sample, engine::GenerateOutput&& out,
                                     int64_t budget, bool routed_experts) const {
  data::GeneratedResponse response{.token_ids = out.output_ids,
                                   .log_probs = out.output_logprobs,
                                   .finish_reason = engine::finish_reason_name(out.finish_reason),
                                   .text = decode_text(out.output_ids),
                                   .weight_version = out.weight_version};
  data::append_response(sample, response, budget);
  sample.metadata["weight_version"] = out.weight_version;
  take_routed_experts(sample, std::move(out), routed_experts);
}

void RolloutCollector::generate_groups(std::vector<std::vector<rl::Sample>> groups,
                                       const engine::SamplingParams& params,
                                       const GroupConsumer& consume, bool routed_experts,
                                       const GroupSink& leftover, const std::string& label) {
  if (agent_) {  // multi-turn episodes (validation rules out routing replay and partial rollouts)
    agent_->generate_groups(engines_, std::move(groups), params, consume);
    return;
  }
  std::vector<size_t> sizes;
  int64_t total_samples = 0;
  for (const auto& g : groups) {
    sizes.push_back(g.size());
    total_samples += static_cast<int64_t>(g.size());
  }
  // With several engines, groups are taken in their order, once all before them are done, so
  // what is kept does not depend on which engine finished first.
  GroupCompletion completion(sizes, /*in_group_order=*/engines_.num_engines() > 1);
  FirstError callback_error;
  ProgressBar bar(label, total_samples, "samples");
  submit_groups(groups, params, routed_experts, completion, callback_error);
  engines_.dispatch();  // queues the round; returns when other ranks' shares are done
  bool stopped = false;
  while (auto gi = completion.next()) {
    bar.advance(static_cast<int64_t>(groups[*gi].size()));
    if (stopped) {  // aborted (or late) leftovers after the consumer had enough
      if (leftover) leftover(std::move(groups[*gi]));
      continue;
    }
    if (consume(std::move(groups[*gi]))) {
      stopped = true;
      engines_.abort_all();
    }
  }
  bar.finish();
  engines_.rethrow_errors();
  if (stopped) engines_.end_abort();  // every request of this round has returned
  FURLONG_CHECK(callback_error.empty(), "rollout: ", callback_error.message());
}

std::vector<data::SampleGroup> RolloutCollector::next_refill(int64_t num_groups,
                                                             std::map<std::string, double>& m) {
  auto groups = source_.next_groups(num_groups, partial_buffer_.get());
  const auto& r = options_.rollout;
  for (auto& group : groups) {
    for (auto& s : group) {
      if (s.response_length == 0 || !data::needs_generation(s)) continue;
      const int64_t lag = engine_weight_version_ - s.oldest_weight_version(engine_weight_version_);
      if (r.max_weight_staleness && lag > *r.max_weight_staleness) {
        data::restart_sample(s);  // too stale to continue: from the prompt again
        m["rollout/partial/restarted_samples"] += 1;
        continue;
      }
      if (r.mask_offpolicy_in_partial_rollout) data::mask_offpolicy_prefix(s);
      m["rollout/partial/resumed_samples"] += 1;
      m["rollout/partial/resumed_tokens"] += static_cast<double>(s.response_length);
    }
  }
  return groups;
}

std::map<std::string, double> weight_version_metrics(const std::vector<rl::Sample>& samples) {
  std::map<std::string, double> m;
  double sum = 0, count = 0, mixed = 0, with_versions = 0;
  int64_t lo = 0, hi = 0;
  for (const auto& s : samples) {
    if (s.weight_versions.empty()) continue;
    const auto [a, b] = std::minmax_element(s.weight_versions.begin(), s.weight_versions.end());
    lo = with_versions == 0 ? *a : std::min(lo, *a);
    hi = with_versions == 0 ? *b : std::max(hi, *b);
    with_versions += 1;
    mixed += *a != *b ? 1.0 : 0.0;
    for (int64_t v : s.weight_versions) sum += static_cast<double>(v);
    count += static_cast<double>(s.weight_versions.size());
  }
  if (with_versions == 0) return m;
  m["rollout/weight_version/min"] = static_cast<double>(lo);
  m["rollout/weight_version/max"] = static_cast<double>(hi);
  m["rollout/weight_version/mean"] = sum / count;
  m["rollout/weight_version/mixed_ratio"] = mixed / with_versions;
  return m;
}

// Refills until the collector has enough groups (dynamic sampling may reject some): each
// finished group is graded and offered; what is still generating at the end goes to
// `unfinished` under --partial-rollout (else it is dropped).
void RolloutCollector::generate_until_enough(data::GroupCollector& collector, RoundTally& tally,
                                             std::vector<data::SampleGroup>& unfinished,
                                             std::map<std::string, double>& metrics) {
  const int64_t target = *options_.data.rollout_batch_size;
  const int64_t per_refill =
      std::max(target, options_.rollout.over_sampling_batch_size.value_or(target));
  const auto params = sampling_params(/*eval=*/false);
  GroupSink keep_unfinished;
  if (partial_buffer_) {
    keep_unfinished = [&](std::vector<rl::Sample>&& g) { unfinished.push_back(std::move(g)); };
  }
  auto grade_and_offer = [&](std::vector<rl::Sample>&& group) {
    ++tally.generated_groups;
    std::vector<rl::Sample*> ptrs;
    for (auto& s : group) ptrs.push_back(&s);
    reward_(ptrs);
    if (!spread_checked_) {
      tally.first_rewards.emplace_back();
      for (const auto& s : group) tally.first_rewards.back().push_back(s.raw_reward);
    }
    if (group.size() > 1 && !(data::group_reward_std(group) > 1e-8)) {
      ++tally.zero_std_groups;
      metrics["rollout/zero_std/count_" + data::rounded_reward_text(group.front().raw_reward)] += 1;
    }
    collector.offer(std::move(group));
    return collector.done();
  };
  while (!collector.done()) {
    generate_groups(next_refill(per_refill, metrics), params, grade_and_offer,
                    options_.engine.record_routing, keep_unfinished);
    FURLONG_CHECK(collector.done() || tally.generated_groups < 100 * target + 1000,
                  "dynamic sampling kept only ", collector.num_kept(), " of ", target,
                  " groups after ", tally.generated_groups,
                  " generated: the filter rejects almost everything (check the rewards)");
  }
}

// A run whose first rollout has no reward spread learns nothing: say so, once.
void RolloutCollector::check_reward_spread_once(const std::vector<std::vector<double>>& rewards) {
  if (spread_checked_) return;
  spread_checked_ = true;
  const auto warning = metrics::zero_reward_spread_warning(rewards, reward_setup(options_));
  if (!warning.empty()) LOG_WARN(warning);
}

void RolloutCollector::buffer_unfinished(std::vector<data::SampleGroup>&& unfinished,
                                         int64_t rollout_id,
                                         std::map<std::string, double>& metrics) {
  for (const auto& g : unfinished) {
    for (const auto& s : g) {
      metrics["rollout/partial/buffered_samples"] += 1;
      metrics["rollout/partial/buffered_tokens"] += static_cast<double>(s.response_length);
    }
  }
  partial_buffer_->add(std::move(unfinished), rollout_id);
  metrics["rollout/partial/buffer_groups"] = static_cast<double>(partial_buffer_->size());
}

// The kept groups' samples in prompt order, whatever order the groups finished in (a rerun, or
// a run on other engines, trains on the same batch); returns each group's raw rewards.
static std::vector<std::vector<double>> take_in_prompt_order(data::GroupCollector& collector,
                                                             std::vector<rl::Sample>& samples) {
  auto kept = collector.take_kept();
  std::stable_sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.front().group_index < b.front().group_index;
  });
  std::vector<std::vector<double>> group_raw;
  for (auto& g : kept) {
    group_raw.emplace_back();
    for (auto& s : g) {
      group_raw.back().push_back(s.raw_reward);
      samples.push_back(std::move(s));
    }
  }
  return group_raw;
}

// Rollout-side metrics (miles' names) of the kept samples; fails when the reward server failed
// for half of them or more.
void RolloutCollector::add_rollout_metrics(const std::vector<rl::Sample>& samples,
                                           const std::vector<std::vector<double>>& group_raw,
                                           const RoundTally& tally, double seconds,
                                           std::map<std::string, double>& metrics) const {
  std::vector<const rl::Sample*> all;
  double raw_sum = 0, tokens = 0, reward_failures = 0;
  for (const auto& s : samples) {
    all.push_back(&s);
    reward_failures += s.metadata.contains("reward_error") ? 1.0 : 0.0;
    raw_sum += s.raw_reward;
    tokens += static_cast<double>(s.response_length);
  }
  add_length_metrics(all, "rollout/", metrics);
  metrics["rollout/reward_failures"] = reward_failures;
  add_agent_metrics(samples, metrics);  // rollout/agent/* (episodes only)
  FURLONG_CHECK(all.empty() || reward_failures < 0.5 * static_cast<double>(all.size()),
                "the reward server failed for ", reward_failures, " of ", all.size(),
                " samples of this rollout (after retries); see the errors above");
  metrics["rollout/raw_reward"] = raw_sum / std::max<double>(1.0, static_cast<double>(all.size()));
  metrics["rollout/zero_std/ratio"] =
      static_cast<double>(tally.zero_std_groups) / std::max<double>(1.0, tally.generated_groups);
  metrics["perf/rollout_time"] = seconds;
  // miles: response tokens / rollout time / rollout GPUs (colocated: the engines' ranks).
  const auto& r = options_.rollout;
  const int64_t servers = r.rollout_engine_urls.empty()
                              ? disaggregated_num_engines(r)
                              : static_cast<int64_t>(r.rollout_engine_urls.size());
  const int64_t gpus = r.colocate ? engines_.num_engines() * r.rollout_num_gpus_per_engine
                                  : r.rollout_num_gpus.value_or(servers);
  metrics["perf/tokens_per_gpu_per_sec"] =
      tokens / std::max(seconds, 1e-9) / static_cast<double>(std::max<int64_t>(gpus, 1));
  metrics["rollout/generated_groups"] = static_cast<double>(tally.generated_groups);
  for (const auto& [k, v] : pass_at_k(group_raw)) {
    metrics["passrate/pass@" + std::to_string(k)] = v;
  }
  for (const auto& [k, v] : weight_version_metrics(samples)) metrics[k] = v;
}

RolloutResult RolloutCollector::collect(int64_t rollout_id) {
  const Stopwatch watch;
  data::GroupCollector collector(
      *options_.data.rollout_batch_size, options_.data.n_samples_per_prompt,
      data::dynamic_filter_from_path(options_.rollout.dynamic_sampling_filter_path));
  std::map<std::string, double> metrics;
  RoundTally tally;
  std::vector<data::SampleGroup> unfinished;  // --partial-rollout: continues next rollout
  generate_until_enough(collector, tally, unfinished, metrics);
  check_reward_spread_once(tally.first_rewards);
  for (const auto& [k, v] : collector.metrics()) metrics[k] = v;
  if (partial_buffer_) buffer_unfinished(std::move(unfinished), rollout_id, metrics);
  RolloutResult result;
  const auto group_raw = take_in_prompt_order(collector, result.samples);
  // Timed up to here: what follows is bookkeeping.
  add_rollout_metrics(result.samples, group_raw, tally, watch.seconds(), metrics);
  result.metrics = std::move(metrics);
  return result;
}

std::map<std::string, double> RolloutCollector::evaluate(const std::vector<EvalSet>& sets,
                                                         EvalWhen when) {
  std::map<std::string, double> metrics;
  // --report: sample completions go next to its metrics JSONL.
  const std::string& samples_to = options_.eval_samples_log;
  const auto params = sampling_params(/*eval=*/true);
  const int64_t n = options_.eval.n_samples_per_eval_prompt;
  for (const auto& set : sets) {
    std::vector<std::vector<rl::Sample>> groups;
    int64_t index = 0;
    for (int64_t row = 0; row < set.dataset->size(); ++row) {
      groups.push_back(data::make_group(set.dataset->at(row), n, row, index));
      index += n;
    }
    std::vector<std::vector<rl::Sample>> done;
    generate_groups(
        std::move(groups), params,
        [&](std::vector<rl::Sample>&& group) {
          std::vector<rl::Sample*> ptrs;
          for (auto& s : group) ptrs.push_back(&s);
          reward_(ptrs);
          done.push_back(std::move(group));
          return false;
        },
        /*routed_experts=*/false, /*leftover=*/{}, "eval " + set.name);
    if (!samples_to.empty()) {
      metrics::append_eval_samples(samples_to, when.step, when.before_training, set.name,
                                   eval_sample_rows(done));
    }
    std::vector<const rl::Sample*> all;
    std::vector<std::vector<double>> group_raw;
    double sum = 0;
    for (const auto& g : done) {
      group_raw.emplace_back();
      for (const auto& s : g) {
        all.push_back(&s);
        sum += s.raw_reward;
        group_raw.back().push_back(s.raw_reward);
      }
    }
    const std::string p = "eval/" + set.name;
    metrics[p] = sum / std::max<double>(1.0, static_cast<double>(all.size()));
    std::map<std::string, double> lengths;
    add_length_metrics(all, p + "/", lengths);
    for (const auto& [k, v] : lengths) {
      metrics[k == p + "/truncated_ratio" ? p + "-truncated_ratio" : k] = v;
    }
    for (const auto& [k, v] : pass_at_k(group_raw)) metrics[p + "-pass@" + std::to_string(k)] = v;
  }
  return metrics;
}

}  // namespace furlong::rollout
