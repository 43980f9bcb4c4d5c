// The HTML report's sections other than the charts (html_report.cpp assembles the page): the
// run header and the eval sample tables. Internal to src/metrics.
#pragma once

#include <string>
#include <vector>

#include "core/jsonl.h"

namespace furlong::metrics {

// At most this many eval tables: the first eval and the latest ones (the file has them all).
inline constexpr size_t kMaxEvalTables = 12;

// "<section>" with the total time, the logged rollouts and every field of the run header
// (`run_info` as write_run_info writes it); "" for a null `run_info`.
std::string render_run_header(const OrderedJson& run_info, const std::vector<JsonlRow>& rows);

// One collapsible table per eval row (prompt, response, label, reward); "" for none.
std::string render_eval_samples(const std::vector<JsonlRow>& evals);

// A value as the report prints it ("%.4g" for numbers).
std::string format_number(double value);

}  // namespace furlong::metrics
