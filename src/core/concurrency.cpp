#include "core/concurrency.h"

namespace furlong {

WorkerPool::WorkerPool(int64_t threads) {
  threads_.reserve(static_cast<size_t>(threads));
  for (int64_t i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void WorkerPool::work() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closing_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // closing, and the queue is drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void FirstError::record(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (message_.empty()) message_ = message.empty() ? "unknown error" : message;
}

bool FirstError::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return message_.empty();
}

std::string FirstError::message() const {
  std::lock_guard<std::mutex> lock(mu_);
  return message_;
}

}  // namespace furlong
