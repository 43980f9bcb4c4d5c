// The concurrency toolkit: the few patterns furlong's threads use, written once.
//   WorkerPool    a fixed set of threads running posted tasks in order of posting
//   Gather<T>     N results delivered once each from other threads; wait for all of them
//   FirstError    the first failure recorded by any thread, raised on the caller's
// Each is safe to use from any thread; none holds its lock while running caller code.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace furlong {

// Threads that run posted tasks, first posted first started. The destructor runs every task
// still queued, then joins. A task must not throw (it would end the process): catch inside.
class WorkerPool {
 public:
  explicit WorkerPool(int64_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  void post(std::function<void()> task);
  int64_t size() const { return static_cast<int64_t>(threads_.size()); }

 private:
  void work();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

// Results 0..n-1 of work handed to other threads ("submit a batch, wait for every callback").
// put(i, v) stores result i exactly once; take_all() blocks until all n are in.
template <class T>
class Gather {
 public:
  explicit Gather(size_t n) : slots_(n), filled_flags_(n, 0) {}
  // Stores result `i` (any thread); returns how many results are in, this one included.
  size_t put(size_t i, T value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (i >= slots_.size() || filled_flags_[i]) {
      throw std::logic_error("Gather::put: result " + std::to_string(i) +
                             (i >= slots_.size() ? " is out of range" : " was already put"));
    }
    slots_[i] = std::move(value);
    filled_flags_[i] = 1;
    const size_t in = ++filled_;
    if (in == slots_.size()) cv_.notify_all();
    return in;
  }
  // Blocks until every result is in, then hands them over (in index order).
  std::vector<T> take_all() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return filled_ == slots_.size(); });
    return std::move(slots_);
  }
  size_t size() const { return slots_.size(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<T> slots_;
  std::vector<char> filled_flags_;
  size_t filled_ = 0;
};

// The first error message any thread records; later ones are dropped.
class FirstError {
 public:
  void record(const std::string& message);
  bool empty() const;
  std::string message() const;  // "" when none was recorded

 private:
  mutable std::mutex mu_;
  std::string message_;
};

}  // namespace furlong
