// Process groups for furlong's distributed layers, on c10d (Gloo on CPU, NCCL on CUDA).
//
// Ranks rendezvous from the standard environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT), the way torchrun and `furlong launch` set it, or from Slurm's (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, the node list; dist/launch_env.h). With no environment the run
// is a single process (world size 1) and every collective is an identity.
//
// Every collective blocks until it completes or raises furlong::Error within the group's
// timeout (a dead peer surfaces as an error naming the group and the operation, never a hang).
// Collectives must be issued in the same order on all members of a group.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace furlong::dist {

struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun's agent already serves the store (TORCHELASTIC_USE_AGENT_STORE=True): every rank
  // is a client; otherwise rank 0 hosts it.
  bool agent_store = false;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
};

// Reads the environment: torchrun's variables, else Slurm's (rendezvous_from in
// dist/launch_env.h); none at all means a single process. Malformed values (e.g. RANK >=
// WORLD_SIZE, a non-numeric port) and partial sets are errors naming the variables.
RendezvousInfo rendezvous_from_env();

enum class Backend { kAuto, kGloo, kNccl };
Backend parse_backend(const std::string& name, const std::string& where);  // auto|gloo|nccl
const char* backend_name(Backend backend);                                 // "auto"|"gloo"|"nccl"

struct InitOptions {
  Backend backend = Backend::kAuto;  // auto: NCCL when CUDA is available (and compiled), else Gloo
  // Collective timeout: a collective (or group creation) that does not complete within it raises
  // furlong::Error. Also the rendezvous timeout unless rendezvous_timeout is set.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // How long ranks wait for each other to start (slow node start-up can need more than a
  // collective). Defaults to `timeout`.
  std::optional<std::chrono::milliseconds> rendezvous_timeout;
  // > 0: a rank whose heartbeat has been silent this long (stopped, hung) ends the job, naming
  // it, without waiting for the collective timeout (dist/heartbeat.h). 0: no heartbeat.
  std::chrono::milliseconds heartbeat_timeout{0};
};

// An outstanding asynchronous collective.
class Work {
 public:
  Work();  // a completed no-op (defined out of line: Impl is incomplete here)
  ~Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  // Blocks until done; furlong::Error on failure or timeout. A no-op after the first call.
  // Outputs are valid only after wait(). Destroying a Work that was not waited on waits for it
  // (logging, not throwing, a failure), so staged results are never left half-written.
  void wait();

  // Implementation detail of src/dist (opaque elsewhere).
  struct Impl;
  explicit Work(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Payload bytes handed to one group's collectives (benchmarks and diagnostics). Each call counts
// its logical payload, not what crosses the wire: all_gather its output (size() x input bytes),
// reduce_scatter_sum its input (size() x output bytes), all_reduce_sum and broadcast their
// tensor. So one all-gather of a parameter counts the full parameter's bytes in the gathered
// dtype. Per rank, a ring algorithm sends (size()-1)/size() of a gather's or reduce-scatter's
// payload and 2(size()-1)/size() of an all-reduce's; on Gloo reduce_scatter_sum is an all-reduce
// of the whole input, so its wire traffic is about twice a native reduce-scatter's. Calls on
// single-rank groups (identities, nothing is sent) are not counted. Counted when a call is
// issued, in the calling thread, without synchronization: collectives on one group are issued
// from one thread at a time (they must be, for every member to see the same order).
struct CommStats {
  uint64_t bytes_all_gather = 0;
  uint64_t bytes_reduce_scatter = 0;
  uint64_t bytes_all_reduce = 0;
  uint64_t bytes_broadcast = 0;
  uint64_t calls = 0;  // collectives issued on a multi-rank group (barriers included)

  uint64_t total_bytes() const {
    return bytes_all_gather + bytes_reduce_scatter + bytes_all_reduce + bytes_broadcast;
  }
};

// A group of ranks with one c10d backend. Size-1 groups are real groups on which every
// collective is an identity (never a reduction over other ranks).
class Group {
 public:
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  const std::string& name() const;
  int rank() const;  // rank within the group
  int size() const;
  const std::vector<int>& global_ranks() const;  // global rank of each member, by group rank

  // In-place elementwise SUM over the group.
  void all_reduce_sum(at::Tensor& tensor);
  Work all_reduce_sum_async(at::Tensor& tensor);
  // out (size() * in.numel() elements, contiguous) = concatenation of every member's `in`.
  void all_gather(at::Tensor& out, const at::Tensor& in);
  Work all_gather_async(at::Tensor& out, const at::Tensor& in);
  // out (in.numel() / size() elements) = SUM over members of chunk rank() of their `in`.
  // (Always SUM; callers divide. Gloo's emulated reduce-scatter has mishandled AVG.)
  void reduce_scatter_sum(at::Tensor& out, const at::Tensor& in);
  Work reduce_scatter_sum_async(at::Tensor& out, const at::Tensor& in);
  // The same with `in` as scratch the call may overwrite: where reduce-scatter is emulated by an
  // in-place all-reduce of the whole input (Gloo), no private copy of the input is made.
  void reduce_scatter_sum_overwriting_input(at::Tensor& out, at::Tensor& in);
  void broadcast(at::Tensor& tensor, int root);  // root is a group rank
  void barrier();
  // Host-value conveniences, one collective each (fp64 sums, so integer counts stay exact).
  double all_reduce_sum(double value);
  int64_t all_reduce_max(int64_t value);
  // Sums every entry over the group; every member passes the same keys.
  std::map<std::string, double> all_reduce_sum(std::map<std::string, double> values);
  // Every member's string, by group rank (metrics, checkpoint metadata).
  std::vector<std::string> all_gather_strings(const std::string& value);

  // What this rank has issued on this group since it was created or last reset (see CommStats).
  const CommStats& comm_stats() const { return stats_; }
  void reset_comm_stats() { stats_ = CommStats{}; }

  // Implementation detail of src/dist (opaque elsewhere).
  struct Impl;
  explicit Group(std::unique_ptr<Impl> impl);

 private:
  Work reduce_scatter_sum_impl(at::Tensor& out, const at::Tensor& in, bool may_overwrite_input);

  std::unique_ptr<Impl> impl_;
  CommStats stats_;
};

// The world group plus factory for subgroups; owns the store.
class ProcessGroups {
 public:
  // Rendezvous and create the world group. Blocks until all ranks have joined (or times out
  // with an error saying how many joined).
  static std::unique_ptr<ProcessGroups> init(const RendezvousInfo& info,
                                             const InitOptions& options = {});
  // Rank 0, when it serves the store, waits (bounded) for the other ranks to check out first, so
  // none loses the store while still creating a group. Skipped after a collective failed.
  ~ProcessGroups();

  const RendezvousInfo& info() const;
  Group& world();
  // The device this rank computes on: cuda:<local_rank> with NCCL, else CPU.
  c10::Device device() const;
  Backend backend() const;
  // A group of the given global ranks (sorted, unique, including this rank), with a name unique
  // in this run. Only members call it; members must call in the same order.
  std::unique_ptr<Group> new_group(const std::vector<int>& ranks, const std::string& name);

  // Implementation detail of src/dist (opaque elsewhere).
  struct Impl;
  explicit ProcessGroups(std::unique_ptr<Impl> impl);

 private:
  friend class Mesh;
  // 0, 1, 2, ... per call: numbers meshes so their group names are unique and deterministic.
  int next_mesh_index();
  std::unique_ptr<Impl> impl_;
};

}  // namespace furlong::dist
