// --train-async: rank 0 generates the next rollout on a background thread while every rank
// trains on the current one (miles' train_async.py). This class owns that thread: start() runs
// one collection, join() waits for it and hands over its result (or rethrows its error on the
// caller's thread). Weight syncs, broadcasts and other collectives stay on the main thread;
// the trainer joins before each weight sync, so no sync ever happens mid-generation.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <thread>

#include "rollout/rollout_collector.h"

namespace furlong::rollout {

class BackgroundRollout {
 public:
  BackgroundRollout() = default;
  BackgroundRollout(const BackgroundRollout&) = delete;
  BackgroundRollout& operator=(const BackgroundRollout&) = delete;
  // Waits for a collection still running (its result or error is dropped).
  ~BackgroundRollout();

  // Starts `collect` for rollout `rollout_id` (none may be running or unjoined).
  void start(int64_t rollout_id, std::function<RolloutResult()> collect);
  // True between start() and join().
  bool pending() const { return rollout_id_.has_value(); }
  // The rollout id of the pending collection (pending() must hold).
  int64_t rollout_id() const { return *rollout_id_; }
  // Waits for the pending collection; returns its result or rethrows what it threw.
  // `waited_seconds` gets the time spent waiting here.
  RolloutResult join(double* waited_seconds = nullptr);

 private:
  std::thread thread_;
  std::optional<int64_t> rollout_id_;
  std::optional<RolloutResult> result_;
  std::exception_ptr error_;
};

}  // namespace furlong::rollout
