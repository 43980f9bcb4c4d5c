// Resharding checkpoints of the FSDP backend.
//
// Layout under --save DIR:
//   latest_checkpointed_iteration.txt    the newest complete iteration (written last, atomically)
//   iter_0000005/                        iteration = rollout_id + 1, 7 digits
//     meta.json                          iteration, rollout ids, global step, topology, extra state
//     model/index.json                   every tensor's global shape, dtype and shard count
//     model/shard-00003.safetensors      the rows shard 3 holds (dim-0 sharding over S shards)
//     optimizer/...                      the same for AdamW's exp_avg / exp_avg_sq (+ steps)
//     lr_scheduler.json                  the LR schedule's state
//     rng/rank-00002.bin                 each rank's CPU generator state
//     hf/                                config.json and tokenizer files of --hf-checkpoint
//
// A save writes into iter_N.partial/ and renames it to iter_N/ only after every rank has
// finished; the tracker is updated after that. A save that dies midway leaves the previous
// checkpoint (and tracker) untouched, and the partial directory is never read. Shards are
// written once per shard index (by the replica with replicate index 0). Loading at another
// topology reads, for each tensor, the rows this rank now holds from whichever shards have them.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <optional>

#include "backend/options.h"
#include "core/json_util.h"

namespace furlong::backend {

class FsdpBackend;

struct LoadedCheckpoint {
  int64_t iteration = 0;
  int64_t next_rollout_id = 0;
  int64_t global_step = 0;
  Json extra = Json::object();  // the driver's state (data position, ...)
};

std::filesystem::path iteration_dir(const std::filesystem::path& root, int64_t iteration);
// The iteration named by the tracker, if there is a tracker.
std::optional<int64_t> latest_iteration(const std::filesystem::path& root);

// Removes what saves killed midway left in `root`: the tracker's temporaries
// ("latest_checkpointed_iteration.txt.tmp.*"), "iter_N.partial/" directories and "iter_N.old/"
// directories whose iter_N exists. Nothing else (other files are not ours to judge). Rank 0
// writes all of these, so rank 0 calls this, at the start of a save and of a load from the
// job's own --save directory, when no rank of the job writes there. Returns how many it removed.
int remove_stale_checkpoint_files(const std::filesystem::path& root);

// Collective. `extra` is stored in meta.json and returned by load_checkpoint.
void save_checkpoint(const std::filesystem::path& root, int64_t rollout_id, FsdpBackend& backend,
                     const CheckpointOptions& options, const Json& extra = Json::object());
// Collective. nullopt when `root` has no tracker (a fresh run); an error when the tracker
// names an iteration that is missing or incomplete.
std::optional<LoadedCheckpoint> load_checkpoint(const std::filesystem::path& root,
                                                FsdpBackend& backend,
                                                const CheckpointOptions& options);

// Writes a HF directory (config.json, safetensors in the model's checkpoint dtype or `dtype`,
// tokenizer files) from a checkpoint, on one process, without the original model directory.
void export_hf(const std::filesystem::path& checkpoint_root, std::optional<int64_t> iteration,
               const std::filesystem::path& out, std::optional<c10::ScalarType> dtype);

}  // namespace furlong::backend
