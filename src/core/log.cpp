#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string_view>

namespace furlong {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("FURLONG_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  std::string_view v(env);
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warn" || v == "warning") return LogLevel::kWarn;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

std::atomic<int> g_rank{-1};
std::mutex g_log_mutex;

}  // namespace

LogLevel log_level() {
  return static_cast<LogLevel>(level_storage().load());
}
void set_log_rank(int rank) {
  g_rank = rank;
}

void log_line(LogLevel level, const std::string& message) {
  static const char kTags[] = {'D', 'I', 'W', 'E'};
  auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[16];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(g_log_mutex);
  int rank = g_rank.load();
  if (rank >= 0) {
    std::fprintf(stderr, "[furlong %s %c r%d] %s\n", stamp, kTags[static_cast<int>(level)], rank,
                 message.c_str());
  } else {
    std::fprintf(stderr, "[furlong %s %c] %s\n", stamp, kTags[static_cast<int>(level)],
                 message.c_str());
  }
  std::fflush(stderr);
}

}  // namespace furlong
