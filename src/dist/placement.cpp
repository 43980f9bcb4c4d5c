// resolve_placement: where `furlong train --actor-num-nodes N --actor-num-gpus-per-node G`
// takes its ranks from (see launch_env.h).
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/launch_env.h"

namespace furlong::dist {
namespace {

std::string asked(int nodes, int per_node) {
  return "--actor-num-nodes " + std::to_string(nodes) + " x --actor-num-gpus-per-node " +
         std::to_string(per_node) + " = " + std::to_string(nodes * per_node) + " ranks";
}

// A world some launcher already started: it must be the one the flags describe.
// `local_known`: the launcher said how many ranks share this node (LOCAL_WORLD_SIZE, Slurm's
// tasks per node); without it the per-node count is not checked.
Placement already_launched(int nodes, int per_node, const RendezvousInfo& info,
                           const std::string& source, bool local_known) {
  FURLONG_CHECK(info.world_size == nodes * per_node, asked(nodes, per_node),
                ", but this process is rank ", info.rank, " of a world of ", info.world_size,
                " started by ", source,
                "; give the flags that world's shape, or start N x G ranks");
  FURLONG_CHECK(!local_known || info.local_world_size == per_node || info.world_size == 1,
                asked(nodes, per_node), ", but ", source, " started ", info.local_world_size,
                " ranks on this node; start --actor-num-gpus-per-node ranks per node");
  Placement p;
  p.num_nodes = nodes;
  p.ranks_per_node = per_node;
  p.node_rank = info.rank / per_node;
  p.master_addr = info.master_addr;
  p.master_port = info.master_port;
  p.source = source;
  return p;
}

Placement spawn(int nodes, int per_node, int node_rank, std::string addr, int port,
                std::string source) {
  Placement p;
  p.spawn_local_ranks = true;
  p.num_nodes = nodes;
  p.node_rank = node_rank;
  p.ranks_per_node = per_node;
  p.master_addr = std::move(addr);
  p.master_port = port;
  p.source = std::move(source);
  return p;
}

// NODE_RANK with MASTER_ADDR / MASTER_PORT (torchrun's --node-rank, --master-addr and
// --master-port as variables): every node runs the same command.
Placement from_node_rank(int nodes, int per_node, const EnvLookup& env) {
  const std::string text = *env("NODE_RANK");
  char* end = nullptr;
  long node = std::strtol(text.c_str(), &end, 10);
  FURLONG_CHECK(!text.empty() && end == text.c_str() + text.size() && node >= 0 && node < nodes,
                "environment variable NODE_RANK='", text, "' must be a node index 0..", nodes - 1,
                " (--actor-num-nodes ", nodes, ")");
  auto addr = env("MASTER_ADDR");
  auto port = env("MASTER_PORT");
  std::string missing;
  if (!addr || addr->empty()) missing = "MASTER_ADDR";
  if (!port) missing += std::string(missing.empty() ? "" : " and ") + "MASTER_PORT";
  FURLONG_CHECK(missing.empty() || nodes == 1, "NODE_RANK=", node, " with --actor-num-nodes ",
                nodes, ": ", missing,
                " not set; every node needs the address and port node 0 serves the rendezvous "
                "on (node 0's address, reachable from all nodes, and a free port there)");
  int port_number = 0;
  if (port) {
    long v = std::strtol(port->c_str(), &end, 10);
    FURLONG_CHECK(!port->empty() && *end == '\0' && v >= 1 && v <= 65535,
                  "environment variable MASTER_PORT='", *port, "' is not a TCP port (1..65535)");
    port_number = static_cast<int>(v);
  }
  return spawn(nodes, per_node, static_cast<int>(node), addr ? *addr : "127.0.0.1", port_number,
               "NODE_RANK / MASTER_ADDR / MASTER_PORT");
}

}  // namespace

Placement resolve_placement(int nodes, int per_node, const EnvLookup& env) {
  FURLONG_CHECK(nodes >= 1 && nodes <= 65536, "--actor-num-nodes must be 1..65536, got ", nodes);
  FURLONG_CHECK(per_node >= 0 && per_node <= 4096,
                "--actor-num-gpus-per-node must be 1..4096, got ", per_node);
  if (per_node == 0) {
    // Not given: the launched world's ranks per node, else one.
    const bool launched = env("RANK") || env("WORLD_SIZE") || env("SLURM_PROCID") ||
                          env("SLURM_NTASKS") || env("SLURM_LOCALID");
    const int world = launched ? rendezvous_from(env).world_size : 1;
    FURLONG_CHECK(world % nodes == 0, "--actor-num-nodes ", nodes,
                  " does not divide the launched world of ", world,
                  " ranks; give --actor-num-gpus-per-node as well");
    per_node = std::max(1, world / nodes);
  }
  FURLONG_CHECK(static_cast<long>(nodes) * per_node <= INT_MAX / 2, asked(nodes, per_node),
                " is too many");
  if (env("RANK") || env("WORLD_SIZE")) {
    return already_launched(nodes, per_node, rendezvous_from(env),
                            "torchrun or `furlong launch` (RANK, WORLD_SIZE)",
                            env("LOCAL_WORLD_SIZE").has_value());
  }
  if (env("SLURM_PROCID") || env("SLURM_NTASKS") || env("SLURM_LOCALID")) {
    RendezvousInfo info = rendezvous_from(env);
    const std::string slurm = "Slurm (SLURM_PROCID, SLURM_NTASKS)";
    const bool local_known = env("SLURM_NTASKS_PER_NODE") || env("SLURM_TASKS_PER_NODE");
    if (info.world_size == nodes * per_node) {
      return already_launched(nodes, per_node, info, slurm, local_known);
    }
    FURLONG_CHECK(info.world_size == nodes, asked(nodes, per_node), ", but Slurm started ",
                  info.world_size, " tasks (SLURM_NTASKS): run one task per rank (srun --ntasks ",
                  nodes * per_node, ") or one per node (srun --ntasks ", nodes,
                  " --ntasks-per-node 1), and furlong starts the node's ranks");
    FURLONG_CHECK(info.local_world_size == 1, asked(nodes, per_node), ", Slurm started ",
                  info.world_size, " tasks but ", info.local_world_size,
                  " share this node: with one task per node, use srun --ntasks-per-node 1");
    return spawn(nodes, per_node, info.rank, info.master_addr, info.master_port,
                 slurm + ", one task per node");
  }
  if (env("NODE_RANK")) return from_node_rank(nodes, per_node, env);
  FURLONG_CHECK(nodes == 1, "--actor-num-nodes ", nodes,
                " needs a multi-node launch environment and none is set: run `furlong train` "
                "on every node under srun (one task per node, or one per rank), under torchrun "
                "(--nnodes ",
                nodes, " --nproc-per-node ", per_node,
                "), or with NODE_RANK, MASTER_ADDR and MASTER_PORT set on each node "
                "(see docs/multi-node.md)");
  if (per_node == 1) {
    Placement single;
    single.source = "a single process";
    return single;
  }
  return spawn(1, per_node, 0, "127.0.0.1", 0, "this host (no launch environment)");
}

EngineDevice engine_cuda_device(int index, int trainer_ranks, int device_count,
                                const std::optional<std::string>& visible) {
  EngineDevice out;
  if (device_count <= 0) return out;
  std::vector<std::string> names;
  if (visible && !visible->empty()) {
    for (size_t at = 0; at <= visible->size();) {
      size_t comma = std::min(visible->find(',', at), visible->size());
      names.push_back(visible->substr(at, comma - at));
      at = comma + 1;
    }
  }
  while (static_cast<int>(names.size()) < device_count) {
    names.push_back(std::to_string(names.size()));
  }
  const int slot = std::max(trainer_ranks, 0) + index;
  out.shared = slot >= device_count;
  out.device = names[static_cast<size_t>(slot % device_count)];
  return out;
}

}  // namespace furlong::dist
