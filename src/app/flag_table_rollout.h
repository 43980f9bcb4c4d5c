// Flags of the rollout engines' placement (part of the flag table, see flag_table.cpp).
#pragma once

#include "config/flags.h"
#include "train/options.h"

namespace furlong::app {

// --rollout-num-gpus and --rollout-num-gpus-per-engine (miles' names and meanings).
void add_rollout_layout_flags(config::FlagSet& flags, train::RolloutOptions& rollout);

}  // namespace furlong::app
