// What the SFT and RL drivers share: the process groups from the flags, the batch sizes and
// run length they derive (miles' rules), when to save, and where metrics go.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "dist/process_group.h"
#include "metrics/metrics.h"
#include "train/options.h"

namespace furlong::train {

// Rendezvous from the environment with --distributed-backend / --distributed-timeout-minutes.
std::unique_ptr<dist::ProcessGroups> init_process_groups(const TrainOptions& options);

// Derives options.derived (global batch size, rollouts, optimizer steps) from the batch flags
// and the data size: `dataset_size` prompts (RL) or samples (SFT). The two jobs differ where
// miles' do: SFT's --rollout-batch-size defaults to the global batch size and a run must have
// a step; RL needs --rollout-batch-size (prompts) and may run 0 rollouts.
void derive_batch_sizes(TrainOptions& options, int64_t dataset_size);

// Whether to save after `rollout_id`: by --save-interval (and at the last rollout), or when the
// --save-trigger-sentinel file exists (removed by remove_save_sentinel after the save). Rank 0
// decides and broadcasts, so every rank agrees even if the file appears while they check.
// Collective over `world`.
bool save_due(const TrainOptions& options, int64_t rollout_id, dist::Group& world);
void remove_save_sentinel(const TrainOptions& options);

// The JSONL the metrics go to: --metrics-file, else next to --report (the report reads it).
std::string metrics_path(const TrainOptions& options);
// Rank 0's metrics sinks (JSONL, TensorBoard, and the console table when `console_table`).
// A fresh run (start_rollout 0) starts a fresh JSONL; a resumed one appends to it.
std::unique_ptr<metrics::MetricsLogger> make_metrics_logger(const TrainOptions& options,
                                                            int64_t start_rollout,
                                                            bool console_table);
// After the run: closes `logger` and writes --report from the JSONL, if asked for.
void finish_metrics(const TrainOptions& options, std::unique_ptr<metrics::MetricsLogger>& logger,
                    const std::string& title);

// Writes `values` as one row at `step` (values in name order).
void log_metrics(metrics::MetricsLogger& logger, int64_t step,
                 const std::map<std::string, double>& values);

}  // namespace furlong::train
