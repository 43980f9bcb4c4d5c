// `furlong train` with --loss-type policy_loss: the RL loop, in miles' order. Startup: backend
// init (resuming from --load), engines, one weight sync. Per rollout (run_rl):
//   [baseline eval] -> collect (rank 0 generates and grades; every rank gets the samples)
//   -> train (the backend scores log-probs, runs the advantage stage
//      rl::compute_rollout_advantages, then the optimizer steps)
//   -> maybe save (by --save-interval, with the data position) -> [colocated: trainer sleeps,
//      engine memory back, trainer wakes] -> weight sync -> maybe eval (--eval-interval)
//   -> log (console table, JSONL, TensorBoard). At the end: the HTML report (--report).
#pragma once

#include <string>
#include <vector>

#include "dist/process_group.h"
#include "rl/sample.h"
#include "train/options.h"

namespace furlong::train {

// Runs the whole job on this rank (rendezvous from the environment). Returns the exit code.
int run_rl(TrainOptions options);

// Collective: rank `root`'s samples replace every other rank's `samples`.
void broadcast_samples(std::vector<rl::Sample>& samples, dist::Group& group, int root = 0);

}  // namespace furlong::train
