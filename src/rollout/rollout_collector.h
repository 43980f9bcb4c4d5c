// One rollout's training data (miles' generate_rollout), on rank 0: pull prompt groups from
// the data source, generate n samples per prompt on the engines, grade them, keep groups that
// pass the dynamic-sampling filter until --rollout-batch-size groups are kept (over-sampling
// --over-sampling-batch-size groups per refill, aborting what is still in flight once the
// target is reached), and report rollout/* metrics. Also the eval pass (mean reward and pass@k
// per eval dataset).
// With --partial-rollout the groups still in flight at the abort (unfinished samples with their
// tokens, log-probs and weight versions; finished ones as they are) wait in a buffer and are
// served first by the next collect(), where unfinished samples continue from their tokens with
// the budget that is left.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/prompt_dataset.h"
#include "data/sample_builder.h"
#include "rl/sample.h"
#include "rollout/options.h"
#include "rollout/rollout_engines.h"

namespace furlong {
class FirstError;
}
namespace furlong::data {
class GroupCollector;
}
namespace furlong::tokenizer {
class Tokenizer;
}

namespace furlong::rollout {

class AgentEpisodeRunner;
class GroupCompletion;

// Grades samples (their response text, label and metadata): fills raw_reward of each.
using RewardFn = std::function<void(std::vector<rl::Sample*>& samples)>;

struct RolloutResult {
  std::vector<rl::Sample> samples;  // kept groups, in group order; raw rewards (the training
                                    // step normalizes them: rl::compute_rollout_advantages)
  std::map<std::string, double> metrics;
};

// Where an eval's results go: the metrics row `step`, and whether the eval ran before that
// rollout's training (the baseline) or after it.
struct EvalWhen {
  int64_t step = 0;
  bool before_training = false;
};

class RolloutCollector {
 public:
  RolloutCollector(const RolloutConfig& options, RolloutEngines& engines,
                   data::RolloutDataSource& source, const tokenizer::Tokenizer& tokenizer,
                   RewardFn reward);
  // One training rollout; `rollout_id` tags samples that go to the partial-rollout buffer
  // (metadata.start_rollout_id).
  RolloutResult collect(int64_t rollout_id = 0);
  // The partial-rollout buffer (null without --partial-rollout): its groups are part of the
  // resumable state (the trainer saves them with the data source).
  data::RolloutBuffer* partial_buffer() { return partial_buffer_.get(); }
  // The engines' current weight version (after each sync): --max-weight-staleness measures
  // buffered samples against it.
  void set_engine_weight_version(int64_t version) { engine_weight_version_ = version; }

  struct EvalSet {
    std::string name;
    std::unique_ptr<data::PromptDataset> dataset;
  };
  // eval/<name> (mean raw reward), eval/<name>-pass@k, eval/<name>-truncated_ratio,
  // eval/<name>/response_len/mean. With --report, also appends the first held-out prompts'
  // first samples (prompt, response, label, reward) to the metrics' eval samples file
  // (metrics/run_report.h), which the report shows as tables.
  std::map<std::string, double> evaluate(const std::vector<EvalSet>& sets, EvalWhen when = {});

 private:
  // Takes a finished group; returns true when it has enough (the rest is then aborted).
  using GroupConsumer = std::function<bool(std::vector<rl::Sample>&&)>;
  // Takes a group left over once the consumer had enough (aborted or finished late).
  using GroupSink = std::function<void(std::vector<rl::Sample>&&)>;
  // Generates every sample of `groups` at once (whole groups split over the engines), handing
  // each group to `consume` (on this thread) as soon as all its samples are done: in completion
  // order on one engine, in group order on several (independent of timing). With
  // `routed_experts` (--use-rollout-routing-replay, training rollouts) every request asks for
  // the engine's expert ids and each sample gets them in rl::Sample::routed_experts (one row per
  // prompt + response token). Samples that need no generation (finished ones of a buffered
  // group) are not sent; aborted ones continue from their tokens. Groups left once `consume`
  // had enough go to `leftover` when given (else they are dropped). `label` names the
  // progress bar ("generate" for training rollouts, "eval <set>" for evals).
  void generate_groups(std::vector<std::vector<rl::Sample>> groups,
                       const engine::SamplingParams& params, const GroupConsumer& consume,
                       bool routed_experts = false, const GroupSink& leftover = {},
                       const std::string& label = "generate");
  // The next refill: buffered groups first (restarting samples past --max-weight-staleness,
  // masking older-weight prefixes under --mask-offpolicy-in-partial-rollout), then fresh ones.
  std::vector<data::SampleGroup> next_refill(int64_t num_groups, std::map<std::string, double>& m);

  // What one collect() counted while generating.
  struct RoundTally {
    int64_t generated_groups = 0;
    int64_t zero_std_groups = 0;
    std::vector<std::vector<double>> first_rewards;  // every group's, first rollout only
  };
  // The steps of generate_groups and collect (rollout_collector.cpp says what each does).
  void submit_groups(std::vector<std::vector<rl::Sample>>& groups,
                     const engine::SamplingParams& params, bool routed_experts,
                     GroupCompletion& completion, FirstError& callback_error);
  engine::GenerateRequest request_for(const rl::Sample& sample,
                                      const engine::SamplingParams& params, int64_t budget,
                                      bool routed_experts) const;
  void record_output(rl::Sample& sample, engine::GenerateOutput&& out, int64_t budget,
                     bool routed_experts) const;
  void generate_until_enough(data::GroupCollector& collector, RoundTally& tally,
                             std::vector<data::SampleGroup>& unfinished,
                             std::map<std::string, double>& metrics);
  void check_reward_spread_once(const std::vector<std::vector<double>>& rewards);
  void buffer_unfinished(std::vector<data::SampleGroup>&& unfinished, int64_t rollout_id,
                         std::map<std::string, double>& metrics);
  void add_rollout_metrics(const std::vector<rl::Sample>& samples,
                           const std::vector<std::vector<double>>& group_raw,
                           const RoundTally& tally, double seconds,
                           std::map<std::string, double>& metrics) const;
  engine::SamplingParams sampling_params(bool eval) const;
  std::string decode_text(const std::vector<int64_t>& ids) const;

  const RolloutConfig options_;  // a copy: callers pass temporaries (train::rollout_config)
  RolloutEngines& engines_;
  data::RolloutDataSource& source_;
  const tokenizer::Tokenizer& tokenizer_;
  RewardFn reward_;
  // --agent-env-url: samples are multi-turn episodes (rollout/agent_episode.h); null otherwise.
  std::shared_ptr<AgentEpisodeRunner> agent_;
  std::unique_ptr<data::RolloutBuffer> partial_buffer_;
  int64_t engine_weight_version_ = 0;
  // Whether collect() has checked a rollout for zero reward spread (only the first is checked).
  bool spread_checked_ = false;
};

// rollout/weight_version/{min,max,mean} over the response tokens of `samples` (with recorded
// versions) and rollout/weight_version/mixed_ratio (share of samples spanning several versions).
std::map<std::string, double> weight_version_metrics(const std::vector<rl::Sample>& samples);

// pass@k = 1 - C(n-c, k) / C(n, k) averaged over groups of n samples with c correct
// (reward == 1), for k = 1, 2, 4, ... <= n.
std::map<int64_t, double> pass_at_k(const std::vector<std::vector<double>>& group_rewards);

}  // namespace furlong::rollout
