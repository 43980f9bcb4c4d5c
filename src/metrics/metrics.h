// Per-step metrics to three sinks: a compact table on stderr, a JSONL file (one row per
// log() call: {"step": s, "<name>": value, ...}) and TensorBoard scalars. Names follow miles'
// convention "<group>/<metric>" (rollout/raw_reward, train/pg_loss, perf/train_time); the
// table puts each group on its own line.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace furlong::metrics {

class TensorBoardWriter;

struct MetricsOptions {
  std::filesystem::path jsonl_path;       // empty: no JSONL
  std::filesystem::path tensorboard_dir;  // empty: no TensorBoard
  bool console_table = true;              // the per-step table on stderr
};

using MetricValues = std::vector<std::pair<std::string, double>>;

// The console table for one step (what log() prints), e.g.
//   step 3
//     rollout  raw_reward=0.5  response_len/mean=123
//     train    loss=-0.0123  pg_loss=-0.0123
// Groups appear in first-seen order; names without '/' go to a group named "-".
std::string format_metrics_table(int64_t step, const MetricValues& values);

class MetricsLogger {
 public:
  // Appends to an existing JSONL; creating a new one removes the report's side files of an
  // older run at that path (metrics/run_report.h).
  explicit MetricsLogger(MetricsOptions options);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  // Writes one step to every enabled sink. The JSONL row goes out in one append write(2) (no
  // user-space buffer, so a crash loses at most the row being written); non-finite values
  // become null, as JSON has no NaN. Duplicate names, "step" and empty names are errors.
  void log(int64_t step, const MetricValues& values);

  const MetricsOptions& options() const { return options_; }

 private:
  MetricsOptions options_;
  int jsonl_fd_ = -1;  // O_APPEND: each row goes out in one write(2)
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace furlong::metrics
