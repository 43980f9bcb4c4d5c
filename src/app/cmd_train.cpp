// furlong train: the training job: the RL loop (--loss-type policy_loss, the default) or
// supervised fine-tuning (--loss-type sft_loss), with the FSDP backend; every rank runs this
// (torchrun --no-python, srun or furlong launch). With --actor-num-nodes /
// --actor-num-gpus-per-node outside a launched world, it starts its node's ranks itself.
#include "app/common.h"
#include "core/log.h"
#include "dist/launch_env.h"
#include "dist/launcher.h"
#include "train/rl_trainer.h"
#include "train/sft_trainer.h"

namespace furlong::app {
namespace {

// Starts this node's ranks of `furlong train` with the same arguments; each of them finds its
// world in the environment and trains. Returns the launch's exit status.
int spawn_node_ranks(const dist::Placement& p, const std::vector<std::string>& args) {
  dist::LaunchOptions launch;
  launch.nproc_per_node = p.ranks_per_node;
  launch.num_nodes = p.num_nodes;
  launch.node_rank = p.node_rank;
  launch.master_addr = p.master_addr;
  launch.master_port = p.master_port;
  // /proc/self/exe, not the path it links to: each rank runs this very binary, even when the
  // file at that path is replaced (a rebuild) while the ranks start.
  launch.command = {"/proc/self/exe", "train"};
  launch.command.insert(launch.command.end(), args.begin(), args.end());
  LOG_INFO("placement: node ", p.node_rank, " of ", p.num_nodes, " starts ", p.ranks_per_node,
           " training ranks (world ", p.num_nodes * p.ranks_per_node, ", rendezvous ",
           p.master_addr, p.master_port != 0 ? ":" + std::to_string(p.master_port) : "", "; from ",
           p.source, ")");
  return dist::launch(launch);
}

}  // namespace

int run_train(const std::vector<std::string>& args) {
  TrainCommandOptions command;
  auto& o = command.train;
  config::FlagSet flags("furlong train",
                        "RL (--loss-type policy_loss, default) or SFT (--loss-type sft) of a HF "
                        "model with the FSDP backend (run on every rank: torchrun "
                        "--no-python ..., srun, furlong launch, or --actor-num-gpus-per-node).");
  register_flags(flags, command);
  if (!flags.parse(args)) return 0;
  {  // Fails fast, before any rank starts; its lines come once, from the run's rank 0 below.
    auto checked = o;
    apply_miles_compat(command.compat, checked, /*log=*/false);
    train::prepare_options_before_launch(checked, /*log=*/false);
  }
  const auto& place = o.placement;
  if (place.actor_num_nodes != 0 || place.actor_num_gpus_per_node != 0) {
    FURLONG_CHECK(place.actor_num_nodes >= 0 && place.actor_num_nodes <= 65536,
                  "--actor-num-nodes must be 1..65536, got ", place.actor_num_nodes);
    FURLONG_CHECK(place.actor_num_gpus_per_node >= 0 && place.actor_num_gpus_per_node <= 4096,
                  "--actor-num-gpus-per-node must be 1..4096, got ", place.actor_num_gpus_per_node);
    auto p = dist::resolve_placement(static_cast<int>(std::max<int64_t>(place.actor_num_nodes, 1)),
                                     static_cast<int>(place.actor_num_gpus_per_node),
                                     dist::process_env());
    if (p.spawn_local_ranks) return spawn_node_ranks(p, args);
  }
  apply_miles_compat(command.compat, o, is_first_rank_of_launch());
  train::prepare_options_before_launch(o, is_first_rank_of_launch());
  apply_runtime_options({.num_threads = o.logging.num_threads});
  if (o.batch.loss_type == train::LossType::kPolicyLoss) return train::run_rl(o);
  return train::run_sft(o);
}

}  // namespace furlong::app
