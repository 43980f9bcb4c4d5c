// Heartbeat (see heartbeat.h). Two threads per rank: the beater (bumps this rank's counter;
// on rank 0 also reads the others') and the watcher (notices when this rank's own beats stop
// reaching the store). Neither touches the process groups, so a rank blocked in a collective
// still beats and its watcher still runs.
#include "dist/heartbeat.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"

namespace furlong::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Added to a counter when its rank shuts down normally: values at or above it mean "left".
constexpr int64_t kLeft = int64_t{1} << 40;

int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string seconds_text(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

Heartbeat::Heartbeat(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                     std::chrono::milliseconds timeout, std::string store_where,
                     OnSilence on_silence)
    : store_(store->clone()),
      rank_(rank),
      world_size_(world_size),
      timeout_(timeout),
      interval_(std::max(std::chrono::milliseconds(100), timeout / 6)),
      store_where_(std::move(store_where)),
      on_silence_(std::move(on_silence)) {
  const auto now = Clock::now();
  last_beat_ns_ = to_ns(now);
  seen_.assign(static_cast<size_t>(world_size_), -1);
  changed_at_.assign(static_cast<size_t>(world_size_), now);
  beater_ = std::thread([this] { beat_loop(); });
  watcher_ = std::thread([this] { watch_own_beats(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  beater_.join();
  watcher_.join();
}

std::string Heartbeat::key(int rank) const {
  return "furlong/heartbeat/" + std::to_string(rank);
}

void Heartbeat::beat_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    try {
      store_->add(key(rank_), 1);
      const auto now = Clock::now();
      last_beat_ns_ = to_ns(now);
      if (rank_ == 0) check_peers(now);
    } catch (const std::exception& e) {
      // The watcher reports a store that stays unreachable; one failure may be transient.
      LOG_DEBUG("dist: heartbeat to the store at ", store_where_, " failed: ", e.what());
    }
    lock.lock();
    cv_.wait_for(lock, interval_, [&] { return stopping_; });
  }
  lock.unlock();
  try {
    store_->add(key(rank_), kLeft);  // so that rank 0 does not take a clean exit for silence
  } catch (const std::exception&) {
  }
}

void Heartbeat::check_peers(Clock::time_point now) {
  for (int r = 1; r < world_size_; ++r) {
    const int64_t count = store_->add(key(r), 0);
    if (count >= kLeft) continue;
    if (count != seen_[r]) {
      seen_[r] = count;
      changed_at_[r] = now;
    } else if (now - changed_at_[r] > timeout_) {
      report("dist: rank " + std::to_string(r) + " sent no heartbeat for " +
             seconds_text(now - changed_at_[r]) +
             " (its process is stopped, hung or gone; the bound is the heartbeat timeout); "
             "rank 0 ends so that the job stops");
    }
  }
}

void Heartbeat::watch_own_beats() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [&] { return stopping_; })) {
    const auto silent = Clock::now() - Clock::time_point(std::chrono::nanoseconds(last_beat_ns_));
    if (silent > timeout_) {
      lock.unlock();
      report("dist: rank " + std::to_string(rank_) +
             ": no heartbeat reached the rendezvous store at " + store_where_ + " for " +
             seconds_text(silent) +
             ": its host (rank 0, or torchrun's agent) is stopped, hung or gone; rank " +
             std::to_string(rank_) + " ends so that the job stops");
      lock.lock();
    }
  }
}

void Heartbeat::report(const std::string& message) {
  if (reported_.exchange(true)) return;
  LOG_ERROR(message);
  if (on_silence_) {
    on_silence_(message);
    return;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kExitStatus);
}

}  // namespace furlong::dist
