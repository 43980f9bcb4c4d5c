// furlong launch --nproc-per-node N -- <subcommand or program> [args...]: starts N local ranks
// with the torchrun environment and ends all of them if one fails.
#include <unistd.h>

#include <climits>

#include "app/common.h"
#include "dist/launcher.h"

namespace furlong::app {
namespace {

std::string self_path() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  FURLONG_CHECK(n > 0, "cannot find the furlong binary (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

bool is_subcommand(const std::string& name) {
  for (const auto& c : commands())
    if (c.name == name) return true;
  return false;
}

}  // namespace

int run_launch(const std::vector<std::string>& args) {
  auto sep = std::find(args.begin(), args.end(), "--");
  LaunchFlags o;
  config::FlagSet flags("furlong launch",
                        "Start N local ranks of a command: furlong launch --nproc-per-node N -- "
                        "train --hf-checkpoint ...");
  register_flags(flags, o);
  if (!flags.parse(std::vector<std::string>(args.begin(), sep))) return 0;
  FURLONG_CHECK(sep != args.end() && sep + 1 != args.end(),
                "furlong launch: give the command after --, e.g. furlong launch "
                "--nproc-per-node 2 -- train --hf-checkpoint DIR ...");
  FURLONG_CHECK(o.nproc_per_node >= 1 && o.nproc_per_node <= 4096,
                "--nproc-per-node must be between 1 and 4096, got ", o.nproc_per_node);
  FURLONG_CHECK(o.master_port >= 0 && o.master_port <= 65535,
                "--master-port must be between 0 (pick a free port) and 65535, got ",
                o.master_port);
  dist::LaunchOptions launch;
  launch.nproc_per_node = static_cast<int>(o.nproc_per_node);
  launch.master_addr = o.master_addr;
  launch.master_port = static_cast<int>(o.master_port);
  launch.command.assign(sep + 1, args.end());
  if (is_subcommand(launch.command[0])) launch.command.insert(launch.command.begin(), self_path());
  return dist::launch(launch);
}

}  // namespace furlong::app
