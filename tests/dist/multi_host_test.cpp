// Multi-host runs on one machine: two network namespaces ("hosts" a and b) joined by a veth
// pair with private addresses 10.213.N.1 / 10.213.N.2 that only they see, each with its own
// loopback, so nothing but that link connects them. The ranks run inside with `ip netns exec`;
// loopback cannot carry anything between hosts, so a run that completes went over the veth
// link (rendezvous store, Gloo, HTTP and the weight-sync group alike).
//
//   HSDP: 2 hosts x 2 ranks (dp_replicate 2 x dp_shard 2) of SFT, started per host by
//     `furlong train --actor-num-nodes 2 --actor-num-gpus-per-node 2` with NODE_RANK (and, in
//     the second case, as 4 Slurm tasks, 2 per host, the master from SLURM_JOB_NODELIST and the
//     port from SLURM_JOB_ID), gives bit-identical losses and grad norms to the same run on one
//     host: the same 4 ranks in the same mesh run the same kernels and the same Gloo
//     reductions in the same order; only the transport differs, which moves bytes, not values.
//   Disaggregated RL: `furlong serve` on host b, the trainer on host a with
//     --rollout-engine-urls http://10.213.N.2:PORT, three rollouts with
//     --check-weight-update-equal (the engine's weight digest must equal the trainer's after
//     every sync, else the run fails); once more with --rollout-master-addr naming host a's
//     second address on the link, which the group must then form at.
//
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) for `ip netns`; without it every case skips, saying
// why. Namespaces are named furlong-t-<pid>-<case>-{a,b}; they are removed when the test ends (also
// on failure), and stale ones from an earlier run of this test whose process is gone are removed
// first.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/arith_task.h"
#include "common/rl_flags.h"
#include "common/test_util.h"
#include "core/json_util.h"

namespace furlong::testing {
namespace {

namespace fs = std::filesystem;

std::string sh(const std::string& cmd) {
  auto r = run_command(cmd + " 2>&1");
  return r.exit_code == 0 ? r.output : "";
}

// Two namespaces and the veth pair between them; removed (with every process inside) on
// destruction.
class TwoHosts {
 public:
  TwoHosts() : pid_(::getpid()) {
    remove_stale();
    // Fresh names and subnet per instance: the kernel removes a deleted namespace's veth pair
    // asynchronously, so the next case must not reuse its names.
    static int instances = 0;
    const int n = instances++;
    const int net = static_cast<int>((pid_ * 7 + n) % 250) + 1;
    addr_a_ = "10.213." + std::to_string(net) + ".1";
    addr_b_ = "10.213." + std::to_string(net) + ".2";
    addr_a2_ = "10.213." + std::to_string(net) + ".3";
    const std::string id = std::to_string(pid_) + "-" + std::to_string(n);
    ns_a_ = "furlong-t-" + id + "-a";
    ns_b_ = "furlong-t-" + id + "-b";
    const std::string veth_a = "flt" + std::to_string(pid_) + std::to_string(n % 10) + "a";
    const std::string veth_b = "flt" + std::to_string(pid_) + std::to_string(n % 10) + "b";
    auto add = run_command("ip netns add " + ns_a_ + " 2>&1");
    if (add.exit_code != 0) {
      skip_reason_ =
          "cannot create a network namespace (`ip netns add` needs root / "
          "CAP_SYS_ADMIN): " +
          add.output;
      return;
    }
    created_ = true;
    const std::vector<std::string> steps = {
        "ip netns add " + ns_b_,
        "ip link add " + veth_a + " type veth peer name " + veth_b,
        "ip link set " + veth_a + " netns " + ns_a_,
        "ip link set " + veth_b + " netns " + ns_b_,
        "ip -n " + ns_a_ + " addr add " + addr_a_ + "/24 dev " + veth_a,
        "ip -n " + ns_b_ + " addr add " + addr_b_ + "/24 dev " + veth_b,
        "ip -n " + ns_a_ + " addr add " + addr_a2_ + "/24 dev " + veth_a,
        "ip -n " + ns_a_ + " link set " + veth_a + " up",
        "ip -n " + ns_b_ + " link set " + veth_b + " up",
        "ip -n " + ns_a_ + " link set lo up",
        "ip -n " + ns_b_ + " link set lo up"};
    for (const auto& step : steps) {
      auto r = run_command(step + " 2>&1");
      if (r.exit_code != 0) {
        skip_reason_ = "setting up the namespaces failed at `" + step + "`: " + r.output;
        return;
      }
    }
  }
  ~TwoHosts() {
    if (!created_) return;
    for (const auto& ns : {ns_a_, ns_b_}) {
      run_command("for p in $(ip netns pids " + ns + " 2>/dev/null); do kill -9 $p; done");
      run_command("ip netns del " + ns + " 2>/dev/null");
    }
  }
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  const std::string& skip_reason() const { return skip_reason_; }
  const std::string& ns_a() const { return ns_a_; }
  const std::string& ns_b() const { return ns_b_; }
  const std::string& addr_a() const { return addr_a_; }
  const std::string& addr_b() const { return addr_b_; }
  const std::string& addr_a2() const { return addr_a2_; }  // a second address of host a
  // A prefix that runs a command on a host, killed after `seconds`.
  std::string on(const std::string& ns, int seconds) const {
    return "ip netns exec " + ns + " timeout -k 5 " + std::to_string(seconds) + " ";
  }

