// `furlong train --loss-type sft_loss`: supervised fine-tuning on JSONL prompt/response pairs
// with the FSDP backend. Each "rollout" consumes --rollout-batch-size samples (default: the
// global batch size) in a fixed per-epoch order (shuffled from --rollout-seed with
// --rollout-shuffle), so a run resumed from a checkpoint continues at the same data position.
#pragma once

#include "train/options.h"

namespace furlong::dist {
class Group;
}

namespace furlong::train {

// Runs the whole job on this rank (rendezvous from the environment). Returns the exit code.
int run_sft(TrainOptions options);

// Whether to save after `rollout_id`: by --save-interval (and at the last rollout), or when the
// --save-trigger-sentinel file exists. Rank 0 decides and broadcasts, so every rank agrees even
// if the file appears while they check. Collective over `world`.
bool save_due(const TrainOptions& o, int64_t rollout_id, dist::Group& world);

// The order in which epoch `epoch` visits `n` samples.
std::vector<size_t> epoch_order(size_t n, int64_t epoch, bool shuffle, int64_t seed);

}  // namespace furlong::train
