// The trainer side of miles' disaggregated weight sync, over furlong's (or SGLang's) HTTP API:
// engines join a process group in which this process is rank 0, then each update tells every
// engine what is coming (POST /update_weights_from_distributed) while this process broadcasts
// the tensors. Engine i of n gets rank 1 + i of a group of world size 1 + n.
//
// The HTTP calls block until the collective completes on the engine side, so they run on
// helper threads while this thread takes part in the rendezvous / broadcast. If an engine
// rejects a call, the broadcast on this side ends with the group's timeout error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "engine/server/client.h"
#include "engine/weight_sync.h"

namespace furlong::engine::server {

// Creates the weight group: every engine joins it (init_weights_update_group) as this process
// does as rank 0. spec.rank_offset and spec.world_size are set from the number of engines.
std::unique_ptr<dist::ProcessGroups> connect_remote_engines(
    const std::vector<const EngineClient*>& engines, WeightGroupSpec spec);

// Sends `named` (HF names, the dtype the engines should hold) to every engine of the group and
// sets their weight version.
void update_remote_weights(const std::vector<const EngineClient*>& engines, dist::Group& group,
                           const NamedTensors& named, int64_t version,
                           const std::string& group_name);

}  // namespace furlong::engine::server
