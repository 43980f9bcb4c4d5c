// A local launcher: starts N ranks of a command on this host with the environment torchrun sets
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes their
// output, and stops the whole job as soon as one rank fails. Backs `furlong launch` and the
// ranks `furlong train --actor-num-gpus-per-node` starts; on several nodes each node runs one
// launch with its node_rank, all with the same master address and port.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace furlong::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  // This launch is node `node_rank` of `num_nodes`: its ranks are node_rank * nproc_per_node +
  // 0..nproc_per_node-1 of a world of num_nodes * nproc_per_node (GROUP_RANK = node_rank).
  int num_nodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;               // 0 = pick a free port (one node only)
  std::vector<std::string> command;  // argv of each rank (e.g. {"/path/furlong", "train", ...})
  std::chrono::milliseconds kill_grace{5000};
  // Receives every output line: a rank's lines prefixed "[rank N] ", the launcher's own notes
  // prefixed "[launch] " (no trailing newline); `is_stderr` says which stream it came from.
  // Unset: lines are written to this process's stdout/stderr.
  std::function<void(const std::string& line, bool is_stderr)> output;
};

// Starts nproc ranks with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT set (plus OMP_NUM_THREADS = max(1, cores / nproc) unless already set; inherited
// TORCHELASTIC_* variables are removed, so rank 0 serves the store), prefixes each output line
// with "[rank N] ", waits; if any rank exits non-zero or is killed, sends SIGTERM to the others
// (to each rank's process group), then SIGKILL after kill_grace, and returns that rank's exit
// status (128+signal for signals; 127 when the command cannot be executed). SIGINT/SIGTERM to
// the launcher are forwarded to the ranks (SIGKILL follows after kill_grace). Returns 0 when all
// succeed. One launch at a time per process; furlong::Error for invalid options.
int launch(const LaunchOptions& options);

// A TCP port the kernel considers free right now on `addr` (bound and released; a small race
// is accepted).
int pick_free_port(const std::string& addr);

}  // namespace furlong::dist
