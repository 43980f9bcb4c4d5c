// `furlong train` with --loss-type policy_loss: the RL loop, in miles' order (spec 1.1-1.2).
// Startup: backend init (resuming from --load), engines, one weight sync. Per rollout:
// [baseline eval] -> generate + reward + normalize (rank 0) -> hand the samples to every rank
// -> train -> save (by --save-interval, with the data position) -> weight sync -> eval (by
// --eval-interval) -> metrics (console table, JSONL, TensorBoard). At the end: HTML report.
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
