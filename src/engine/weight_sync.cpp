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

void add_weight_metas(const std::vector<WeightMeta>& metas, Json& body) {
  Json names = Json::array(), dtypes = Json::array(), shapes = Json::array();
  for (const auto& m : metas) {
    names.push_back(m.name);
    dtypes.push_back(m.dtype);
    shapes.push_back(m.shape);
  }
  body["names"] = std::move(names);
  body["dtypes"] = std::move(dtypes);
  body["shapes"] = std::move(shapes);
}

std::vector<WeightMeta> parse_weight_metas(const Json& body, const std::string& where) {
  auto names = json_get<std::vector<std::string>>(body, "names", where);
  auto dtypes = json_get<std::vector<std::string>>(body, "dtypes", where);
  FURLONG_CHECK(body.contains("shapes") && body["shapes"].is_array(), where,
                ": 'shapes' must be a list of integer lists");
  const Json& shapes = body["shapes"];
  FURLONG_CHECK(names.size() == dtypes.size() && names.size() == shapes.size(), where,
                ": 'names', 'dtypes' and 'shapes' must have the same length, got ", names.size(),
                ", ", dtypes.size(), ", ", shapes.size());
  std::vector<WeightMeta> metas;
  for (size_t i = 0; i < names.size(); ++i) {
    std::string dtype = dtypes[i].rfind("torch.", 0) == 0 ? dtypes[i].substr(6) : dtypes[i];
    FURLONG_CHECK(dtype == "bfloat16" || dtype == "float16" || dtype == "float32", where,
                  ": dtypes[", i, "] must be bfloat16, float16 or float32, got '", dtypes[i], "'");
    const std::string field = "shapes[" + std::to_string(i) + "]";
    auto shape = json_as<std::vector<int64_t>>(shapes[i], field, where);
    for (auto size : shape) FURLONG_CHECK(size >= 0, where, ": ", field, " has a negative size");
    metas.push_back({names[i], dtype, std::move(shape)});
  }
  return metas;
}

}  // namespace furlong::engine
