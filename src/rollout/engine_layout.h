// Where the rollout engines run: miles' --rollout-num-gpus and --rollout-num-gpus-per-engine
// (one CPU rank stands for one GPU), and how one generation round's prompt groups are split
// over the engines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rollout/options.h"

namespace furlong::rollout {

// Colocated engines: engine e runs inside training rank engine_ranks[e].
struct EngineLayout {
  int world_size = 1;
  int64_t gpus_per_engine = 1;
  std::vector<int> engine_ranks;  // ascending; engine 0 is on rank 0

  int64_t num_engines() const { return static_cast<int64_t>(engine_ranks.size()); }
  // The engine hosted by `rank`, or -1 when that rank hosts none.
  int64_t engine_on_rank(int rank) const;
  // One line for the startup log: engines, their ranks, threads each, idle ranks.
  std::string describe(int64_t threads_per_engine) const;
  // Engines on the host of `rank`, whose ranks are [rank - local_rank, + local_world_size)
  // (the launchers' contiguous numbering).
  int64_t engines_on_host(int rank, int local_rank, int local_world_size) const;
};

// miles' rules, colocated: --rollout-num-gpus defaults to every training rank (miles sets it to
// the actor's GPUs); it must lie in [1, world] (an engine needs a training rank to live in) and
// be a multiple of --rollout-num-gpus-per-engine G. Engine groups are ranks [gG, (g+1)G) of the
// first --rollout-num-gpus ranks; furlong's engine has no tensor parallelism, so each group's
// engine runs on the group's first rank alone and the group's other ranks idle while it
// generates (they still train). Ranks past --rollout-num-gpus only train. Bad values raise an
// error naming the flag.
EngineLayout colocated_engine_layout(const RolloutOptions& rollout, int world_size);

// Disaggregated: how many engine servers to start. With --rollout-num-gpus: its value divided
// by --rollout-num-gpus-per-engine (which must divide it); otherwise --rollout-num-engines.
int64_t disaggregated_num_engines(const RolloutOptions& rollout);

// Checks the layout flags for this world before anything is loaded (the colocated or the
// disaggregated rules above).
void validate_engine_layout(const RolloutOptions& rollout, int world_size);

// Engine of each of `num_groups` groups (kept whole, so a group's samples share their prompt's
// KV-cache prefix on one engine): contiguous blocks in group order whose sizes differ by at
// most one, the larger blocks first.
std::vector<int64_t> split_groups_over_engines(int64_t num_groups, int64_t num_engines);

}  // namespace furlong::rollout
