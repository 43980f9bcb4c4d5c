// Heartbeat: finds a stopped or hung rank within seconds instead of at the collective timeout.
//
// Every rank bumps its counter key "furlong/heartbeat/<rank>" in the rendezvous store from a
// background thread, on its own store connection, every timeout / 6. Rank 0 also reads every
// rank's counter each beat; a counter that has not moved for `timeout` means that rank's
// process is stopped (SIGSTOP), hung outside user code, or gone. Every rank also watches its
// own beats: when none has reached the store for `timeout`, the store host (rank 0, or
// torchrun's agent) is the silent one. Either way the watcher logs an error naming the silent
// rank and ends this process (exit status kExitStatus), so that the launcher (or torchrun)
// stops the job; a collective the main thread is blocked in cannot be unblocked otherwise.
//
// Invariants: a busy rank is never reported (its beats come from a thread of their own, not
// from the training loop); a rank that shut down normally is never reported (the destructor
// marks its counter as "left" before the store can go away).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace furlong::dist {

class Heartbeat {
 public:
  static constexpr int kExitStatus = 75;
  // What the watcher does after logging (default: std::_Exit(kExitStatus)); for tests.
  using OnSilence = std::function<void(const std::string& message)>;

  // `store` is cloned (one connection of its own); `store_where` ("host:port") names the store
  // in messages.
  Heartbeat(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
            std::chrono::milliseconds timeout, std::string store_where, OnSilence on_silence = {});
  // Marks this rank as having left, then stops the threads.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void beat_loop();
  void watch_own_beats();
  void check_peers(std::chrono::steady_clock::time_point now);
  void report(const std::string& message);
  std::string key(int rank) const;

  c10::intrusive_ptr<c10d::Store> store_;
  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds interval_;
  const std::string store_where_;
  OnSilence on_silence_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::atomic<int64_t> last_beat_ns_{0};  // steady clock of the last beat the store took
  std::atomic<bool> reported_{false};
  // Rank 0: each peer's last counter value and when it last changed.
  std::vector<int64_t> seen_;
  std::vector<std::chrono::steady_clock::time_point> changed_at_;
  std::thread beater_, watcher_;
};

}  // namespace furlong::dist
