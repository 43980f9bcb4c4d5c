#include "rollout/background_rollout.h"

#include <chrono>
#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace furlong::rollout {

BackgroundRollout::~BackgroundRollout() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundRollout::start(int64_t rollout_id, std::function<RolloutResult()> collect) {
  FURLONG_ASSERT(!pending() && !thread_.joinable(),
                 "internal: a background rollout is already running");
  rollout_id_ = rollout_id;
  result_.reset();
  error_ = nullptr;
  thread_ = std::thread([this, collect = std::move(collect)] {
    try {
      result_ = collect();
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

RolloutResult BackgroundRollout::join(double* waited_seconds) {
  FURLONG_ASSERT(pending(), "internal: no background rollout to join");
  const auto t0 = std::chrono::steady_clock::now();
  thread_.join();
  if (waited_seconds != nullptr) {
    *waited_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  rollout_id_.reset();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  RolloutResult result = std::move(*result_);
  result_.reset();
  return result;
}

}  // namespace furlong::rollout