 private:
  // furlong-t-<pid>-* namespaces whose test process no longer runs.
  static void remove_stale() {
    std::istringstream names(sh("ip netns list"));
    for (std::string line; std::getline(names, line);) {
      std::string name = line.substr(0, line.find(' '));
      if (name.rfind("furlong-t-", 0) != 0) continue;
      const std::string rest = name.substr(10);
      const long pid = std::strtol(rest.c_str(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0) continue;  // still running
      run_command("for p in $(ip netns pids " + name + " 2>/dev/null); do kill -9 $p; done");
      run_command("ip netns del " + name + " 2>/dev/null");
    }
  }

  pid_t pid_;
  bool created_ = false;
  std::string skip_reason_;
  std::string ns_a_, ns_b_, addr_a_, addr_b_, addr_a2_;
};

#define SKIP_WITHOUT_NAMESPACES(hosts)                                    \
  if (!(hosts).skip_reason().empty()) {                                   \
    std::cerr << "[ SKIPPED  ] " << (hosts).skip_reason() << std::endl;   \
    GTEST_SKIP() << "multi-host test skipped: " << (hosts).skip_reason(); \
  }

// A tiny random Qwen3 (the arithmetic tokenizer, 32 embedding rows), SFT rows and RL prompts.
struct Fixture {
  fs::path root, model, sft_data, prompts;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.root = fresh_process_dir("dist", "multi_host");
    x.model = init_tiny_model(x.root, "model");
    x.sft_data = x.root / "sft.jsonl";
    x.prompts = x.root / "prompts.jsonl";
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> token(0, 19), len(2, 8);
    std::ofstream sft(x.sft_data);
    for (int i = 0; i < 24; ++i) {
      Json prompt = Json::array(), response = Json::array();
      for (int k = len(rng); k > 0; --k) prompt.push_back(token(rng));
      for (int k = len(rng); k > 0; --k) response.push_back(token(rng));
      sft << Json{{"prompt_ids", prompt}, {"response_ids", response}}.dump() << "\n";
    }
    write_arith_rows(x.prompts, threshold_row);
    return x;
  }();
  return f;
}

std::string join_quoted(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += shell_quote(a) + " ";
  return out;
}

// HSDP SFT: 3 steps of 8 rows, 4 ranks as dp_replicate 2 x dp_shard 2, fp32.
std::vector<std::string> hsdp_flags(const fs::path& metrics) {
  const auto& f = fixture();
  return {"--hf-checkpoint",
          f.model.string(),
          "--loss-type",
          "sft",
          "--prompt-data",
          f.sft_data.string(),
          "--global-batch-size",
          "8",
          "--micro-batch-size",
          "1",
          "--num-rollout",
          "3",
          "--dp-replicate-size",
          "2",
          "--compute-dtype",
          "float32",
          "--lr",
          "1e-3",
          "--clip-grad",
          "1.0",
          "--num-threads",
          "1",
          "--metrics-file",
          metrics.string()};
}

struct Step {
  double loss, grad_norm;
};

std::vector<Step> read_steps(const fs::path& file) {
  std::vector<Step> steps;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto row = Json::parse(line);
    steps.push_back({row.at("train/loss").get<double>(), row.at("train/grad_norm").get<double>()});
  }
  return steps;
}

// The one-host run: the same flags, 4 ranks through `furlong train --actor-num-gpus-per-node 4`.
const std::vector<Step>& one_host_reference() {
  static const std::vector<Step> steps = [] {
    auto dir = fixture().root / "one_host";
    fs::create_directories(dir);
    auto flags = hsdp_flags(dir / "metrics.jsonl");
    flags.insert(flags.end(), {"--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4"});
    auto r = run_command(
        "env -u RANK -u WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS -u "
        "SLURM_LOCALID -u NODE_RANK timeout -k 5 80 " +
        shell_quote(furlong_binary().string()) + " train " + join_quoted(flags) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_steps(dir / "metrics.jsonl");
  }();
  return steps;
}

// Runs `commands` (one per process, each already prefixed to run on its host) together;
// returns every process's exit status line and output.
CommandResult run_together(const std::vector<std::string>& commands, const fs::path& dir) {
  std::string script = "set -u\n";
  for (size_t i = 0; i < commands.size(); ++i) {
    script += commands[i] + " > " +
              shell_quote((dir / ("p" + std::to_string(i) + ".log")).string()) + " 2>&1 &\nP" +
              std::to_string(i) + "=$!\n";
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    const std::string n = std::to_string(i);
    script += "wait $P" + n + "; echo \"process " + n + " exit $?\"\n";
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    const std::string n = std::to_string(i);
    script += "echo '--- process " + n + " ---'; cat " +
              shell_quote((dir / ("p" + n + ".log")).string()) + "\n";
  }
  {
    std::ofstream out(dir / "run.sh");
    out << script;
  }
  return run_command("bash " + shell_quote((dir / "run.sh").string()) + " 2>&1");
}

int free_port() {
  std::random_device rd;
  return 21000 + static_cast<int>(rd() % 20000);  // inside fresh namespaces every port is free
}

void expect_same_steps(const std::vector<Step>& got, const std::vector<Step>& want,
                       const std::string& output) {
  ASSERT_EQ(want.size(), 3u) << "the one-host reference run failed";
  ASSERT_EQ(got.size(), want.size()) << output;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].loss, want[i].loss) << "loss at step " << i + 1;
    EXPECT_EQ(got[i].grad_norm, want[i].grad_norm) << "grad norm at step " << i + 1;
  }
}

