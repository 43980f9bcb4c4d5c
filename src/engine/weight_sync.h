// Weight updates over a process group: the trainer (rank 0) broadcasts each tensor in turn;
// every engine (ranks 1..W-1) receives them into its model (Engine::
// update_weights_from_distributed). These are the sender's reusable pieces.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/process_group.h"
#include "engine/engine.h"

namespace furlong::engine {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The group as either side joins it: rendezvous through a TCPStore at master_addr:master_port
// (served by rank 0), `rank` in [0, world_size).
std::unique_ptr<dist::ProcessGroups> join_weight_group(const WeightGroupSpec& spec, int rank);

// What the receivers must be told (names, dtypes, shapes) for a broadcast of `named`.
std::vector<WeightMeta> weight_metas(const NamedTensors& named);

// Sender side (group rank 0): broadcasts every tensor, in order, one broadcast per tensor.
void broadcast_weights(dist::Group& group, const NamedTensors& named);

// Receiver side: receives the tensors `metas` lists, in order, from rank 0 onto `device`.
NamedTensors receive_weights(dist::Group& group, const std::vector<WeightMeta>& metas,
                             c10::Device device);

// The weight list of /update_weights_from_distributed in SGLang's layout, parallel arrays
// {"names": [...], "dtypes": ["bfloat16", ...], "shapes": [[...], ...]}: the client writes it
// into a request body, the server reads it back (dtypes may carry SGLang's "torch." prefix;
// bfloat16, float16 and float32 are accepted). Errors name `where` and the entry.
void add_weight_metas(const std::vector<WeightMeta>& metas, Json& body);
std::vector<WeightMeta> parse_weight_metas(const Json& body, const std::string& where);

}  // namespace furlong::engine
