// Flags of the rollout engines' placement (part of the flag table, see flag_table.cpp); the
// layout they describe is computed by train/engine_layout.h.
#include "app/flag_table_rollout.h"

namespace furlong::app {

void add_rollout_layout_flags(config::FlagSet& f, train::RolloutOptions& r) {
  f.set_group("Layout");
  f.add("rollout-num-gpus", &r.rollout_num_gpus,
        "GPUs (CPU: ranks) for the engines; colocated: the first N training ranks (default: all "
        "of them); disaggregated: N / --rollout-num-gpus-per-engine engine servers");
  f.add("rollout-num-gpus-per-engine", &r.rollout_num_gpus_per_engine,
        "GPUs per engine (SGLang's tp_size). furlong's engine has no tensor parallelism: each "
        "engine runs on its group's first rank and the group's other ranks idle while it "
        "generates");
}

}  // namespace furlong::app
