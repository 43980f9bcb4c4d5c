// How the trainer starts a `furlong serve` engine server (remote_engines.cpp's ServerProcess):
// the command line from the rollout options, an environment without the trainer's rendezvous
// variables, and a child that dies with the trainer.
#pragma once

#include <string>

#include "dist/child_process.h"
#include "rollout/options.h"

namespace furlong::rollout {

// The child options of spawned engine server on 127.0.0.1:`port`, on CUDA device `device` as
// CUDA_VISIBLE_DEVICES names it ("" for the CPU).
dist::ChildOptions engine_server_child_options(const RolloutConfig& o, int port,
                                               const std::string& device);

}  // namespace furlong::rollout
