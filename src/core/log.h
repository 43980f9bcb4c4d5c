// Logging to stderr with a level, a wall-clock time and (once distributed) the rank.
// Level from FURLONG_LOG_LEVEL (debug|info|warn|error), default info.
#pragma once

#include <string>

#include "core/error.h"

namespace furlong {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel log_level();
// Rank shown in every line once set (-1 = not distributed, no prefix).
void set_log_rank(int rank);
void log_line(LogLevel level, const std::string& message);

}  // namespace furlong

#define FURLONG_LOG(level, ...)                                              \
  do {                                                                       \
    if (static_cast<int>(level) >= static_cast<int>(::furlong::log_level())) \
      ::furlong::log_line(level, ::furlong::detail::concat(__VA_ARGS__));    \
  } while (0)
#define LOG_DEBUG(...) FURLONG_LOG(::furlong::LogLevel::kDebug, __VA_ARGS__)
#define LOG_INFO(...) FURLONG_LOG(::furlong::LogLevel::kInfo, __VA_ARGS__)
#define LOG_WARN(...) FURLONG_LOG(::furlong::LogLevel::kWarn, __VA_ARGS__)
#define LOG_ERROR(...) FURLONG_LOG(::furlong::LogLevel::kError, __VA_ARGS__)
