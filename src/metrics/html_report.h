// A self-contained HTML report of a metrics JSONL file (MetricsLogger's output): a run header,
// one inline SVG line chart per metric family, and tables of sample eval completions; no
// external scripts or styles, so it opens from disk.
//
// Families, in this order, each one chart with every matching series: Reward (names with
// "reward" but not "reward_failures", and each eval's mean reward "eval/<set>", drawn dashed
// beside the training reward), Pass@k ("pass@"), Response length ("response_len" or
// "response_length"), KL (a '_'- or '/'-separated word "kl"), Entropy ("entropy"), Timings
// ("perf/..._time"). Every other numeric series gets a chart of its own, except the step
// counters rollout/step and train/step. The x axis is the row's "step" (the row number if
// absent); nulls and non-numeric values are skipped.
//
// The header and the sample tables come from the JSONL's side files (metrics/run_report.h),
// each left out when its file does not exist.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/jsonl.h"

namespace furlong::metrics {

// What the page shows besides the metric rows (the parsed side files).
struct ReportExtras {
  OrderedJson run_info;                // null: no run header
  std::vector<JsonlRow> eval_samples;  // one row per eval and set (append_eval_samples)
};

// The page for already-read rows (rows without any numeric value contribute nothing).
std::string render_html_report(const std::vector<JsonlRow>& rows, const std::string& title,
                               const ReportExtras& extras = {});

// Reads `metrics_jsonl` and its side files, renders, and writes `out_html` atomically.
void write_html_report(const std::filesystem::path& metrics_jsonl,
                       const std::filesystem::path& out_html, const std::string& title);

// Escapes & < > " ' for text and attribute values.
std::string html_escape(const std::string& text);

}  // namespace furlong::metrics
