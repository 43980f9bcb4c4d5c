// Progress of long work on stderr. ProgressBar: a bar for one piece of work (scoring,
// generation, training); on a terminal it redraws one line at most ~8 times a second, elsewhere
// (CI logs, files) it prints a plain line at every 10% so logs stay short; FURLONG_NO_PROGRESS=1
// silences it. StepProgress: the text of one summary line per step of a run of known length
// (the caller logs it), with an ETA.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace furlong {

// "MM:SS", or "H:MM:SS" from one hour on (seconds rounded; negative counts as 0).
std::string format_duration(double seconds);

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

// Steps [first, end) of a run, shown 1-based out of `end`: line() gives
//   "<label> k/N: <details>, 12.3 s, ETA 01:05"
// where the ETA is the wall time since construction divided by the steps done so far, times
// the steps left (time between the steps counts too). After the last step it says
// "done in <elapsed>" instead.
class StepProgress {
 public:
  StepProgress(std::string label, int64_t first, int64_t end);
  // The line for step `step` (0-based) once it is done (steps first..step are done), which
  // took `step_seconds`.
  std::string line(int64_t step, double step_seconds, const std::string& details) const;
  // line() with the wall time since construction given instead of read from the clock.
  std::string line_at(int64_t step, double step_seconds, const std::string& details,
                      double elapsed_seconds) const;

 private:
  std::string label_;
  int64_t first_;
  int64_t end_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace furlong
