#include "data/dynamic_filter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace furlong::data {
namespace {

// Python's repr of a float: the shortest round-trip digits, with ".0" when integral.
std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  FURLONG_ASSERT(ec == std::errc(), "float formatting failed");
  std::string s(buf, end);
  // Python switches to exponent notation at 1e16 and below 1e-4; to_chars picks the shorter
  // form. Rewrite to Python's style for the values a reward can take (|v| < 1e16).
  if (s.find('e') != std::string::npos) {
    if (std::fabs(v) >= 1e16 || std::fabs(v) < 1e-4) {
      // Python prints e.g. 1e+16 / 1e-05: two-digit exponent with a sign.
      size_t e = s.find('e');
      std::string mantissa = s.substr(0, e);
      int exponent = std::atoi(s.c_str() + e + 1);
      char exp_buf[16];
      std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                    std::abs(exponent));
      return mantissa + exp_buf;
    }
    char fixed[400];
    std::snprintf(fixed, sizeof(fixed), "%.1f", v);
    s = fixed;
  }
  if (s.find('.') == std::string::npos && s.find('e') == std::string::npos) s += ".0";
  return s;
}

}  // namespace

double group_reward_std(const SampleGroup& group) {
  const auto n = static_cast<double>(group.size());
  if (group.size() < 2) return std::nan("");
  double mean = 0.0;
  for (const auto& s : group) mean += s.raw_reward;
  mean /= n;
  double sq = 0.0;
  for (const auto& s : group) sq += (s.raw_reward - mean) * (s.raw_reward - mean);
  return std::sqrt(sq / (n - 1.0));
}

std::string rounded_reward_text(double reward) {
  // round(x, 1) is the correctly rounded one-decimal value of x: what "%.1f" prints.
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.1f", reward);
  return python_float_repr(std::strtod(buf, nullptr));
}

std::string zero_std_reason(double first_reward) {
  return "zero_std_" + rounded_reward_text(first_reward);
}

FilterDecision check_reward_nonzero_std(const SampleGroup& group) {
  FURLONG_CHECK(!group.empty(), "check_reward_nonzero_std: empty group");
  double std = group_reward_std(group);
  if (std > 1e-8) return {true, ""};
  return {false, zero_std_reason(group.front().raw_reward)};
}

FilterDecision check_no_aborted(const SampleGroup& group) {
  for (const auto& s : group) {
    if (s.status == rl::SampleStatus::kAborted) return {false, "group_has_aborted"};
  }
  return {true, ""};
}

DynamicFilter dynamic_filter_from_path(const std::string& path) {
  if (path.empty()) return {};
  std::string name = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
  if (name == "check_reward_nonzero_std") return check_reward_nonzero_std;
  if (name == "check_no_aborted") return check_no_aborted;
  FURLONG_FAIL("--dynamic-sampling-filter-path '", path,
               "' names no built-in filter; known: check_reward_nonzero_std, check_no_aborted "
               "(optionally as miles.rollout.filter_hub.dynamic_sampling_filters.<name>)");
}

std::string drop_metric_name(const std::string& reason) {
  return "rollout/dynamic_filter/drop_" + reason;
}

GroupCollector::GroupCollector(int64_t target_groups, int64_t n_samples_per_prompt,
                               DynamicFilter filter)
    : target_(target_groups), n_samples_(n_samples_per_prompt), filter_(std::move(filter)) {
  FURLONG_CHECK(target_groups >= 1, "--rollout-batch-size must be >= 1, got ", target_groups);
  FURLONG_CHECK(n_samples_per_prompt >= 1, "--n-samples-per-prompt must be >= 1, got ",
                n_samples_per_prompt);
}

GroupCollector::Outcome GroupCollector::offer(SampleGroup group) {
  FURLONG_CHECK(static_cast<int64_t>(group.size()) == n_samples_, "a finished group has ",
                group.size(), " samples; expected --n-samples-per-prompt = ", n_samples_);
  ++num_offered_;
  if (filter_) {
    FilterDecision decision = filter_(group);
    if (!decision.keep) {
      ++drops_[decision.reason.empty() ? "unknown" : decision.reason];
      return Outcome::kDropped;
    }
  }
  if (done()) return Outcome::kSurplus;
  kept_.push_back(std::move(group));
  return Outcome::kKept;
}

int64_t GroupCollector::num_dropped() const {
  int64_t total = 0;
  for (const auto& [reason, count] : drops_) total += count;
  return total;
}

std::vector<SampleGroup> GroupCollector::take_kept() {
  std::vector<SampleGroup> out = std::move(kept_);
  kept_.clear();
  std::stable_sort(out.begin(), out.end(), [](const SampleGroup& a, const SampleGroup& b) {
    return a.front().index < b.front().index;
  });
  return out;
}

std::map<std::string, double> GroupCollector::metrics() const {
  std::map<std::string, double> m;
  for (const auto& [reason, count] : drops_) m[drop_metric_name(reason)] = double(count);
  return m;
}

int64_t resolve_over_sampling_batch_size(int64_t rollout_batch_size,
                                         std::optional<int64_t> over_sampling_batch_size) {
  FURLONG_CHECK(rollout_batch_size >= 1, "--rollout-batch-size must be >= 1, got ",
                rollout_batch_size);
  int64_t obs = over_sampling_batch_size.value_or(rollout_batch_size);
  FURLONG_CHECK(obs >= rollout_batch_size, "--over-sampling-batch-size (", obs,
                ") must be >= --rollout-batch-size (", rollout_batch_size, ")");
  return obs;
}

RolloutBuffer::RolloutBuffer(int64_t n_samples_per_prompt) : n_samples_(n_samples_per_prompt) {
  FURLONG_CHECK(n_samples_per_prompt >= 1, "--n-samples-per-prompt must be >= 1");
}

void RolloutBuffer::add(std::vector<SampleGroup> groups, int64_t rollout_id) {
  for (auto& group : groups) {
    FURLONG_CHECK(static_cast<int64_t>(group.size()) == n_samples_,
                  "the rollout buffer accepts only groups of --n-samples-per-prompt = ", n_samples_,
                  " samples, got ", group.size());
    for (auto& s : group) {
      if (!s.metadata.is_object()) s.metadata = Json::object();
      if (!s.metadata.contains("start_rollout_id")) s.metadata["start_rollout_id"] = rollout_id;
    }
    groups_.push_back(std::move(group));
  }
}

void RolloutBuffer::restore(std::vector<SampleGroup> groups) {
  groups_.clear();
  for (auto& group : groups) {
    FURLONG_CHECK(static_cast<int64_t>(group.size()) == n_samples_,
                  "a saved partial-rollout group has ", group.size(),
                  " samples; this run has --n-samples-per-prompt ", n_samples_);
    groups_.push_back(std::move(group));
  }
}

std::vector<SampleGroup> RolloutBuffer::pop(int64_t count) {
  std::vector<SampleGroup> out;
  while (count-- > 0 && !groups_.empty()) {
    out.push_back(std::move(groups_.front()));
    groups_.pop_front();
  }
  return out;
}

}  // namespace furlong::data
