// The flags of `furlong train` that close miles' migration gaps: offload (--offload,
// --offload-train, --offload-rollout), the reference model's directory (--ref-load), data
// balancing over DP ranks (--balance-data) and the RL loop's debug switches. Part of the one
// flag table with flag_table.cpp and flag_table_train.cpp (split only to keep files short).
#include "app/commands.h"

namespace furlong::app {
namespace {

void add_offload_flags(config::FlagSet& f, train::OffloadOptions& o) {
  f.set_group("Offload");
  f.add("offload", &o.offload, "both --offload-train and --offload-rollout");
  config::record_given(
      f.add("offload-train", &o.offload_train,
            "move the trainer's weights and optimizer state to host memory between "
            "trainings; --colocate turns it on unless negated, --fsdp-cpu-offload off"),
      &o.offload_train_set);
  config::record_given(
      f.add("offload-rollout", &o.offload_rollout,
            "the engine releases its KV cache (and on a GPU its weights) while the "
            "trainer trains; --colocate turns it on unless negated"),
      &o.offload_rollout_set);
}

void add_reference_flags(config::FlagSet& f, train::ModelOptions& m, train::BatchOptions& b) {
  f.set_group("Reference model and data balance");
  f.add("ref-load", &m.ref_load,
        "HF directory of the frozen reference model of the KL terms (default: --hf-checkpoint)");
  f.add("balance-data", &b.balance_data,
        "split each rollout over the data-parallel ranks into equal-count parts of nearly equal "
        "token totals (Karmarkar-Karp) instead of every W-th sample");
}

void add_debug_flags(config::FlagSet& f, train::DebugOptions& d) {
  f.set_group("Debug");
  f.add("debug-rollout-only", &d.debug_rollout_only,
        "RL: generate and grade rollouts only (no training, no weight sync)");
  f.add("debug-train-only", &d.debug_train_only,
        "RL: train only, from --load-debug-rollout-data (no engines)");
  f.add("save-debug-rollout-data", &d.save_debug_rollout_data,
        "RL: write each rollout's samples to this path ({rollout_id} is replaced)");
  f.add("load-debug-rollout-data", &d.load_debug_rollout_data,
        "RL: read each rollout's samples from this path ({rollout_id} is replaced) instead of "
        "generating them");
}

}  // namespace

void register_migration_flags(config::FlagSet& f, train::TrainOptions& o) {
  add_offload_flags(f, o.offload);
  add_reference_flags(f, o.model, o.batch);
  add_debug_flags(f, o.debug);
}

}  // namespace furlong::app
