// Rendezvous information from the launcher's environment (torchrun, `furlong launch`, Slurm
// wrappers that export the same variables), and the --distributed-backend name.
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"
#include "dist/process_group.h"

namespace furlong::dist {
namespace {

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// A whole-string decimal integer in [lo, hi]; the error names the variable.
int parse_int(const char* name, const std::string& text, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  FURLONG_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0,
                "environment variable ", name, "='", text,
                "' is not an integer; unset it for a single-process run or set it to a number "
                "(torchrun and `furlong launch` set it for you)");
  FURLONG_CHECK(value >= lo && value <= hi, "environment variable ", name, "=", value,
                " is out of range: expected ", lo, "..", hi);
  return static_cast<int>(value);
}

int int_env(const char* name, int fallback, long lo, long hi) {
  auto text = env(name);
  return text ? parse_int(name, *text, lo, hi) : fallback;
}

bool truthy(const std::string& text) {
  return text == "1" || text == "True" || text == "true" || text == "TRUE" || text == "yes";
}

// Fills the local (per-node) fields; without LOCAL_* the run is taken to be on one node.
void read_local(RendezvousInfo& info) {
  info.local_world_size = int_env("LOCAL_WORLD_SIZE", info.world_size, 1, info.world_size);
  info.local_rank = int_env("LOCAL_RANK", info.rank % info.local_world_size, 0, INT_MAX);
  FURLONG_CHECK(info.local_rank < info.local_world_size,
                "environment variable LOCAL_RANK=", info.local_rank,
                " must be less than LOCAL_WORLD_SIZE=", info.local_world_size);
}

// MASTER_ADDR/MASTER_PORT are required once there is more than one rank.
void read_master(RendezvousInfo& info) {
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

}  // namespace

RendezvousInfo rendezvous_from_env() {
  RendezvousInfo info;
  auto rank = env("RANK");
  auto world = env("WORLD_SIZE");
  if (!rank && !world) return info;  // a single process
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
  read_local(info);
  if (info.world_size > 1) read_master(info);
  if (auto agent = env("TORCHELASTIC_USE_AGENT_STORE")) info.agent_store = truthy(*agent);
  info.restart_count = int_env("TORCHELASTIC_RESTART_COUNT", 0, 0, INT_MAX);
  return info;
}

Backend parse_backend(const std::string& name, const std::string& where) {
  if (name == "auto") return Backend::kAuto;
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  FURLONG_FAIL(where, ": unknown distributed backend '", name, "'; expected auto, gloo or nccl");
}

}  // namespace furlong::dist
