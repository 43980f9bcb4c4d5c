// The side files of a metrics JSONL that the HTML report reads besides the metric rows (each
// optional; the report leaves out what is missing):
//   <metrics>.run_info.json       the run header, one JSON object:
//                                 {"fields": {"<name>": <value>, ...}, "wall_seconds": <s>}
//                                 (fields in display order; wall_seconds = the run's total time)
//   <metrics>.eval_samples.jsonl  one row per eval and eval dataset:
//                                 {"step": s, "before_training": b, "set": "<name>",
//                                  "rows": [{"prompt", "response", "label", "reward"}, ...]}
// Both stay small by construction: eval rows are capped at kEvalSampleRows per set and every
// text is clipped to kEvalSampleTextBytes. A new metrics JSONL (MetricsLogger on a path that
// does not exist) removes older side files, so a report never mixes two runs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace furlong::metrics {

std::filesystem::path run_info_path(const std::filesystem::path& metrics_jsonl);
std::filesystem::path eval_samples_path(const std::filesystem::path& metrics_jsonl);
void remove_side_files(const std::filesystem::path& metrics_jsonl);

// Writes the run header atomically. `fields` is an object of scalars (strings, numbers, bools).
void write_run_info(const std::filesystem::path& metrics_jsonl, const OrderedJson& fields,
                    double wall_seconds);
// The wall_seconds of an existing run header (a resumed run adds to it); 0 when there is none.
double read_run_wall_seconds(const std::filesystem::path& metrics_jsonl);

inline constexpr size_t kEvalSampleRows = 8;
inline constexpr size_t kEvalSampleTextBytes = 600;

struct EvalSampleRow {
  std::string prompt;
  std::string response;
  std::string label;
  double reward = 0.0;
};

// Appends one eval of one dataset: the first kEvalSampleRows of `rows`, texts clipped.
void append_eval_samples(const std::filesystem::path& metrics_jsonl, int64_t step,
                         bool before_training, const std::string& set,
                         const std::vector<EvalSampleRow>& rows);

// `text` itself when it has at most `max_bytes` bytes; else its head and tail around
// " [... N bytes ...] " (the end of a prompt or a response is often what matters), never
// splitting a UTF-8 sequence. The result has at most max_bytes + 40 bytes.
std::string clip_text(const std::string& text, size_t max_bytes);

// Whether `name` is an eval's mean reward, "eval/<set>" (not its -pass@k, -truncated_ratio or
// per-set "eval/<set>/..." metrics): what the report draws beside the training reward and the
// progress line shows.
bool is_eval_reward_metric(const std::string& name);

}  // namespace furlong::metrics
