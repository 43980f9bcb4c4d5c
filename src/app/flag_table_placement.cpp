// The placement flags of `furlong train`: how many nodes and ranks per node the trainer runs
// on (miles' --actor-num-nodes / --actor-num-gpus-per-node), and the address remote engines
// reach it at for weight sync. Part of the one flag table (see flag_table.cpp).
#include "app/commands.h"

namespace furlong::app {

void add_placement_flags(config::FlagSet& f, train::PlacementOptions& p) {
  f.set_group("Placement");
  f.add("actor-num-nodes", &p.actor_num_nodes,
        "nodes the trainer runs on (0 = as launched; more than 1 needs torchrun, srun or "
        "NODE_RANK/MASTER_ADDR/MASTER_PORT on each node, docs/multi-node.md)");
  f.add("actor-num-gpus-per-node", &p.actor_num_gpus_per_node,
        "training ranks per node; outside a launched world `furlong train` starts them itself "
        "(0 = as launched, else 1)");
  f.add("rollout-master-addr", &p.rollout_master_addr,
        "address engine servers on other hosts reach this trainer at for weight sync (default: "
        "MILES_HOST_IP, else this host's address on the route to the first remote engine)");
}

}  // namespace furlong::app
