#include "metrics/rollout_progress.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/strings.h"
#include "metrics/run_report.h"

namespace furlong::metrics {
namespace {

std::string reward_text(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", value);
  return buf;
}

double value_or(const std::map<std::string, double>& row, const char* name, double fallback) {
  const auto it = row.find(name);
  return it == row.end() ? fallback : it->second;
}

}  // namespace

RolloutProgress::RolloutProgress(int64_t first, int64_t end) : steps_("rollout", first, end) {}

std::string RolloutProgress::line(int64_t rollout_id, const std::map<std::string, double>& row) {
  const auto d = details(rollout_id, row);
  return steps_.line(rollout_id, value_or(row, "perf/iteration_time", 0.0), d);
}

std::string RolloutProgress::line_at(int64_t rollout_id, const std::map<std::string, double>& row,
                                     double elapsed_seconds) {
  const auto d = details(rollout_id, row);
  return steps_.line_at(rollout_id, value_or(row, "perf/iteration_time", 0.0), d, elapsed_seconds);
}

std::string RolloutProgress::details(int64_t rollout_id, const std::map<std::string, double>& row) {
  std::map<std::string, double> evals;
  for (const auto& [name, value] : row) {
    if (is_eval_reward_metric(name)) evals[name] = value;
  }
  if (!evals.empty()) {
    last_eval_ = std::move(evals);
    last_eval_step_ = rollout_id;
  }
  std::vector<std::string> parts;
  if (const auto it = row.find("rollout/raw_reward"); it != row.end()) {
    parts.push_back("reward " + reward_text(it->second));
  }
  for (const auto& [name, value] : last_eval_) {
    const bool now = last_eval_step_ == rollout_id;
    parts.push_back("eval " + name.substr(std::strlen("eval/")) + " " + reward_text(value) +
                    (now ? "" : " (rollout " + std::to_string(last_eval_step_ + 1) + ")"));
  }
  return join(parts, ", ");
}

}  // namespace furlong::metrics
