// A progress bar for long work (scoring, generation, training), drawn on stderr.
// On a terminal it redraws one line at most ~8 times a second; elsewhere (CI logs, files) it
// prints a plain line at every 10% so logs stay short. FURLONG_NO_PROGRESS=1 silences it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace furlong {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, std::string unit = "it");
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void advance(int64_t n = 1);
  // Extra text after the counters, e.g. "loss=1.23".
  void set_postfix(std::string text);
  void finish();

 private:
  void draw(bool final_draw);

  std::string label_;
  std::string unit_;
  std::string postfix_;
  int64_t total_;
  int64_t done_ = 0;
  int last_decile_ = -1;
  bool enabled_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace furlong
