// ProcessGroups: backend choice, the TCPStore rendezvous, the world group and subgroups.
//
// Store layout (keys of the base store):
//   furlong/rendezvous/{joined,done}   the join counter every rank increments at start-up
//   furlong/exit/{arrived,done}        the shutdown handshake (the store host leaves last)
//   furlong/heartbeat/<rank>           each rank's beat counter (dist/heartbeat.h)
//   pg/<group name>/...                one c10d backend per group (gloo connects through it)
// Under torchrun the base store is the agent's store prefixed "/worker/attempt_<restart>", as
// torch.distributed does, so a restarted attempt never sees the previous attempt's keys.
#include <ATen/Context.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <exception>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "dist/backends.h"
#include "dist/group_impl.h"
#include "dist/heartbeat.h"

namespace furlong::dist {

using std::chrono::milliseconds;

struct ProcessGroups::Impl {
  RendezvousInfo info;
  InitOptions options;
  Backend backend = Backend::kGloo;  // resolved: never kAuto
  c10::Device device{c10::kCPU};
  c10::intrusive_ptr<c10d::Store> store;  // scoped base store; null in a single process
  bool hosts_store = false;               // rank 0 serving the TCPStore itself
  std::shared_ptr<detail::SharedState> state = std::make_shared<detail::SharedState>();
  std::set<std::string> names;  // group names used so far
  int meshes_built = 0;         // numbers Mesh group names (see mesh.cpp)
  std::unique_ptr<Group> world;
  std::unique_ptr<Heartbeat> heartbeat;  // with options.heartbeat_timeout > 0 and ranks > 1

  std::unique_ptr<Group> make_group(const std::vector<int>& ranks, const std::string& name);
};

namespace {

std::string seconds(milliseconds ms) {
  std::ostringstream os;
  os << static_cast<double>(ms.count()) / 1000.0 << " s";
  return os.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (int r : ranks) parts.push_back(std::to_string(r));
  return "[" + join(parts, ", ") + "]";
}

milliseconds rendezvous_timeout(const InitOptions& options) {
  return options.rendezvous_timeout.value_or(options.timeout);
}

// auto -> NCCL when compiled in and a CUDA device is visible, else Gloo.
Backend resolve_backend(Backend requested, const RendezvousInfo& info) {
  bool have_cuda = detail::nccl_compiled() && detail::cuda_device_count() > 0;
  if (requested == Backend::kGloo) return Backend::kGloo;
  if (requested == Backend::kAuto) return have_cuda ? Backend::kNccl : Backend::kGloo;
  FURLONG_CHECK(
      detail::nccl_compiled(),
      "dist: the nccl backend was requested but this furlong build has no NCCL support "
      "(it was built against a CPU-only libtorch); use --distributed-backend gloo or auto, or "
      "rebuild against a CUDA libtorch");
  int devices = detail::cuda_device_count();
  FURLONG_CHECK(devices > 0,
                "dist: the nccl backend needs a CUDA device but none is visible; "
                "check CUDA_VISIBLE_DEVICES or use --distributed-backend gloo");
  FURLONG_CHECK(info.local_rank < devices, "dist: LOCAL_RANK=", info.local_rank, " but only ",
                devices, " CUDA devices are visible; start at most ", devices, " ranks per node");
  return Backend::kNccl;
}

// Connects to (rank 0 or torchrun's agent: serves) the TCPStore at MASTER_ADDR:MASTER_PORT.
void connect_store(ProcessGroups::Impl& pg) {
  const RendezvousInfo& info = pg.info;
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(info.master_port);
  opts.isServer = !info.agent_store && info.rank == 0;
  opts.numWorkers = static_cast<size_t>(info.world_size);
  opts.waitWorkers = false;  // the join counter below reports how many ranks arrived
  opts.timeout = rendezvous_timeout(pg.options);
  std::string where = info.master_addr + ":" + std::to_string(info.master_port);
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    tcp = c10::make_intrusive<c10d::TCPStore>(info.master_addr, opts);
  } catch (const std::exception& e) {
    if (opts.isServer) {
      FURLONG_FAIL("dist: rank 0 could not serve the rendezvous store on ", where, ": ",
                   detail::cause_of(e), ". Is MASTER_PORT free on this host (another job)?");
    }
    FURLONG_FAIL("dist: rank ", info.rank, " could not reach the rendezvous store at ", where,
                 " within ", seconds(opts.timeout), ": ", detail::cause_of(e),
                 ". Is rank 0 (or torchrun) running, and are MASTER_ADDR/MASTER_PORT the same on "
                 "every rank?");
  }
  pg.hosts_store = opts.isServer;
  pg.store = tcp;
  if (info.agent_store) {
    pg.store = c10::make_intrusive<c10d::PrefixStore>(
        "/worker/attempt_" + std::to_string(info.restart_count), tcp);
  }
}

// Every rank increments the join counter; the last one raises the flag everyone waits for.
void rendezvous(ProcessGroups::Impl& pg) {
  const std::string joined = "furlong/rendezvous/joined";
  const std::string done = "furlong/rendezvous/done";
  const int world = pg.info.world_size;
  const milliseconds timeout = rendezvous_timeout(pg.options);
  try {
    if (pg.store->add(joined, 1) == world) pg.store->set(done, std::string("1"));
    pg.store->wait({done}, timeout);
  } catch (const std::exception& e) {
    int64_t count = -1;
    try {
      count = pg.store->add(joined, 0);
    } catch (const std::exception&) {
    }
    pg.state->failed = true;
    std::string who =
        count >= 0 ? std::to_string(count) : std::string("fewer than ") + std::to_string(world);
    FURLONG_FAIL(
        "dist: rendezvous at ", pg.info.master_addr, ":", pg.info.master_port,
        " did not complete within ", seconds(timeout), ": ", who, " of ", world, " ranks joined (",
        detail::cause_of(e), "). Start all ", world,
        " ranks (torchrun, srun or `furlong launch`) with the same MASTER_ADDR/MASTER_PORT.");
  }
}

// The store host must not leave while other ranks may still use the store (group creation);
// every rank checks in at shutdown and the host waits, bounded, for all of them. Skipped after
// a failure or during unwinding, when peers may be gone.
void exit_handshake(ProcessGroups::Impl& pg) noexcept {
  if (!pg.store || pg.state->failed || std::uncaught_exceptions() > 0) return;
  const std::string arrived = "furlong/exit/arrived";
  const std::string done = "furlong/exit/done";
  try {
    if (pg.store->add(arrived, 1) == pg.info.world_size) pg.store->set(done, std::string("1"));
    if (pg.hosts_store) {
      pg.store->wait({done}, std::min<milliseconds>(pg.options.timeout, std::chrono::minutes(1)));
    }
  } catch (const std::exception& e) {
    LOG_WARN("dist: not every rank checked out before shutdown: ", detail::cause_of(e));
  }
}

}  // namespace

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
  }
  return "?";
}

