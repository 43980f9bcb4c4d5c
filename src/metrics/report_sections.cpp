#include "metrics/report_sections.h"

#include <cstdio>

#include "core/progress.h"
#include "metrics/html_report.h"

namespace furlong::metrics {
namespace {

// A JSON value as text: strings as they are, anything else as JSON.
std::string text_of(const OrderedJson& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return format_number(value.get<double>());
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string field_text(const OrderedJson& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? "" : text_of(*it);
}

std::string info_row(const std::string& name, const std::string& value) {
  return "<tr><th>" + html_escape(name) + "</th><td>" + html_escape(value) + "</td></tr>\n";
}

// "6 (steps 0 to 5)" over the rows that carry "rollout/step".
std::string rollouts_logged(const std::vector<JsonlRow>& rows) {
  int64_t count = 0, first = 0, last = 0;
  for (const auto& row : rows) {
    const auto it = row.value.find("rollout/step");
    if (it == row.value.end() || !it->is_number()) continue;
    const auto step = it->get<int64_t>();
    first = count == 0 ? step : first;
    last = step;
    ++count;
  }
  if (count == 0) return "none";
  return std::to_string(count) + " (steps " + std::to_string(first) + " to " +
         std::to_string(last) + ")";
}

// One eval of one set: "<details>" with a row per sample.
std::string eval_table(const OrderedJson& eval, bool open) {
  const auto step = field_text(eval, "step");
  const bool before = eval.value("before_training", false);
  std::string body;
  double sum = 0;
  size_t n = 0;
  const auto rows = eval.find("rows");
  if (rows != eval.end() && rows->is_array()) {
    for (const auto& r : *rows) {
      if (!r.is_object()) continue;
      const auto reward = r.find("reward");
      if (reward != r.end() && reward->is_number()) sum += reward->get<double>();
      ++n;
      body += "<tr><td>" + std::to_string(n) + "</td><td><pre>" +
              html_escape(field_text(r, "prompt")) + "</pre></td><td><pre>" +
              html_escape(field_text(r, "response")) + "</pre></td><td><pre>" +
              html_escape(field_text(r, "label")) + "</pre></td><td>" +
              html_escape(field_text(r, "reward")) + "</td></tr>\n";
    }
  }
  std::string summary = "eval " + field_text(eval, "set") + ", step " + step +
                        (before ? " (before training)" : "") + ": " + std::to_string(n) +
                        " sample(s)";
  if (n > 0) summary += ", mean reward " + format_number(sum / static_cast<double>(n));
  return std::string("<details") + (open ? " open" : "") + "><summary>" + html_escape(summary) +
         "</summary>\n<table class=\"samples\"><tr><th>#</th><th>prompt</th><th>response</th>"
         "<th>label</th><th>reward</th></tr>\n" +
         body + "</table></details>\n";
}

}  // namespace

std::string format_number(double value) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.4g", value);
  return buf;
}

std::string render_run_header(const OrderedJson& run_info, const std::vector<JsonlRow>& rows) {
  if (!run_info.is_object()) return "";
  std::string table;
  const auto wall = run_info.find("wall_seconds");
  if (wall != run_info.end() && wall->is_number()) {
    table += info_row("total time", format_duration(wall->get<double>()));
  }
  table += info_row("rollouts logged", rollouts_logged(rows));
  const auto fields = run_info.find("fields");
  if (fields != run_info.end() && fields->is_object()) {
    for (const auto& [name, value] : fields->items()) table += info_row(name, text_of(value));
  }
  return "<section class=\"run\">\n<h2>Run</h2>\n<table class=\"fields\">\n" + table +
         "</table>\n</section>\n";
}

std::string render_eval_samples(const std::vector<JsonlRow>& evals) {
  if (evals.empty()) return "";
  std::string out =
      "<section class=\"evals\">\n<h2>Eval samples</h2>\n<p class=\"meta\">The first held-out "
      "prompts' first sample at each eval (long texts clipped in the middle).</p>\n";
  const size_t n = evals.size();
  // The first eval (the baseline, usually) and the latest kMaxEvalTables - 1.
  const size_t tail_from = n > kMaxEvalTables ? n - (kMaxEvalTables - 1) : 1;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && i < tail_from) {
      if (i == 1) {
        out += "<p class=\"meta\">" + std::to_string(tail_from - 1) +
               " eval table(s) not shown (they are in the eval samples file).</p>\n";
      }
      continue;
    }
    out += eval_table(evals[i].value, /*open=*/i + 1 == n);
  }
  return out + "</section>\n";
}

}  // namespace furlong::metrics
