// Flags of the rollout engines' placement, partial rollouts and asynchronous training (part of
// the flag table, see flag_table.cpp).
#pragma once

#include "config/flags.h"
#include "train/options.h"

namespace furlong::app {

// --rollout-num-gpus and --rollout-num-gpus-per-engine (miles' names and meanings).
void add_rollout_layout_flags(config::FlagSet& flags, train::RolloutOptions& rollout);

// --partial-rollout, --mask-offpolicy-in-partial-rollout, --max-weight-staleness, --train-async
// and --update-weights-interval (docs/training.md, "Partial rollouts" and "Asynchronous training").
void add_partial_and_async_flags(config::FlagSet& flags, train::RolloutOptions& rollout);

}  // namespace furlong::app
