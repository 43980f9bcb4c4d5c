// What a launcher tells a process about its place in a job, read from the environment:
// torchrun / `furlong launch` variables (RANK, WORLD_SIZE, ...), Slurm's (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, the node lists), or a node-level launch (NODE_RANK plus
// MASTER_ADDR/MASTER_PORT) where each node starts its own local ranks.
//
// Everything here reads the environment through an EnvLookup, so tests pass a map instead of
// changing the process's environment.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace furlong::dist {

// Returns the value of a variable, or nullopt when it is unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_env();  // std::getenv
EnvLookup map_env(std::map<std::string, std::string> vars);

// The rendezvous of this process. Precedence: torchrun's variables (RANK / WORLD_SIZE) when
// any is set, else Slurm's (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID) when any is set, else a
// single process. A partial set of either is an error naming the missing variables. Under
// Slurm: MASTER_ADDR when set, else the first host of SLURM_STEP_NODELIST, SLURM_NODELIST or
// SLURM_JOB_NODELIST; MASTER_PORT when set, else slurm_default_port(SLURM_JOB_ID); the ranks
// per node from SLURM_NTASKS_PER_NODE, else SLURM_TASKS_PER_NODE at this task's SLURM_NODEID.
RendezvousInfo rendezvous_from(const EnvLookup& env);

// Slurm's compressed host lists: "node[01-04,07],gpu7" -> node01 node02 node03 node04 node07
// gpu7 (zero padding kept, several bracket groups in one name expand as a product). At most
// `max_hosts` names (an error beyond). Malformed lists are errors quoting the list.
std::vector<std::string> expand_slurm_nodelist(const std::string& list, size_t max_hosts = 65536);
// The first host of a list, without expanding the rest.
std::string first_slurm_host(const std::string& list);
// SLURM_TASKS_PER_NODE: "2(x3),1" -> {2, 2, 2, 1}.
std::vector<int> expand_slurm_tasks_per_node(const std::string& text);
// The rendezvous port used under Slurm without MASTER_PORT: 20000 + job_id % 20000 (so two
// jobs on the same nodes rarely collide), 29500 without a job id.
int slurm_default_port(const std::optional<std::string>& job_id);

// How `furlong train --actor-num-nodes N --actor-num-gpus-per-node G` places its ranks.
struct Placement {
  // false: this process is one rank of an already launched world of N x G ranks (or the single
  // rank of a 1 x 1 run); true: start G local ranks here, as node `node_rank` of N.
  bool spawn_local_ranks = false;
  int num_nodes = 1;
  int node_rank = 0;
  int ranks_per_node = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0 = pick a free port (a single-node spawn only)
  std::string source;   // what decided it, for the log line and errors
};

// Decides from the environment. Already launched (torchrun / `furlong launch` / Slurm with one
// task per rank): the world must be N x G, else an error naming both. Slurm with N tasks (one
// per node) or NODE_RANK (with MASTER_ADDR / MASTER_PORT): spawn G local ranks as that node.
// Nothing set: N must be 1; spawn G local ranks on loopback (none to spawn when G is 1).
// G = 0 (not given): the launched world's size / N, else 1.
Placement resolve_placement(int num_nodes, int gpus_per_node, const EnvLookup& env);

// The CUDA device of engine server `index` that rank 0 starts on its node, as the engine's
// CUDA_VISIBLE_DEVICES names it: visible device trainer_ranks + index (the node's training
// ranks use cuda:0 .. cuda:trainer_ranks-1), mapped through `visible` (this process's
// CUDA_VISIBLE_DEVICES) when set. With fewer devices it wraps round onto a device in use and
// says so in `shared`. device is "" when device_count is 0 (a CPU host).
struct EngineDevice {
  std::string device;
  bool shared = false;
};
EngineDevice engine_cuda_device(int index, int trainer_ranks, int device_count,
                                const std::optional<std::string>& visible);

}  // namespace furlong::dist
