// Wall-clock timing for metrics: a Stopwatch, and a ScopedTimer that writes the seconds of its
// scope into a metrics map under a name ("perf/train_time") when the scope ends.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>

namespace furlong {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

class ScopedTimer {
 public:
  ScopedTimer(std::map<std::string, double>& metrics, std::string name)
      : metrics_(metrics), name_(std::move(name)) {}
  ~ScopedTimer() { metrics_[name_] = watch_.seconds(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  std::map<std::string, double>& metrics_;
  std::string name_;
  Stopwatch watch_;
};

}  // namespace furlong
