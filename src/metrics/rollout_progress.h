// Rank 0's one-line summary of each RL rollout, logged after its metrics table:
//   rollout 4/6: reward 0.412, eval addition 0.350 (rollout 3), 12.3 s, ETA 00:25
// from the rollout's metrics row: rollout/raw_reward, the latest eval's mean rewards
// (eval/<set>; when they were logged with an earlier rollout, that rollout, numbered as the
// line numbers rollouts), the step's perf/iteration_time, and the ETA of core/progress.h's
// StepProgress.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/progress.h"

namespace furlong::metrics {

class RolloutProgress {
 public:
  // Rollouts [first, end) run in this process.
  RolloutProgress(int64_t first, int64_t end);
  // The line for rollout `rollout_id` (0-based) with metrics row `row`; remembers its evals.
  std::string line(int64_t rollout_id, const std::map<std::string, double>& row);
  // line() with the wall time since construction given (tests).
  std::string line_at(int64_t rollout_id, const std::map<std::string, double>& row,
                      double elapsed_seconds);

 private:
  std::string details(int64_t rollout_id, const std::map<std::string, double>& row);

  StepProgress steps_;
  std::map<std::string, double> last_eval_;  // eval/<set> of the latest eval
  int64_t last_eval_step_ = -1;
};

}  // namespace furlong::metrics