std::unique_ptr<Group> ProcessGroups::Impl::make_group(const std::vector<int>& ranks,
                                                       const std::string& name) {
  auto g = std::make_unique<Group::Impl>();
  g->name = name;
  g->global_ranks = ranks;
  g->size = static_cast<int>(ranks.size());
  g->rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), info.rank) - ranks.begin());
  g->kind = backend;
  g->device = device;
  g->timeout = options.timeout;
  g->state = state;
  if (g->size > 1) {
    auto scoped = c10::make_intrusive<c10d::PrefixStore>("pg/" + name + "/", store);
    try {
      g->backend = backend == Backend::kNccl
                       ? detail::make_nccl_backend(scoped, g->rank, g->size, options.timeout)
                       : detail::make_gloo_backend(scoped, g->rank, g->size, options.timeout,
                                                   info.master_addr);
    } catch (const std::exception& e) {
      state->failed = true;
      FURLONG_FAIL("dist: connecting group '", name, "' (ranks ", rank_list(ranks),
                   ") failed: ", detail::cause_of(e),
                   ". Every member must create the group (same name, same order) within ",
                   seconds(options.timeout), "; a member may have died or never started.");
    }
  }
  names.insert(name);
  return std::unique_ptr<Group>(new Group(std::move(g)));
}

ProcessGroups::ProcessGroups(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProcessGroups::~ProcessGroups() {
  if (!impl_) return;
  impl_->heartbeat.reset();  // marks this rank as left while the store is still there
  exit_handshake(*impl_);
}

std::unique_ptr<ProcessGroups> ProcessGroups::init(const RendezvousInfo& info,
                                                   const InitOptions& options) {
  FURLONG_CHECK(info.world_size >= 1 && info.rank >= 0 && info.rank < info.world_size,
                "dist: rank ", info.rank, " is not in a world of size ", info.world_size);
  auto pg = std::make_unique<Impl>();
  pg->info = info;
  pg->options = options;
  pg->backend = resolve_backend(options.backend, info);
  if (pg->backend == Backend::kNccl) {
    detail::set_cuda_device(info.local_rank);
    pg->device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(info.local_rank));
  }
  if (info.world_size > 1) {
    set_log_rank(info.rank);
    connect_store(*pg);
    rendezvous(*pg);
    if (options.heartbeat_timeout.count() > 0) {
      pg->heartbeat = std::make_unique<Heartbeat>(
          pg->store, info.rank, info.world_size, options.heartbeat_timeout,
          info.master_addr + ":" + std::to_string(info.master_port));
    }
  }
  std::vector<int> all(info.world_size);
  for (int r = 0; r < info.world_size; ++r) all[r] = r;
  pg->world = pg->make_group(all, "world");
  LOG_DEBUG("dist: rank ", info.rank, " of ", info.world_size, " ready (",
            backend_name(pg->backend), ")");
  return std::unique_ptr<ProcessGroups>(new ProcessGroups(std::move(pg)));
}

const RendezvousInfo& ProcessGroups::info() const {
  return impl_->info;
}
Group& ProcessGroups::world() {
  return *impl_->world;
}
c10::Device ProcessGroups::device() const {
  return impl_->device;
}
Backend ProcessGroups::backend() const {
  return impl_->backend;
}

int ProcessGroups::next_mesh_index() {
  return impl_->meshes_built++;
}

std::unique_ptr<Group> ProcessGroups::new_group(const std::vector<int>& ranks,
                                                const std::string& name) {
  Impl& pg = *impl_;
  FURLONG_CHECK(!name.empty(), "dist: new_group needs a non-empty name");
  FURLONG_CHECK(!pg.names.count(name), "dist: a group named '", name,
                "' already exists in this run; group names must be unique");
  FURLONG_CHECK(!ranks.empty(), "dist: group '", name, "' has no ranks");
  for (size_t i = 0; i < ranks.size(); ++i) {
    FURLONG_CHECK(ranks[i] >= 0 && ranks[i] < pg.info.world_size, "dist: group '", name,
                  "' lists rank ", ranks[i], ", outside the world of size ", pg.info.world_size);
    FURLONG_CHECK(i == 0 || ranks[i] > ranks[i - 1], "dist: group '", name, "' ranks ",
                  rank_list(ranks), " must be sorted and unique");
  }
  FURLONG_CHECK(std::binary_search(ranks.begin(), ranks.end(), pg.info.rank), "dist: rank ",
                pg.info.rank, " is not a member of group '", name, "' ", rank_list(ranks),
                "; only members create a group");
  return pg.make_group(ranks, name);
}

}  // namespace furlong::dist
