// `furlong train --loss-type sft_loss`: supervised fine-tuning on JSONL prompt/response pairs
// with the FSDP backend. Each "rollout" consumes --rollout-batch-size samples (default: the
// global batch size) in a fixed per-epoch order (shuffled from --rollout-seed with
// --rollout-shuffle), so a run resumed from a checkpoint continues at the same data position.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "train/options.h"

namespace furlong::train {

// Runs the whole job on this rank (rendezvous from the environment). Returns the exit code.
int run_sft(TrainOptions options);

// The order in which epoch `epoch` visits `n` samples.
std::vector<size_t> epoch_order(size_t n, int64_t epoch, bool shuffle, int64_t seed);

}  // namespace furlong::train
