// The launch environment without launching anything: Slurm's variables and node lists, the
// refusal of partial environments, and how --actor-num-nodes / --actor-num-gpus-per-node place
// ranks (dist/launch_env.h). Every case passes its own variables (map_env), so the process's
// environment (a CI job under Slurm, say) cannot change the outcome.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "dist/launch_env.h"
#include "dist/net_addr.h"

namespace furlong::dist {
namespace {

using furlong::testing::error_of;
using Vars = std::map<std::string, std::string>;

std::string rendezvous_error(const Vars& vars) {
  return error_of([&] { rendezvous_from(map_env(vars)); });
}

TEST(SlurmNodelist, ExpandsRangesListsPaddingAndProducts) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("node01"), V{"node01"});
  EXPECT_EQ(expand_slurm_nodelist("a,b,c"), (V{"a", "b", "c"}));
  EXPECT_EQ(expand_slurm_nodelist("node[01-04,07]"),
            (V{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_slurm_nodelist("n[8-11]"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand_slurm_nodelist("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_nodelist("gpu[1,3],cpu7,io[2-3]"),
            (V{"gpu1", "gpu3", "cpu7", "io2", "io3"}));
  EXPECT_EQ(expand_slurm_nodelist("rack[1-2]-n[01-02]"),
            (V{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}));
  EXPECT_EQ(expand_slurm_nodelist("x[5]-ib"), V{"x5-ib"});
  EXPECT_EQ(expand_slurm_nodelist("node-1.cluster,node-2.cluster"),
            (V{"node-1.cluster", "node-2.cluster"}));
  EXPECT_EQ(expand_slurm_nodelist("n[0-99999]", 200000).size(), 100000u);
}

TEST(SlurmNodelist, FirstHostNeedsNoExpansion) {
  EXPECT_EQ(first_slurm_host("node[01-04,07]"), "node01");
  EXPECT_EQ(first_slurm_host("node[07,01-04]"), "node07");
  EXPECT_EQ(first_slurm_host("gpu-a,gpu-b"), "gpu-a");
  EXPECT_EQ(first_slurm_host("rack[3-4]-n[009-010],z"), "rack3-n009");
  EXPECT_EQ(first_slurm_host("n[0-999999999]"), "n0");  // not expanded
  EXPECT_EQ(first_slurm_host("solo"), "solo");
}

TEST(SlurmNodelist, MalformedListsAreErrorsQuotingTheList) {
  for (const std::string bad :
       {"node[01-04", "node01-04]", "node[a-b]", "node[04-01]", "a,,b", "node[]", "n[[1]]", ""}) {
    auto msg = error_of([&] { expand_slurm_nodelist(bad); });
    EXPECT_NE(msg.find("Slurm node list"), std::string::npos) << "'" << bad << "': " << msg;
    if (!bad.empty()) {
      EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    }
  }
  auto msg = error_of([] { expand_slurm_nodelist("n[1-10]", 5); });
  EXPECT_NE(msg.find("names more than 5 hosts"), std::string::npos) << msg;
}

TEST(SlurmTasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), std::vector<int>{4});
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("1,8(x2)"), (std::vector<int>{1, 8, 8}));
  for (const std::string bad : {"", "x", "2(x)", "2(x3", "0", "2,,1", "-1"}) {
    auto msg = error_of([&] { expand_slurm_tasks_per_node(bad); });
    EXPECT_NE(msg.find("SLURM_TASKS_PER_NODE"), std::string::npos) << "'" << bad << "': " << msg;
  }
}

TEST(SlurmEnv, ReadsAnSrunTaskWithTheMasterFromTheNodeList) {
  auto info = rendezvous_from(map_env({{"SLURM_PROCID", "5"},
                                       {"SLURM_NTASKS", "8"},
                                       {"SLURM_LOCALID", "1"},
                                       {"SLURM_NODEID", "1"},
                                       {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                       {"SLURM_JOB_NODELIST", "node[07-08]"},
                                       {"SLURM_JOB_ID", "123456"}}));
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.master_addr, "node07");
  EXPECT_EQ(info.master_port, 20000 + 123456 % 20000);
  EXPECT_FALSE(info.agent_store);
}

TEST(SlurmEnv, MasterVariablesAndTheStepListWin) {
  Vars base = {{"SLURM_PROCID", "0"},          {"SLURM_NTASKS", "2"},
               {"SLURM_LOCALID", "0"},         {"SLURM_NTASKS_PER_NODE", "1"},
               {"SLURM_NODELIST", "job[1-4]"}, {"SLURM_STEP_NODELIST", "job[3-4]"}};
  auto info = rendezvous_from(map_env(base));
  EXPECT_EQ(info.master_addr, "job3");  // the step's first node runs task 0
  EXPECT_EQ(info.master_port, 29500);   // no job id
  EXPECT_EQ(info.local_world_size, 1);
  base["MASTER_ADDR"] = "10.1.2.3";
  base["MASTER_PORT"] = "31000";
  info = rendezvous_from(map_env(base));
  EXPECT_EQ(info.master_addr, "10.1.2.3");
  EXPECT_EQ(info.master_port, 31000);
}

TEST(SlurmEnv, UnevenNodesNeedTheNodeId) {
  Vars v = {{"SLURM_PROCID", "4"},
            {"SLURM_NTASKS", "5"},
            {"SLURM_LOCALID", "0"},
            {"SLURM_TASKS_PER_NODE", "2(x2),1"},
            {"SLURM_NODELIST", "a,b,c"}};
  auto msg = rendezvous_error(v);
  EXPECT_NE(msg.find("differs between nodes and SLURM_NODEID is not set"), std::string::npos)
      << msg;
  v["SLURM_NODEID"] = "2";
  EXPECT_EQ(rendezvous_from(map_env(v)).local_world_size, 1);
}

TEST(SlurmEnv, TorchrunVariablesWinOverSlurms) {
  auto info = rendezvous_from(map_env({{"RANK", "1"},
                                       {"WORLD_SIZE", "2"},
                                       {"MASTER_ADDR", "127.0.0.1"},
                                       {"MASTER_PORT", "29501"},
                                       {"SLURM_PROCID", "0"},
                                       {"SLURM_NTASKS", "1"},
                                       {"SLURM_LOCALID", "0"}}));
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.world_size, 2);
}

