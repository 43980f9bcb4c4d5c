// A self-contained HTML report of a metrics JSONL file (MetricsLogger's output): one inline
// SVG line chart per metric family, no external scripts or styles, so it opens from disk.
//
// Families, in this order, each one chart with every matching series: Reward (names with
// "reward"), Response length ("response_len"/"response_length"), KL (a '_'- or '/'-separated
// word "kl"), Entropy ("entropy"), Timings ("perf/..._time"). Every other numeric series gets a
// chart of its own. The x axis is the row's "step" (the row number if absent); nulls and
// non-numeric values are skipped.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/jsonl.h"

namespace furlong::metrics {

// The page for already-read rows (rows without any numeric value contribute nothing).
std::string render_html_report(const std::vector<JsonlRow>& rows, const std::string& title);

// Reads `metrics_jsonl`, renders, and writes `out_html` atomically.
void write_html_report(const std::filesystem::path& metrics_jsonl,
                       const std::filesystem::path& out_html, const std::string& title);

// Escapes & < > " ' for text and attribute values.
std::string html_escape(const std::string& text);

}  // namespace furlong::metrics
