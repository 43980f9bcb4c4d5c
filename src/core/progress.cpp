#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace furlong {

std::string format_duration(double seconds) {
  // Clamped to 0 .. 10^7 h: a wild estimate must not overflow the conversion.
  const auto s = static_cast<long long>(std::clamp(seconds, 0.0, 3.6e10) + 0.5);
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%02lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total) {
  const char* off = std::getenv("FURLONG_NO_PROGRESS");
  enabled_ = !(off != nullptr && off[0] != '\0' && off[0] != '0');
  tty_ = isatty(STDERR_FILENO) != 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::advance(int64_t n) {
  done_ += n;
  auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (now - last_draw_ >= std::chrono::milliseconds(125)) draw(false);
  } else if (total_ > 0) {
    int decile = static_cast<int>(10 * done_ / total_);
    if (decile != last_decile_ && decile < 10) {
      last_decile_ = decile;
      draw(false);
    }
  }
}

void ProgressBar::set_postfix(std::string text) {
  postfix_ = std::move(text);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

void ProgressBar::draw(bool final_draw) {
  if (!enabled_) return;
  last_draw_ = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(last_draw_ - start_).count();
  double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  char counters[160];
  if (total_ > 0) {
    double frac = std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
    double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0.0;
    std::snprintf(counters, sizeof(counters), "%3d%% %lld/%lld [%s<%s, %.1f %s/s]",
                  static_cast<int>(100 * frac), static_cast<long long>(done_),
                  static_cast<long long>(total_), format_duration(elapsed).c_str(),
                  format_duration(eta).c_str(), rate, unit_.c_str());
  } else {
    std::snprintf(counters, sizeof(counters), "%lld [%s, %.1f %s/s]", static_cast<long long>(done_),
                  format_duration(elapsed).c_str(), rate, unit_.c_str());
  }
  std::string bar;
  if (tty_ && total_ > 0) {
    constexpr int kWidth = 24;
    int filled = static_cast<int>(kWidth * std::min<int64_t>(done_, total_) / total_);
    bar = "|" + std::string(filled, '#') + std::string(kWidth - filled, ' ') + "| ";
  }
  std::string line = label_ + ": " + bar + counters + (postfix_.empty() ? "" : " " + postfix_);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_draw ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

StepProgress::StepProgress(std::string label, int64_t first, int64_t end)
    : label_(std::move(label)),
      first_(first),
      end_(end),
      start_(std::chrono::steady_clock::now()) {}

std::string StepProgress::line(int64_t step, double step_seconds,
                               const std::string& details) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return line_at(step, step_seconds, details, elapsed);
}

std::string StepProgress::line_at(int64_t step, double step_seconds, const std::string& details,
                                  double elapsed_seconds) const {
  const int64_t done = std::max<int64_t>(1, step + 1 - first_);
  const int64_t left = std::max<int64_t>(0, end_ - step - 1);
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f s", step_seconds);
  std::string out = label_ + " " + std::to_string(step + 1) + "/" + std::to_string(end_) + ": ";
  if (!details.empty()) out += details + ", ";
  out += seconds;
  if (left == 0) return out + ", done in " + format_duration(elapsed_seconds);
  const double per_step = elapsed_seconds / static_cast<double>(done);
  return out + ", ETA " + format_duration(per_step * static_cast<double>(left));
}

}  // namespace furlong