TEST(SlurmEnv, APartialEnvironmentIsRefusedNamingWhatIsMissing) {
  auto msg = rendezvous_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}});
  EXPECT_NE(msg.find("the Slurm environment is incomplete: SLURM_LOCALID not set"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("will not run as a world of one"), std::string::npos) << msg;
  msg = rendezvous_error({{"SLURM_NTASKS", "4"}});
  EXPECT_NE(msg.find("SLURM_PROCID, SLURM_LOCALID not set"), std::string::npos) << msg;
  msg = rendezvous_error({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}});
  EXPECT_NE(msg.find("SLURM_PROCID=4 must be less than SLURM_NTASKS=4"), std::string::npos) << msg;
  msg = rendezvous_error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}});
  EXPECT_NE(msg.find("no MASTER_ADDR and no node list"), std::string::npos) << msg;
  msg = rendezvous_error({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}});
  EXPECT_NE(msg.find("SLURM_PROCID='x' is not an integer"), std::string::npos) << msg;
  msg = rendezvous_error({{"SLURM_PROCID", "0"},
                          {"SLURM_NTASKS", "4"},
                          {"SLURM_LOCALID", "2"},
                          {"SLURM_NTASKS_PER_NODE", "2"},
                          {"SLURM_NODELIST", "a,b"}});
  EXPECT_NE(msg.find("SLURM_LOCALID=2 must be less than the tasks on this node (2)"),
            std::string::npos)
      << msg;
  // A salloc shell (a job, no task) is a single process, as before.
  EXPECT_EQ(rendezvous_from(map_env({{"SLURM_JOB_ID", "7"}, {"SLURM_NODELIST", "a"}})).world_size,
            1);
}

