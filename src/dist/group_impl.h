// Internal to src/dist: the state behind Group and Work, shared by group.cpp (collectives) and
// process_groups.cpp (which creates groups).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace furlong::dist::detail {

// Shared by a ProcessGroups and every group it made. `failed` is set once any collective or group
// creation failed: the peers are then presumed gone, so shutdown skips its exit handshake.
struct SharedState {
  std::atomic<bool> failed{false};
};

// What a failure message says about where it happened.
struct OpContext {
  std::string op;     // "all_reduce_sum", ...
  std::string group;  // group name
  int group_rank = 0;
  int group_size = 1;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<SharedState> state;
};

// Raises the furlong::Error for a failed collective: names the operation and group, says a peer
// may have died, and marks the run as failed.
[[noreturn]] void fail_collective(const OpContext& ctx, const std::string& cause);
// The message of a c10d/gloo exception without c10's backtrace.
std::string cause_of(const std::exception& e);

}  // namespace furlong::dist::detail

namespace furlong::dist {

struct Work::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  // Runs after completion (copies a staging buffer into the caller's tensor); may be empty.
  std::function<void()> finish;
  // Tensors the collective reads or writes, kept alive until it completes.
  std::vector<at::Tensor> keep_alive;
  detail::OpContext ctx;
  // Gloo: wait on the CPU with the group timeout. NCCL: wait() only orders the current stream
  // (its watchdog enforces the timeout), so no CPU deadline is passed.
  bool timed_wait = true;
  bool done = false;
};

struct Group::Impl {
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> global_ranks;
  c10::intrusive_ptr<c10d::Backend> backend;  // null for a single-rank group
  Backend kind = Backend::kGloo;
  c10::Device device{c10::kCPU};
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<detail::SharedState> state;
};

}  // namespace furlong::dist
