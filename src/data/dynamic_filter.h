// Dynamic sampling (miles' dynamic_sampling_filters): filters that accept or reject a finished
// group, the bookkeeping of a collection step that over-samples until `rollout_batch_size`
// groups are kept, and a FIFO buffer for aborted groups (--partial-rollout).
// Pure functions over groups of rl::Sample; a group's reward is its samples' raw_reward (the
// reward-key-selected value).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rl/sample.h"

namespace furlong::data {

using SampleGroup = std::vector<rl::Sample>;

struct FilterDecision {
  bool keep = true;
  std::string reason;  // why a group was dropped (the metric suffix); empty when kept
};
using DynamicFilter = std::function<FilterDecision(const SampleGroup&)>;

// Unbiased (n-1) float64 standard deviation of the group's raw rewards; NaN for one sample
// (as torch.std), so a one-sample group never passes check_reward_nonzero_std.
double group_reward_std(const SampleGroup& group);
// A reward rounded to 1 decimal, as Python prints round(x, 1): "0.0", "1.0", "-0.5".
std::string rounded_reward_text(double reward);
// "zero_std_" + rounded_reward_text(first reward), e.g. zero_std_0.0.
std::string zero_std_reason(double first_reward);

// Keep iff the reward std is > 1e-8 (DAPO: drop all-correct / all-wrong groups).
FilterDecision check_reward_nonzero_std(const SampleGroup& group);
// Drop a group with any ABORTED sample (reason "group_has_aborted").
FilterDecision check_no_aborted(const SampleGroup& group);
// --dynamic-sampling-filter-path: miles' dotted paths
// (miles.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std) or the bare
// function names. Empty -> no filter (an empty std::function). Unknown -> furlong::Error listing
// the known ones.
DynamicFilter dynamic_filter_from_path(const std::string& path);

// Metric name of a drop reason: "rollout/dynamic_filter/drop_<reason>".
std::string drop_metric_name(const std::string& reason);

// The kept-group bookkeeping of one collection step.
class GroupCollector {
 public:
  enum class Outcome { kKept, kDropped, kSurplus };
  // `filter` may be empty (keep everything).
  GroupCollector(int64_t target_groups, int64_t n_samples_per_prompt, DynamicFilter filter);

  // A finished group: its size must be n_samples_per_prompt. It is filtered (a rejected group is
  // counted under its reason and discarded); a passing group is kept while fewer than the target
  // are kept, else it is surplus (finished after the target was reached) and discarded.
  Outcome offer(SampleGroup group);
  bool done() const { return num_kept() >= target_; }
  int64_t num_kept() const { return static_cast<int64_t>(kept_.size()); }
  int64_t groups_still_needed() const { return std::max<int64_t>(0, target_ - num_kept()); }
  int64_t num_dropped() const;
  int64_t num_offered() const { return num_offered_; }
  // The group-level submission rule: more groups may be launched while the number of pending
  // groups is smaller than the number still needed.
  bool may_submit(int64_t pending_groups) const { return pending_groups < groups_still_needed(); }
  // Kept groups ordered by their first sample's index (moved out).
  std::vector<SampleGroup> take_kept();
  // drop_metric_name(reason) -> count, for every reason seen.
  std::map<std::string, double> metrics() const;

 private:
  int64_t target_;
  int64_t n_samples_;
  DynamicFilter filter_;
  std::vector<SampleGroup> kept_;
  std::map<std::string, int64_t> drops_;
  int64_t num_offered_ = 0;
};

// --over-sampling-batch-size: defaults to the rollout batch size and must not be smaller.
int64_t resolve_over_sampling_batch_size(int64_t rollout_batch_size,
                                         std::optional<int64_t> over_sampling_batch_size);

// Groups aborted at the end of a step wait here (FIFO) to be served before fresh prompts
// (--partial-rollout, RolloutCollector). Each sample gets metadata.start_rollout_id (kept if
// already set).
class RolloutBuffer {
 public:
  explicit RolloutBuffer(int64_t n_samples_per_prompt);
  // Only groups of exactly n_samples_per_prompt are accepted (else furlong::Error).
  void add(std::vector<SampleGroup> groups, int64_t rollout_id);
  // Up to `count` groups, oldest first.
  std::vector<SampleGroup> pop(int64_t count);
  int64_t size() const { return static_cast<int64_t>(groups_.size()); }
  // The waiting groups, oldest first (the trainer checkpoints them).
  const std::deque<SampleGroup>& groups() const { return groups_; }
  // Replaces the contents (a resumed run's saved groups; same size rule as add).
  void restore(std::vector<SampleGroup> groups);

 private:
  int64_t n_samples_;
  std::deque<SampleGroup> groups_;
};

}  // namespace furlong::data
