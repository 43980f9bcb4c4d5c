// core/progress.h: the duration text and StepProgress's per-step line with its ETA.
#include "core/progress.h"

#include <gtest/gtest.h>

namespace furlong {
namespace {

TEST(FormatDuration, MinutesThenHoursRoundedAndClamped) {
  EXPECT_EQ(format_duration(0), "00:00");
  EXPECT_EQ(format_duration(59.6), "01:00");
  EXPECT_EQ(format_duration(3599.4), "59:59");
  EXPECT_EQ(format_duration(3661), "1:01:01");
  EXPECT_EQ(format_duration(-5), "00:00");
  EXPECT_EQ(format_duration(1e300), "10000000:00:00");  // clamped, no overflow
}

TEST(StepProgress, CountsDoneStepsFromTheFirstAndShowsDoneAtTheEnd) {
  const StepProgress p("rollout", 10, 20);
  // Steps 10..13 done in 40 s: 10 s each, 6 left.
  EXPECT_EQ(p.line_at(13, 9.96, "reward 1", 40.0), "rollout 14/20: reward 1, 10.0 s, ETA 01:00");
  EXPECT_EQ(p.line_at(13, 9.96, "", 40.0), "rollout 14/20: 10.0 s, ETA 01:00");
  EXPECT_EQ(p.line_at(19, 1.0, "x", 125.0), "rollout 20/20: x, 1.0 s, done in 02:05");
  // The clock-reading form gives the same shape.
  const auto line = p.line(10, 0.5, "d");
  EXPECT_EQ(line.rfind("rollout 11/20: d, 0.5 s, ETA ", 0), 0u) << line;
}

}  // namespace
}  // namespace furlong