// The environment of a process on a host: nothing inherited that would place it.
const char* kClean =
    "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "
    "-u SLURM_PROCID -u SLURM_NTASKS -u SLURM_LOCALID -u SLURM_NODELIST -u SLURM_JOB_NODELIST "
    "-u SLURM_STEP_NODELIST -u SLURM_TASKS_PER_NODE -u SLURM_NTASKS_PER_NODE -u SLURM_NODEID "
    "-u SLURM_JOB_ID -u NODE_RANK -u GLOO_SOCKET_IFNAME -u MILES_HOST_IP ";

TEST(MultiHost, HsdpOnTwoHostsWithNodeRankMatchesOneHostBitForBit) {
  TwoHosts hosts;
  SKIP_WITHOUT_NAMESPACES(hosts);
  const auto& want = one_host_reference();
  auto dir = scratch_dir();
  const int port = free_port();
  auto flags = hsdp_flags(dir / "metrics.jsonl");
  flags.insert(flags.end(), {"--actor-num-nodes", "2", "--actor-num-gpus-per-node", "2"});
  const std::string train = shell_quote(furlong_binary().string()) + " train " + join_quoted(flags);
  std::vector<std::string> commands;
  for (int node = 0; node < 2; ++node) {
    commands.push_back(hosts.on(node == 0 ? hosts.ns_a() : hosts.ns_b(), 80) + kClean +
                       "NODE_RANK=" + std::to_string(node) + " MASTER_ADDR=" + hosts.addr_a() +
                       " MASTER_PORT=" + std::to_string(port) + " " + train);
  }
  auto r = run_together(commands, dir);
  EXPECT_NE(r.output.find("process 0 exit 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("process 1 exit 0"), std::string::npos) << r.output;
  // Host b's ranks are 2 and 3 of the one world.
  EXPECT_NE(r.output.find("node 1 of 2 starts 2 training ranks (world 4"), std::string::npos)
      << r.output;
  expect_same_steps(read_steps(dir / "metrics.jsonl"), want, r.output);
}

TEST(MultiHost, HsdpAsFourSlurmTasksOnTwoHostsMatchesOneHostBitForBit) {
  TwoHosts hosts;
  SKIP_WITHOUT_NAMESPACES(hosts);
  const auto& want = one_host_reference();
  auto dir = scratch_dir();
  const int job_id = free_port() - 20000;  // the port Slurm's default derives is 20000 + id
  auto flags = hsdp_flags(dir / "metrics.jsonl");
  flags.insert(flags.end(), {"--actor-num-nodes", "2", "--actor-num-gpus-per-node", "2"});
  const std::string train = shell_quote(furlong_binary().string()) + " train " + join_quoted(flags);
  std::vector<std::string> commands;
  for (int task = 0; task < 4; ++task) {
    const int node = task / 2;
    commands.push_back(hosts.on(node == 0 ? hosts.ns_a() : hosts.ns_b(), 80) + kClean +
                       "SLURM_PROCID=" + std::to_string(task) + " SLURM_NTASKS=4 SLURM_LOCALID=" +
                       std::to_string(task % 2) + " SLURM_NODEID=" + std::to_string(node) +
                       " SLURM_TASKS_PER_NODE='2(x2)' SLURM_JOB_NODELIST=" + hosts.addr_a() + "," +
                       hosts.addr_b() + " SLURM_JOB_ID=" + std::to_string(job_id) +
                       " OMP_NUM_THREADS=1 " + train);
  }
  auto r = run_together(commands, dir);
  for (int task = 0; task < 4; ++task) {
    EXPECT_NE(r.output.find("process " + std::to_string(task) + " exit 0"), std::string::npos)
        << r.output;
  }
  expect_same_steps(read_steps(dir / "metrics.jsonl"), want, r.output);
}

// `furlong serve` on host b, three rollouts of the trainer on host a with `extra` flags; the
// weight-sync group must form at `master` and every rollout sync the whole model.
void run_disaggregated(const TwoHosts& hosts, const std::vector<std::string>& extra,
                       const std::string& master) {
  const auto& f = fixture();
  auto dir = scratch_dir();
  const int port = free_port();
  const std::string engine_url = "http://" + hosts.addr_b() + ":" + std::to_string(port);
  const std::string serve = hosts.on(hosts.ns_b(), 80) + kClean +
                            shell_quote(furlong_binary().string()) + " serve --hf-checkpoint " +
                            shell_quote(f.model.string()) + " --host " + hosts.addr_b() +
                            " --port " + std::to_string(port) + " --num-threads 1";
  // The threshold task's run, 3 rollouts of 4 prompts x 4 samples, unshuffled, against the
  // server on host b.
  const auto flags =
      threshold_grpo_flags(f.model, f.prompts, 3)
          .drop("--rollout-shuffle")
          .set("--rollout-batch-size", "4")
          .set("--n-samples-per-prompt", "4")
          .set("--global-batch-size", "16")
          .add(tiny_trainer_flags().drop("--adam-beta2").drop("--engine-num-threads"))
          .add({"--rollout-engine-urls", engine_url, "--check-weight-update-equal",
                "--engine-startup-timeout", "60", "--metrics-file",
                (dir / "metrics.jsonl").string()})
          .add(extra);
  // The trainer ends the server once it is done: kill whatever serves on host b.
  const std::string train = hosts.on(hosts.ns_a(), 80) + kClean +
                            shell_quote(furlong_binary().string()) + " train " +
                            join_quoted(flags) + "; STATUS=$?; for p in $(ip netns pids " +
                            hosts.ns_b() + "); do kill $p; done; exit $STATUS";
  auto r = run_together({"bash -c " + shell_quote(train), serve}, dir);
  EXPECT_NE(r.output.find("process 0 exit 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("weight-sync group formed with 1 engine(s) at " + master + ":"),
            std::string::npos)
      << r.output;
  std::ifstream in(dir / "metrics.jsonl");
  int rows = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    ++rows;
    // Every rollout synced the whole model (76160 fp32 parameters) to the engine.
    EXPECT_EQ(Json::parse(line).at("perf/update_weights_bytes").get<double>(), 76160.0 * 4);
  }
  EXPECT_EQ(rows, 3) << r.output;
}

TEST(MultiHost, DisaggregatedRlWithItsEngineOnTheOtherHostSyncsWeights) {
  TwoHosts hosts;
  SKIP_WITHOUT_NAMESPACES(hosts);
  // Without a flag the group's rendezvous is host a's address on the link, not loopback.
  run_disaggregated(hosts, {}, hosts.addr_a());
}

TEST(MultiHost, RolloutMasterAddrNamesTheWeightSyncAddress) {
  TwoHosts hosts;
  SKIP_WITHOUT_NAMESPACES(hosts);
  // Host a's second address on the link, which the route to host b would not pick.
  run_disaggregated(hosts, {"--rollout-master-addr", hosts.addr_a2()}, hosts.addr_a2());
}

// ----- the same rules through `furlong train`, on this host (no namespaces needed) -----

TEST(TrainPlacement, AWorldOfAnotherShapeIsRefusedBeforeAnythingLoads) {
  auto dir = scratch_dir();
  auto flags = hsdp_flags(dir / "metrics.jsonl");
  flags.insert(flags.end(), {"--actor-num-nodes", "1", "--actor-num-gpus-per-node", "3"});
  auto r = run_command(std::string(kClean) + "timeout -k 5 60 " +
                       shell_quote(furlong_binary().string()) + " launch --nproc-per-node 2 -- " +
                       shell_quote(furlong_binary().string()) + " train " + join_quoted(flags) +
                       " 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--actor-num-nodes 1 x --actor-num-gpus-per-node 3 = 3 ranks, but this "
                          "process is rank"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("of a world of 2"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "metrics.jsonl"));
}

// What srun used to do silently: every task a world of one, all writing one --save directory.
TEST(TrainPlacement, AnIncompleteSlurmEnvironmentIsRefused) {
  auto dir = scratch_dir();
  auto r = run_command(std::string(kClean) + "SLURM_PROCID=1 SLURM_NTASKS=4 timeout -k 5 60 " +
                       shell_quote(furlong_binary().string()) + " train " +
                       join_quoted(hsdp_flags(dir / "metrics.jsonl")) + " 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("the Slurm environment is incomplete: SLURM_LOCALID not set"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "metrics.jsonl"));
}

TEST(TrainPlacement, MoreThanOneNodeWithoutALaunchEnvironmentIsRefused) {
  auto dir = scratch_dir();
  auto flags = hsdp_flags(dir / "metrics.jsonl");
  flags.insert(flags.end(), {"--actor-num-nodes", "2", "--actor-num-gpus-per-node", "2"});
  auto r = run_command(std::string(kClean) + "timeout -k 5 60 " +
                       shell_quote(furlong_binary().string()) + " train " + join_quoted(flags) +
                       " 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--actor-num-nodes 2 needs a multi-node launch environment"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace furlong::testing