// ----- --actor-num-nodes / --actor-num-gpus-per-node -----

TEST(Placement, NoEnvironmentSpawnsLocalRanksOnLoopback) {
  auto p = resolve_placement(1, 4, map_env({}));
  EXPECT_TRUE(p.spawn_local_ranks);
  EXPECT_EQ(p.ranks_per_node, 4);
  EXPECT_EQ(p.num_nodes, 1);
  EXPECT_EQ(p.master_addr, "127.0.0.1");
  EXPECT_EQ(p.master_port, 0);
  EXPECT_FALSE(resolve_placement(1, 1, map_env({})).spawn_local_ranks);
  EXPECT_FALSE(resolve_placement(1, 0, map_env({})).spawn_local_ranks);
  auto msg = error_of([] { resolve_placement(2, 2, map_env({})); });
  EXPECT_NE(msg.find("--actor-num-nodes 2 needs a multi-node launch environment"),
            std::string::npos)
      << msg;
}

TEST(Placement, ALaunchedWorldMustMatch) {
  Vars torchrun = {{"RANK", "3"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "10.0.0.1"},
                   {"MASTER_PORT", "29500"}};
  auto p = resolve_placement(2, 2, map_env(torchrun));
  EXPECT_FALSE(p.spawn_local_ranks);
  EXPECT_EQ(p.node_rank, 1);
  EXPECT_EQ(resolve_placement(2, 0, map_env(torchrun)).ranks_per_node, 2);
  auto msg = error_of([&] { resolve_placement(1, 8, map_env(torchrun)); });
  EXPECT_NE(msg.find("--actor-num-nodes 1 x --actor-num-gpus-per-node 8 = 8 ranks, but this "
                     "process is rank 3 of a world of 4"),
            std::string::npos)
      << msg;
  msg = error_of([&] { resolve_placement(1, 4, map_env(torchrun)); });
  EXPECT_NE(msg.find("started 2 ranks on this node"), std::string::npos) << msg;
  // Without LOCAL_WORLD_SIZE the ranks per node are unknown, so only the world is checked.
  torchrun.erase("LOCAL_WORLD_SIZE");
  torchrun.erase("LOCAL_RANK");
  EXPECT_FALSE(resolve_placement(2, 2, map_env(torchrun)).spawn_local_ranks);
  msg = error_of([&] { resolve_placement(3, 0, map_env(torchrun)); });
  EXPECT_NE(msg.find("does not divide the launched world of 4"), std::string::npos) << msg;
}

TEST(Placement, SlurmWithOneTaskPerRankOrPerNode) {
  Vars per_rank = {{"SLURM_PROCID", "2"},        {"SLURM_NTASKS", "4"},
                   {"SLURM_LOCALID", "0"},       {"SLURM_NTASKS_PER_NODE", "2"},
                   {"SLURM_NODELIST", "h[1-2]"}, {"SLURM_JOB_ID", "42"}};
  auto p = resolve_placement(2, 2, map_env(per_rank));
  EXPECT_FALSE(p.spawn_local_ranks);
  Vars per_node = {{"SLURM_PROCID", "1"},        {"SLURM_NTASKS", "2"},
                   {"SLURM_LOCALID", "0"},       {"SLURM_TASKS_PER_NODE", "1(x2)"},
                   {"SLURM_NODELIST", "h[1-2]"}, {"SLURM_JOB_ID", "42"}};
  p = resolve_placement(2, 4, map_env(per_node));
  EXPECT_TRUE(p.spawn_local_ranks);
  EXPECT_EQ(p.node_rank, 1);
  EXPECT_EQ(p.num_nodes, 2);
  EXPECT_EQ(p.ranks_per_node, 4);
  EXPECT_EQ(p.master_addr, "h1");
  EXPECT_EQ(p.master_port, 20042);
  auto msg = error_of([&] { resolve_placement(3, 4, map_env(per_node)); });
  EXPECT_NE(msg.find("but Slurm started 2 tasks"), std::string::npos) << msg;
  per_node["SLURM_TASKS_PER_NODE"] = "2";
  per_node["SLURM_LOCALID"] = "1";
  msg = error_of([&] { resolve_placement(2, 4, map_env(per_node)); });
  EXPECT_NE(msg.find("use srun --ntasks-per-node 1"), std::string::npos) << msg;
}

