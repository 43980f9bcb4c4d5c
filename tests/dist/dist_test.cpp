// Tests of src/dist: collectives and meshes across real processes (the dist_worker binary started
// through dist::launch with 2 and 4 ranks on Gloo), failure handling (a dead rank, a stalled
// rank, rendezvous timeouts), the launcher itself, environment parsing and single-process mode.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "dist/launcher.h"
#include "dist/mesh.h"
#include "dist/process_group.h"

namespace furlong::dist {
namespace {

using std::chrono::milliseconds;
using testing::error_of;

struct Launched {
  int status = -1;
  double seconds = 0;
  std::vector<std::string> lines;
  std::vector<bool> is_stderr;

  bool has(const std::string& line) const {
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  }
  // The first line starting with `prefix` that contains every one of `parts`.
  std::optional<std::string> find(const std::string& prefix,
                                  const std::vector<std::string>& parts = {}) const {
    for (const auto& l : lines) {
      if (l.rfind(prefix, 0) != 0) continue;
      bool all = std::all_of(parts.begin(), parts.end(),
                             [&](const std::string& p) { return l.find(p) != std::string::npos; });
      if (all) return l;
    }
    return std::nullopt;
  }
  std::string text() const {
    std::string t;
    for (const auto& l : lines) t += l + "\n";
    return t;
  }
};

Launched run(LaunchOptions options) {
  Launched result;
  options.output = [&](const std::string& line, bool is_stderr) {
    result.lines.push_back(line);
    result.is_stderr.push_back(is_stderr);
  };
  auto start = std::chrono::steady_clock::now();
  result.status = launch(options);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Launched run_worker(int nproc, const std::vector<std::string>& args,
                    milliseconds grace = milliseconds(5000)) {
  LaunchOptions options;
  options.nproc_per_node = nproc;
  options.command = {DIST_WORKER_PATH};
  options.command.insert(options.command.end(), args.begin(), args.end());
  options.kill_grace = grace;
  return run(options);
}

Launched run_sh(int nproc, const std::string& script, milliseconds grace = milliseconds(5000)) {
  LaunchOptions options;
  options.nproc_per_node = nproc;
  options.command = {"/bin/sh", "-c", script};
  options.kill_grace = grace;
  return run(options);
}

std::string rank_prefix(int r) {
  return "[rank " + std::to_string(r) + "] ";
}

// ----- collectives and meshes across processes -----

std::vector<std::string> collective_checks() {
  std::vector<std::string> names;
  for (std::string dtype : {"float32", "bfloat16", "int64"}) {
    for (std::string check :
         {"all_reduce_sum.sync", "all_reduce_sum.async", "all_reduce_sum.noncontiguous",
          "all_gather.sync", "all_gather.async", "all_gather.2d", "reduce_scatter_sum.sync",
          "reduce_scatter_sum.async", "reduce_scatter_sum.input", "broadcast.rootlast",
          "broadcast.root0"}) {
      names.push_back(check + "." + dtype);
    }
  }
  for (std::string check : {"inflight.all_reduce", "inflight.all_gather", "inflight.reduce_scatter",
                            "all_gather_strings", "all_gather_strings.empty", "barrier"}) {
    names.push_back(check);
  }
  return names;
}

void expect_collectives(int nproc) {
  auto r = run_worker(nproc, {"collectives"});
  ASSERT_EQ(r.status, 0) << r.text();
  EXPECT_FALSE(r.find("", {"BAD "})) << r.text();
  for (int rank = 0; rank < nproc; ++rank) {
    for (const auto& check : collective_checks()) {
      EXPECT_TRUE(r.has(rank_prefix(rank) + "OK " + check)) << "rank " << rank << ": " << check;
    }
    EXPECT_TRUE(r.has(rank_prefix(rank) + "DONE"));
  }
}

TEST(DistCollectives, FourRanksGiveTheRightValuesOnEveryRank) {
  expect_collectives(4);
}

TEST(DistCollectives, TwoRanksGiveTheRightValuesOnEveryRank) {
  expect_collectives(2);
}

// Under torchrun the agent serves the store (TORCHELASTIC_USE_AGENT_STORE=True): every rank is a
// client of it, under the "/worker/attempt_<n>" prefix.
TEST(DistCollectives, RunUnderTorchrunWithTheAgentsStore) {
  auto r = testing::run_command(testing::shell_quote(testing::python().string()) +
                                " -m torch.distributed.run --standalone --no-python "
                                "--nproc-per-node 2 " +
                                testing::shell_quote(DIST_WORKER_PATH) + " collectives 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t ok = 0;
  for (size_t at = 0; (at = r.output.find("\nOK ", at)) != std::string::npos; ++at) ++ok;
  if (r.output.rfind("OK ", 0) == 0) ++ok;
  EXPECT_EQ(ok, 2 * collective_checks().size()) << r.output;
  EXPECT_EQ(r.output.find("BAD "), std::string::npos) << r.output;
}

std::string bracket(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

TEST(DistMesh, GroupsOfFourRanksForEveryReplicateSize) {
  const int W = 4;
  auto r = run_worker(W, {"mesh"});
  ASSERT_EQ(r.status, 0) << r.text();
  EXPECT_FALSE(r.find("", {"BAD "})) << r.text();
  for (int R : {1, 2, 4}) {
    const int S = W / R;
    for (int rank = 0; rank < W; ++rank) {
      std::vector<int> shard, replicate;
      for (int k = 0; k < S; ++k) shard.push_back((rank / S) * S + k);
      for (int k = 0; k < R; ++k) replicate.push_back(k * S + rank % S);
      // Replicate index r / S, shard index r % S (row-major, as DeviceMesh).
      std::string layout = "MESH R=" + std::to_string(R) + " S=" + std::to_string(S) +
                           " rep=" + std::to_string(rank / S) +
                           " shard=" + std::to_string(rank % S) + " dp_shard=" + bracket(shard) +
                           " dp_replicate=" + bracket(replicate);
      EXPECT_TRUE(r.has(rank_prefix(rank) + layout)) << layout << "\n" << r.text();
      // Sums over dp_shard / dp_replicate cover exactly their members; cp/tp leave the value
      // unchanged (never a world-wide reduction); dp is the world.
      for (std::string check :
           {"dp_shard.members", "dp_replicate.members", "cp_tp.single", "dp_shard.sum",
            "dp_replicate.sum", "cp.sum", "tp.sum", "dp.sum", "dp_shard.all_gather"}) {
        std::string line = rank_prefix(rank) + "OK mesh.R" + std::to_string(R) + "." + check;
        EXPECT_TRUE(r.has(line)) << line;
      }
    }
  }
}

TEST(DistMesh, ValidationSaysWhatIsWrongAndWhatToDo) {
  auto msg = error_of([] { Mesh::validate(4, 3); });
  EXPECT_NE(msg.find("--dp-replicate-size 3 does not divide the world size 4; choose a divisor "
                     "of 4 (1, 2, 4)"),
            std::string::npos)
      << msg;
  msg = error_of([] { Mesh::validate(4, 0); });
  EXPECT_NE(msg.find("--dp-replicate-size 0 must be at least 1"), std::string::npos) << msg;
  msg = error_of([] { Mesh::validate(8, -2); });
  EXPECT_NE(msg.find("--dp-replicate-size -2 must be at least 1"), std::string::npos) << msg;
  Mesh::validate(4, 4);
  Mesh::validate(6, 3);
}

// ----- failures -----

TEST(DistFailure, ADeadRankMakesTheOthersFailClearlyAndTheLauncherStopsTheJob) {
  // Gloo timeout 3 s; survivors ignore SIGTERM, so they must end by themselves (the grace before
  // SIGKILL is longer than the bound asserted here).
  auto r = run_worker(4, {"die", "3000"}, milliseconds(25000));
  EXPECT_EQ(r.status, 3) << r.text();  // rank 1's exit status
  EXPECT_LT(r.seconds, 20.0) << r.text();
  EXPECT_TRUE(r.find("[launch] rank 1 exited with status 3")) << r.text();
  for (int rank : {0, 2, 3}) {
    auto line = r.find(rank_prefix(rank) + "ERROR: ",
                       {"dist: all_reduce_sum on group 'world'", "may have died"});
    EXPECT_TRUE(line) << "rank " << rank << "\n" << r.text();
  }
  EXPECT_FALSE(r.find("", {"BAD "})) << r.text();
}

TEST(DistFailure, AStalledRankTimesOutInsteadOfHanging) {
  auto r = run_worker(2, {"stall", "2000"});
  EXPECT_EQ(r.status, 1) << r.text();  // rank 0's error
  EXPECT_LT(r.seconds, 20.0) << r.text();
  EXPECT_TRUE(
      r.find(rank_prefix(0) + "ERROR: ", {"all_reduce_sum on group 'world'", "timeout 2 s"}))
      << r.text();
}

// A stopped rank (SIGSTOP) does not end its collectives; the heartbeat finds it long before the
// 120 s collective timeout, rank 0 names it, and the launcher stops the job (SIGKILL reaches the
// stopped rank after the grace).
TEST(DistHeartbeat, AStoppedRankIsFoundWithinTheHeartbeatTimeoutAndNamed) {
  auto r = run_worker(3, {"heartbeat", "2000"}, milliseconds(1000));
  EXPECT_NE(r.status, 0) << r.text();
  EXPECT_LT(r.seconds, 30.0) << r.text();
  EXPECT_TRUE(
      r.find(rank_prefix(0), {"dist: rank 2 sent no heartbeat for", "stopped, hung or gone"}))
      << r.text();
  EXPECT_TRUE(r.find("[launch] rank 0 exited with status 75")) << r.text();
}

// A stopped rank 0 stops the store it hosts: every other rank's beats stop reaching it, and the
// first to notice ends naming the store's host (which one is a race: the launcher then stops the
// rest, so the other may be killed before it reports).
TEST(DistHeartbeat, AStoppedStoreHostIsFoundByTheOtherRanks) {
  auto r = run_worker(3, {"heartbeat", "2000", "0"}, milliseconds(1000));
  EXPECT_EQ(r.status, 75) << r.text();
  EXPECT_LT(r.seconds, 30.0) << r.text();
  auto names_the_store = [&](int rank) {
    return static_cast<bool>(
        r.find(rank_prefix(rank), {"no heartbeat reached the rendezvous store", "rank 0"}));
  };
  EXPECT_TRUE(names_the_store(1) || names_the_store(2)) << r.text();
  EXPECT_FALSE(r.find(rank_prefix(0), {"no heartbeat reached"})) << r.text();
}

// Ranks that leave cleanly, one after another, are not taken for silent ones.
TEST(DistHeartbeat, RanksThatLeaveCleanlyAreNotReported) {
  auto r = run_worker(3, {"heartbeat_clean", "1500"});
  EXPECT_EQ(r.status, 0) << r.text();
  EXPECT_FALSE(r.find("", {"heartbeat for"})) << r.text();
  for (int rank = 0; rank < 3; ++rank) EXPECT_TRUE(r.has(rank_prefix(rank) + "DONE")) << r.text();
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  ::close(fd);
  return ntohs(sa.sin_port);
}

RendezvousInfo two_rank_info(int rank) {
  RendezvousInfo info;
  info.rank = rank;
  info.world_size = 2;
  info.local_rank = rank;
  info.local_world_size = 2;
  info.master_port = free_port();
  return info;
}

TEST(DistFailure, RendezvousTimeoutSaysHowManyRanksJoined) {
  InitOptions options;
  options.backend = Backend::kGloo;
  options.timeout = milliseconds(1000);
  auto msg = error_of([&] { ProcessGroups::init(two_rank_info(0), options); });
  EXPECT_NE(msg.find("rendezvous"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 of 2 ranks joined"), std::string::npos) << msg;
}

TEST(DistFailure, ARankThatCannotReachTheStoreSaysWhere) {
  InitOptions options;
  options.backend = Backend::kGloo;
  options.timeout = milliseconds(1000);
  auto info = two_rank_info(1);
  auto msg = error_of([&] { ProcessGroups::init(info, options); });
  EXPECT_NE(msg.find("could not reach the rendezvous store at 127.0.0.1:" +
                     std::to_string(info.master_port)),
            std::string::npos)
      << msg;
}

// ----- the launcher -----

TEST(Launcher, SetsTheRankEnvironmentAndPrefixesBothStreams) {
  ::unsetenv("OMP_NUM_THREADS");
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  auto r = run_sh(2,
                  "echo \"env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                  "${TORCHELASTIC_USE_AGENT_STORE:-unset} $OMP_NUM_THREADS\"; echo \"port "
                  "$MASTER_PORT\"; echo oops >&2; printf 'no newline'");
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  ASSERT_EQ(r.status, 0) << r.text();
  int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  for (int rank : {0, 1}) {
    std::string p = rank_prefix(rank);
    std::string want =
        p + "env " + std::to_string(rank) + " 2 " + std::to_string(rank) + " 2 127.0.0.1 unset ";
    auto env_line = r.find(want);
    ASSERT_TRUE(env_line) << r.text();
    int omp = std::stoi(env_line->substr(want.size()));
    EXPECT_TRUE(omp == threads || omp >= 1) << *env_line;
    EXPECT_TRUE(r.has(p + "no newline")) << r.text();
    for (size_t i = 0; i < r.lines.size(); ++i) {
      if (r.lines[i] == p + "oops") {
        EXPECT_TRUE(r.is_stderr[i]);
      }
      if (r.lines[i].rfind(p + "env", 0) == 0) {
        EXPECT_FALSE(r.is_stderr[i]);
      }
    }
  }
  auto port0 = r.find(rank_prefix(0) + "port "), port1 = r.find(rank_prefix(1) + "port ");
  ASSERT_TRUE(port0 && port1);
  EXPECT_EQ(port0->substr(rank_prefix(0).size()), port1->substr(rank_prefix(1).size()));
  EXPECT_GT(std::stoi(port0->substr(rank_prefix(0).size() + 5)), 0);
}

TEST(Launcher, KeepsAnOmpNumThreadsTheCallerSet) {
  ::setenv("OMP_NUM_THREADS", "3", 1);
  auto r = run_sh(2, "echo \"omp $OMP_NUM_THREADS\"");
  ASSERT_EQ(r.status, 0) << r.text();
  EXPECT_TRUE(r.has("[rank 0] omp 3") && r.has("[rank 1] omp 3")) << r.text();
}

TEST(Launcher, AFailingRankStopsTheOthersAndItsStatusIsReturned) {
  auto r = run_sh(3, "if [ \"$RANK\" = 1 ]; then exit 5; fi; exec sleep 30");
  EXPECT_EQ(r.status, 5) << r.text();
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_TRUE(r.find("[launch] rank 1 exited with status 5")) << r.text();
}

TEST(Launcher, RanksIgnoringSigtermAreKilledAfterTheGrace) {
  auto r = run_sh(
      2,
      "trap '' TERM; if [ \"$RANK\" = 1 ]; then sleep 0.3; exit 5; fi; while :; do sleep 0.1; done",
      milliseconds(500));
  EXPECT_EQ(r.status, 5) << r.text();
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_TRUE(r.find("[launch] ranks still running after the grace period; sending SIGKILL"))
      << r.text();
}

TEST(Launcher, ARankKilledBySignalReturns128PlusTheSignal) {
  auto r = run_sh(2, "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; exec sleep 30");
  EXPECT_EQ(r.status, 128 + SIGKILL) << r.text();
  EXPECT_TRUE(r.find("[launch] rank 0 was killed by signal 9")) << r.text();
}

TEST(Launcher, ForwardsSigtermToTheRanks) {
  LaunchOptions options;
  options.nproc_per_node = 2;
  options.command = {"/bin/sh", "-c",
                     "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done"};
  std::vector<std::string> lines;
  int ready = 0;
  options.output = [&](const std::string& line, bool) {
    lines.push_back(line);
    // Once both ranks are up, signal the launcher (its handler is installed while it runs).
    if (line.find("] ready") != std::string::npos && ++ready == 2) ::kill(::getpid(), SIGTERM);
  };
  int status = launch(options);
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  EXPECT_EQ(status, 7) << text;
  EXPECT_NE(text.find("[rank 0] got-term"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1] got-term"), std::string::npos) << text;
  EXPECT_NE(text.find("[launch] received SIGTERM; forwarding it to the ranks"), std::string::npos);
}

TEST(Launcher, ACommandThatCannotRunReturns127) {
  LaunchOptions options;
  options.command = {"/nonexistent/furlong-binary"};
  auto r = run(options);
  EXPECT_EQ(r.status, 127);
  EXPECT_TRUE(r.find("[rank 0] launch: cannot execute '/nonexistent/furlong-binary'")) << r.text();
}

TEST(Launcher, RejectsInvalidOptions) {
  LaunchOptions options;
  options.command = {"/bin/true"};
  options.nproc_per_node = 0;
  EXPECT_NE(error_of([&] { launch(options); }).find("--nproc-per-node must be at least 1"),
            std::string::npos);
  options.nproc_per_node = 1;
  options.command.clear();
  EXPECT_NE(error_of([&] { launch(options); }).find("no command to run"), std::string::npos);
  options.command = {"/bin/true"};
  options.master_port = 70000;
  EXPECT_NE(error_of([&] { launch(options); }).find("--master-port 70000"), std::string::npos);
}

// ----- environment -----

// Sets (or, with nullopt, removes) variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [key, value] : vars) {
      const char* old = std::getenv(key.c_str());
      saved_[key] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value) {
        ::setenv(key.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(key.c_str());
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& [key, value] : saved_) {
      if (value) {
        ::setenv(key.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(key.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

const std::map<std::string, std::optional<std::string>> kNoDistEnv = {
    {"RANK", std::nullopt},
    {"WORLD_SIZE", std::nullopt},
    {"LOCAL_RANK", std::nullopt},
    {"LOCAL_WORLD_SIZE", std::nullopt},
    {"MASTER_ADDR", std::nullopt},
    {"MASTER_PORT", std::nullopt},
    {"TORCHELASTIC_USE_AGENT_STORE", std::nullopt},
    {"TORCHELASTIC_RESTART_COUNT", std::nullopt},
    // A CI job under srun must not turn these single-process cases into Slurm tasks.
    {"SLURM_PROCID", std::nullopt},
    {"SLURM_NTASKS", std::nullopt},
    {"SLURM_LOCALID", std::nullopt}};

std::string env_error(const std::map<std::string, std::optional<std::string>>& vars) {
  ScopedEnv clear(kNoDistEnv);
  ScopedEnv set(vars);
  return error_of([] { rendezvous_from_env(); });
}

TEST(DistEnv, ErrorsNameTheVariable) {
  const std::map<std::string, std::optional<std::string>> base = {
      {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto with = [&](std::map<std::string, std::optional<std::string>> extra) {
    for (const auto& kv : base) extra.insert(kv);
    return env_error(extra);
  };
  auto msg = with({{"RANK", "abc"}});
  EXPECT_NE(msg.find("RANK='abc' is not an integer"), std::string::npos) << msg;
  msg = with({{"RANK", "4"}});
  EXPECT_NE(msg.find("RANK=4 must be less than WORLD_SIZE=4"), std::string::npos) << msg;
  msg = with({{"RANK", "1"}, {"MASTER_PORT", "http"}});
  EXPECT_NE(msg.find("MASTER_PORT='http' is not an integer"), std::string::npos) << msg;
  msg = with({{"RANK", "1"}, {"MASTER_PORT", "70000"}});
  EXPECT_NE(msg.find("MASTER_PORT=70000 is out of range"), std::string::npos) << msg;
  msg = with({{"RANK", "1"}, {"MASTER_ADDR", std::nullopt}});
  EXPECT_NE(msg.find("MASTER_ADDR is not set"), std::string::npos) << msg;
  msg = with({{"RANK", "1"}, {"LOCAL_RANK", "x1"}});
  EXPECT_NE(msg.find("LOCAL_RANK='x1'"), std::string::npos) << msg;
  msg = env_error({{"RANK", "0"}});
  EXPECT_NE(msg.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << msg;
  msg = env_error({{"WORLD_SIZE", "0"}, {"RANK", "0"}});
  EXPECT_NE(msg.find("WORLD_SIZE=0 is out of range"), std::string::npos) << msg;
}

TEST(DistEnv, ReadsTorchrunsEnvironment) {
  ScopedEnv clear(kNoDistEnv);
  ScopedEnv set({{"RANK", "5"},
                 {"WORLD_SIZE", "8"},
                 {"LOCAL_RANK", "1"},
                 {"LOCAL_WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "node0"},
                 {"MASTER_PORT", "29400"},
                 {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                 {"TORCHELASTIC_RESTART_COUNT", "2"}});
  auto info = rendezvous_from_env();
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.master_addr, "node0");
  EXPECT_EQ(info.master_port, 29400);
  EXPECT_TRUE(info.agent_store);
  EXPECT_EQ(info.restart_count, 2);
}

TEST(DistEnv, BackendNames) {
  EXPECT_EQ(parse_backend("auto", "--distributed-backend"), Backend::kAuto);
  EXPECT_EQ(parse_backend("gloo", "--distributed-backend"), Backend::kGloo);
  EXPECT_EQ(parse_backend("nccl", "--distributed-backend"), Backend::kNccl);
  auto msg = error_of([] { parse_backend("mpi", "--distributed-backend"); });
  EXPECT_NE(
      msg.find("--distributed-backend: unknown distributed backend 'mpi'; expected auto, gloo or "
               "nccl"),
      std::string::npos)
      << msg;
}

// ----- a single process -----

TEST(DistSingleProcess, WorksWithNoEnvironmentAndCollectivesAreIdentities) {
  ScopedEnv clear(kNoDistEnv);
  auto info = rendezvous_from_env();
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.rank, 0);
  auto pg = ProcessGroups::init(info);
  EXPECT_EQ(pg->device().type(), at::hasCUDA() ? c10::kCUDA : c10::kCPU);
  Group& w = pg->world();
  EXPECT_EQ(w.size(), 1);
  EXPECT_EQ(w.rank(), 0);
  EXPECT_EQ(w.global_ranks(), std::vector<int>{0});
  if (at::hasCUDA()) return;  // the rest runs CPU tensors
  at::Tensor t = at::arange(6.0);
  w.all_reduce_sum(t);
  EXPECT_TRUE(at::equal(t, at::arange(6.0)));
  w.all_reduce_sum_async(t).wait();
  EXPECT_TRUE(at::equal(t, at::arange(6.0)));
  at::Tensor out = at::zeros({6});
  w.all_gather(out, t);
  EXPECT_TRUE(at::equal(out, t));
  at::Tensor rs = at::zeros({2, 3});
  w.reduce_scatter_sum(rs, t);
  EXPECT_TRUE(at::equal(rs.view({-1}), t));
  w.broadcast(t, 0);
  w.barrier();
  EXPECT_EQ(w.all_gather_strings("solo"), std::vector<std::string>{"solo"});
  EXPECT_NE(error_of([&] { w.broadcast(t, 1); }).find("root 1 is not a rank of this group"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.all_gather(out, at::zeros({5})); }).find("needs group size 1 x 5"),
            std::string::npos);

  auto mesh = Mesh::build(*pg, 1);
  EXPECT_EQ(mesh->world_size(), 1);
  EXPECT_EQ(mesh->dp_shard().size(), 1);
  EXPECT_EQ(mesh->dp_replicate().size(), 1);
  EXPECT_EQ(mesh->cp().size(), 1);
  EXPECT_EQ(&mesh->dp(), &pg->world());
  auto msg = error_of([&] { Mesh::build(*pg, 2); });
  EXPECT_NE(msg.find("does not divide the world size 1"), std::string::npos) << msg;

  auto solo = pg->new_group({0}, "solo");
  EXPECT_EQ(solo->name(), "solo");
  EXPECT_NE(error_of([&] { pg->new_group({0}, "solo"); }).find("already exists"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pg->new_group({0}, "world"); }).find("already exists"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              pg->new_group({0, 1}, "two");
            }).find("outside the world of size 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pg->new_group({}, "none"); }).find("has no ranks"), std::string::npos);
}

TEST(DistSingleProcess, AskingForNcclWithoutCudaIsAClearError) {
  if (at::hasCUDA()) GTEST_SKIP() << "CUDA build: NCCL may be available";
  InitOptions options;
  options.backend = Backend::kNccl;
  auto msg = error_of([&] { ProcessGroups::init(RendezvousInfo{}, options); });
  EXPECT_NE(msg.find("nccl"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gloo"), std::string::npos) << msg;  // says what to use instead
}

}  // namespace
}  // namespace furlong::dist
