// Rendezvous information from the launcher's environment (torchrun, `furlong launch`, Slurm),
// and the --distributed-backend name.
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"
#include "dist/launch_env.h"
#include "dist/process_group.h"

namespace furlong::dist {
namespace {

// A whole-string decimal integer in [lo, hi]; the error names the variable.
int parse_int(const std::string& name, const std::string& text, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  FURLONG_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0,
                "environment variable ", name, "='", text,
                "' is not an integer; unset it for a single-process run or set it to a number "
                "(torchrun, srun and `furlong launch` set it for you)");
  FURLONG_CHECK(value >= lo && value <= hi, "environment variable ", name, "=", value,
                " is out of range: expected ", lo, "..", hi);
  return static_cast<int>(value);
}

int int_env(const EnvLookup& env, const char* name, int fallback, long lo, long hi) {
  auto text = env(name);
  return text ? parse_int(name, *text, lo, hi) : fallback;
}

bool truthy(const std::string& text) {
  return text == "1" || text == "True" || text == "true" || text == "TRUE" || text == "yes";
}

// Fills the local (per-node) fields; without LOCAL_* the run is taken to be on one node.
void read_local(const EnvLookup& env, RendezvousInfo& info) {
  info.local_world_size = int_env(env, "LOCAL_WORLD_SIZE", info.world_size, 1, info.world_size);
  info.local_rank = int_env(env, "LOCAL_RANK", info.rank % info.local_world_size, 0, INT_MAX);
  FURLONG_CHECK(info.local_rank < info.local_world_size,
                "environment variable LOCAL_RANK=", info.local_rank,
                " must be less than LOCAL_WORLD_SIZE=", info.local_world_size);
}

// MASTER_ADDR/MASTER_PORT are required once there is more than one rank.
void read_master(const EnvLookup& env, RendezvousInfo& info) {
  auto addr = env("MASTER_ADDR");
  auto port = env("MASTER_PORT");
  FURLONG_CHECK(addr && !addr->empty(),
                "environment variable MASTER_ADDR is not set but WORLD_SIZE=", info.world_size,
                ": set MASTER_ADDR and MASTER_PORT to the address rank 0 serves the rendezvous "
                "store on (torchrun and `furlong launch` set them)");
  FURLONG_CHECK(port.has_value(),
                "environment variable MASTER_PORT is not set but WORLD_SIZE=", info.world_size,
                ": set it to a free TCP port on MASTER_ADDR");
  info.master_addr = *addr;
  info.master_port = parse_int("MASTER_PORT", *port, 1, 65535);
}

RendezvousInfo from_torchrun(const EnvLookup& env) {
  RendezvousInfo info;
  auto rank = env("RANK");
  auto world = env("WORLD_SIZE");
  FURLONG_CHECK(rank.has_value(),
                "environment variable WORLD_SIZE is set but RANK is not: set "
                "both (or neither, for a single-process run)");
  FURLONG_CHECK(world.has_value(),
                "environment variable RANK is set but WORLD_SIZE is not: set "
                "both (or neither, for a single-process run)");
  info.world_size = parse_int("WORLD_SIZE", *world, 1, INT_MAX);
  info.rank = parse_int("RANK", *rank, 0, INT_MAX);
  FURLONG_CHECK(info.rank < info.world_size, "environment variable RANK=", info.rank,
                " must be less than WORLD_SIZE=", info.world_size);
  read_local(env, info);
  if (info.world_size > 1) read_master(env, info);
  if (auto agent = env("TORCHELASTIC_USE_AGENT_STORE")) info.agent_store = truthy(*agent);
  info.restart_count = int_env(env, "TORCHELASTIC_RESTART_COUNT", 0, 0, INT_MAX);
  return info;
}

// Tasks on this task's node: SLURM_NTASKS_PER_NODE (set when the job asks for a count per
// node), else the SLURM_TASKS_PER_NODE entry of this node (SLURM_NODEID), else the whole world
// on one node.
int slurm_local_world_size(const EnvLookup& env, int world) {
  if (auto per_node = env("SLURM_NTASKS_PER_NODE")) {
    return parse_int("SLURM_NTASKS_PER_NODE", *per_node, 1, world);
  }
  auto tasks = env("SLURM_TASKS_PER_NODE");
  if (!tasks) return world;
  auto counts = expand_slurm_tasks_per_node(*tasks);
  if (auto node = env("SLURM_NODEID")) {
    int id = parse_int("SLURM_NODEID", *node, 0, static_cast<long>(counts.size()) - 1);
    return counts[static_cast<size_t>(id)];
  }
  for (int c : counts) {
    FURLONG_CHECK(c == counts.front(), "environment variable SLURM_TASKS_PER_NODE='", *tasks,
                  "' differs between nodes and SLURM_NODEID is not set: cannot tell how many "
                  "tasks share this node; set SLURM_NTASKS_PER_NODE or LOCAL_WORLD_SIZE");
  }
  return counts.front();
}

RendezvousInfo from_slurm(const EnvLookup& env) {
  std::string missing;
  for (const char* name : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}) {
    if (!env(name)) missing += std::string(missing.empty() ? "" : ", ") + name;
  }
  FURLONG_CHECK(missing.empty(), "the Slurm environment is incomplete: ", missing,
                " not set (srun sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID for every "
                "task). Start the ranks with srun, or set torchrun's RANK, WORLD_SIZE, "
                "MASTER_ADDR and MASTER_PORT; furlong will not run as a world of one here");
  RendezvousInfo info;
  info.world_size = parse_int("SLURM_NTASKS", *env("SLURM_NTASKS"), 1, INT_MAX);
  info.rank = parse_int("SLURM_PROCID", *env("SLURM_PROCID"), 0, INT_MAX);
  FURLONG_CHECK(info.rank < info.world_size, "environment variable SLURM_PROCID=", info.rank,
                " must be less than SLURM_NTASKS=", info.world_size);
  info.local_rank = parse_int("SLURM_LOCALID", *env("SLURM_LOCALID"), 0, INT_MAX);
  info.local_world_size = slurm_local_world_size(env, info.world_size);
  FURLONG_CHECK(info.local_rank < info.local_world_size,
                "environment variable SLURM_LOCALID=", info.local_rank,
                " must be less than the tasks on this node (", info.local_world_size, ")");
  if (info.world_size == 1) return info;
  if (auto addr = env("MASTER_ADDR"); addr && !addr->empty()) {
    info.master_addr = *addr;
  } else {
    std::optional<std::string> list;
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"}) {
      if ((list = env(name))) break;
    }
    FURLONG_CHECK(list && !list->empty(), "Slurm task ", info.rank, " of ", info.world_size,
                  ": no MASTER_ADDR and no node list (SLURM_STEP_NODELIST, SLURM_NODELIST or "
                  "SLURM_JOB_NODELIST) to take the first host from; set MASTER_ADDR");
    info.master_addr = first_slurm_host(*list);
  }
  auto port = env("MASTER_PORT");
  info.master_port =
      port ? parse_int("MASTER_PORT", *port, 1, 65535) : slurm_default_port(env("SLURM_JOB_ID"));
  return info;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

EnvLookup map_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

int slurm_default_port(const std::optional<std::string>& job_id) {
  if (!job_id) return 29500;
  long id = parse_int("SLURM_JOB_ID", *job_id, 0, INT_MAX);
  return static_cast<int>(20000 + id % 20000);
}

RendezvousInfo rendezvous_from(const EnvLookup& env) {
  if (env("RANK") || env("WORLD_SIZE")) return from_torchrun(env);
  if (env("SLURM_PROCID") || env("SLURM_NTASKS") || env("SLURM_LOCALID")) return from_slurm(env);
  return RendezvousInfo{};  // a single process
}

RendezvousInfo rendezvous_from_env() {
  return rendezvous_from(process_env());
}

Backend parse_backend(const std::string& name, const std::string& where) {
  if (name == "auto") return Backend::kAuto;
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  FURLONG_FAIL(where, ": unknown distributed backend '", name, "'; expected auto, gloo or nccl");
}

}  // namespace furlong::dist
