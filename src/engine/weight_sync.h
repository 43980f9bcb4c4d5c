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

// WeightMeta <-> JSON ({"name", "dtype", "shape"}), as the HTTP endpoint carries them.
Json weight_meta_json(const WeightMeta& meta);
WeightMeta parse_weight_meta(const Json& json, const std::string& where);

}  // namespace furlong::engine
