#include "engine/weight_sync.h"

#include <ATen/ATen.h>

#include <chrono>

#include "core/dtype.h"
#include "core/error.h"

namespace furlong::engine {

std::unique_ptr<dist::ProcessGroups> join_weight_group(const WeightGroupSpec& spec, int rank) {
  FURLONG_CHECK(spec.world_size >= 2, "weight update group '", spec.group_name,
                "': world_size must be >= 2 (the trainer plus at least one engine), got ",
                spec.world_size);
  FURLONG_CHECK(rank >= 0 && rank < spec.world_size, "weight update group '", spec.group_name,
                "': rank ", rank, " is outside [0, ", spec.world_size, ")");
  FURLONG_CHECK(spec.master_port > 0 && spec.master_port < 65536, "weight update group '",
                spec.group_name, "': master_port must be in 1..65535, got ", spec.master_port);
  dist::RendezvousInfo info;
  info.rank = rank;
  info.world_size = spec.world_size;
  info.local_rank = 0;
  info.local_world_size = 1;
  info.master_addr = spec.master_addr;
  info.master_port = spec.master_port;
  dist::InitOptions options;
  options.backend = dist::parse_backend(spec.backend, "weight update group backend");
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(spec.timeout_seconds * 1000));
  return dist::ProcessGroups::init(info, options);
}

std::vector<WeightMeta> weight_metas(const NamedTensors& named) {
  std::vector<WeightMeta> metas;
  metas.reserve(named.size());
  for (const auto& [name, t] : named) {
    metas.push_back({name, dtype_name(t.scalar_type()), t.sizes().vec()});
  }
  return metas;
}

void broadcast_weights(dist::Group& group, const NamedTensors& named) {
  FURLONG_CHECK(group.rank() == 0, "broadcast_weights: the sender must be rank 0 of group '",
                group.name(), "', this process is rank ", group.rank());
  for (const auto& [name, t] : named) {
    at::Tensor buffer = t.detach().contiguous();
    group.broadcast(buffer, /*root=*/0);
  }
}

NamedTensors receive_weights(dist::Group& group, const std::vector<WeightMeta>& metas,
                             c10::Device device) {
  NamedTensors received;
  received.reserve(metas.size());
  for (const auto& m : metas) {
    auto dtype = parse_dtype(m.dtype, "weight '" + m.name + "' dtype");
    at::Tensor buffer = at::empty(m.shape, at::TensorOptions().dtype(dtype).device(device));
    group.broadcast(buffer, /*root=*/0);
    received.emplace_back(m.name, std::move(buffer));
  }
  return received;
}

Json weight_meta_json(const WeightMeta& meta) {
  return Json{{"name", meta.name}, {"dtype", meta.dtype}, {"shape", meta.shape}};
}

WeightMeta parse_weight_meta(const Json& json, const std::string& where) {
  WeightMeta m;
  m.name = json_get<std::string>(json, "name", where);
  m.dtype = json_get<std::string>(json, "dtype", where);
  parse_dtype(m.dtype, where + ": field 'dtype'");
  m.shape = json_get<std::vector<int64_t>>(json, "shape", where);
  for (auto s : m.shape) FURLONG_CHECK(s >= 0, where, ": field 'shape' has a negative size");
  return m;
}

}  // namespace furlong::engine