TEST(Placement, NodeRankWithMasterAddressAndPort) {
  Vars v = {{"NODE_RANK", "1"}, {"MASTER_ADDR", "10.9.0.1"}, {"MASTER_PORT", "29555"}};
  auto p = resolve_placement(2, 2, map_env(v));
  EXPECT_TRUE(p.spawn_local_ranks);
  EXPECT_EQ(p.node_rank, 1);
  EXPECT_EQ(p.master_addr, "10.9.0.1");
  EXPECT_EQ(p.master_port, 29555);
  auto msg = error_of([] { resolve_placement(2, 2, map_env({{"NODE_RANK", "2"}})); });
  EXPECT_NE(msg.find("NODE_RANK='2' must be a node index 0..1"), std::string::npos) << msg;
  msg = error_of([] {
    resolve_placement(2, 2, map_env({{"NODE_RANK", "0"}, {"MASTER_ADDR", "10.9.0.1"}}));
  });
  EXPECT_NE(msg.find("MASTER_PORT not set"), std::string::npos) << msg;
  msg = error_of([] { resolve_placement(2, 2, map_env({{"NODE_RANK", "1"}})); });
  EXPECT_NE(msg.find("MASTER_ADDR and MASTER_PORT not set"), std::string::npos) << msg;
}

TEST(EngineDevices, EachEngineGetsTheNextDeviceAfterTheTrainers) {
  // 8 devices, 4 training ranks on cuda:0-3: engines 0..3 on 4..7, then wrapping (shared).
  EXPECT_EQ(engine_cuda_device(0, 4, 8, std::nullopt).device, "4");
  EXPECT_EQ(engine_cuda_device(3, 4, 8, std::nullopt).device, "7");
  EXPECT_FALSE(engine_cuda_device(3, 4, 8, std::nullopt).shared);
  auto wrapped = engine_cuda_device(4, 4, 8, std::nullopt);
  EXPECT_EQ(wrapped.device, "0");
  EXPECT_TRUE(wrapped.shared);
  // Through the caller's CUDA_VISIBLE_DEVICES (indices or UUIDs).
  EXPECT_EQ(engine_cuda_device(0, 1, 2, std::string("6,7")).device, "7");
  EXPECT_EQ(engine_cuda_device(1, 1, 3, std::string("GPU-a,GPU-b,GPU-c")).device, "GPU-c");
  // One GPU, one trainer: the engine shares it.
  auto one = engine_cuda_device(0, 1, 1, std::nullopt);
  EXPECT_EQ(one.device, "0");
  EXPECT_TRUE(one.shared);
  // A CPU host: no device.
  EXPECT_EQ(engine_cuda_device(0, 1, 0, std::nullopt).device, "");
  EXPECT_FALSE(engine_cuda_device(0, 1, 0, std::nullopt).shared);
}

TEST(NetAddr, LoopbackAndTheRouteToALocalAddress) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("localhost"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  EXPECT_EQ(local_address_towards("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(local_address_towards("127.0.0.5"), "127.0.0.1");
  EXPECT_EQ(interface_address("lo"), "127.0.0.1");
  auto msg = error_of([] { interface_address("no-such-if0"); });
  EXPECT_NE(msg.find("'no-such-if0' (GLOO_SOCKET_IFNAME) has no IPv4 address"), std::string::npos)
      << msg;
  msg = error_of([] { local_address_towards("no-such-host.invalid"); });
  EXPECT_NE(msg.find("cannot resolve 'no-such-host.invalid'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace furlong::dist
