#include "metrics/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

#include "core/files.h"
#include "metrics/report_sections.h"
#include "metrics/run_report.h"

namespace furlong::metrics {

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

struct Chart {
  std::string title;
  std::vector<const Series*> series;
};

// Geometry of one chart (SVG user units; the SVG scales to the page width).
constexpr double kWidth = 640, kHeight = 300;
constexpr double kLeft = 72, kRight = 16, kTop = 16, kBottom = 44;
constexpr int kTargetTicks = 5;
constexpr size_t kMaxMarkers = 120;  // points with hover markers per series

const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string number(double v) {
  return format_number(v);
}

std::string coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// The x axis itself, and the trainer's step counters (rollout/step, train/step): not charted.
bool is_step_counter(const std::string& name) {
  return name == "step" || name == "rollout/step" || name == "train/step";
}

// Collects numeric series in first-seen order.
std::vector<Series> collect_series(const std::vector<JsonlRow>& rows) {
  std::vector<Series> series;
  std::map<std::string, size_t> index;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r].value;
    double step = static_cast<double>(r);
    auto it = row.find("step");
    if (it != row.end() && it->is_number()) step = it->get<double>();
    for (const auto& [key, value] : row.items()) {
      if (is_step_counter(key) || !value.is_number()) continue;
      const double v = value.get<double>();
      if (!std::isfinite(v)) continue;
      auto [pos, added] = index.emplace(key, series.size());
      if (added) series.push_back({key, {}, {}});
      series[pos->second].x.push_back(step);
      series[pos->second].y.push_back(v);
    }
  }
  return series;
}

std::vector<std::string> words(const std::string& name) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : name) {
    if (c == '/' || c == '_' || c == '-') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

std::vector<Chart> group_into_charts(const std::vector<Series>& series) {
  using Match = std::function<bool(const std::string&)>;
  const std::vector<std::pair<std::string, Match>> families = {
      {"Reward",
       [](const std::string& n) {
         // reward_failures is a count, not a reward: it gets a chart (and an axis) of its own
         return (contains(n, "reward") && !contains(n, "reward_failures")) ||
                is_eval_reward_metric(n);
       }},
      {"Pass@k", [](const std::string& n) { return contains(n, "pass@"); }},
      {"Response length",
       [](const std::string& n) {
         return contains(n, "response_len") || contains(n, "response_length");
       }},
      {"KL",
       [](const std::string& n) {
         auto w = words(n);
         return std::find(w.begin(), w.end(), "kl") != w.end();
       }},
      {"Entropy", [](const std::string& n) { return contains(n, "entropy"); }},
      {"Timings",
       [](const std::string& n) {
         return n.rfind("perf/", 0) == 0 && n.size() > 5 && n.substr(n.size() - 5) == "_time";
       }},
  };
  std::vector<Chart> charts;
  std::vector<bool> used(series.size(), false);
  for (const auto& [title, match] : families) {
    Chart chart{title, {}};
    for (size_t i = 0; i < series.size(); ++i) {
      if (!used[i] && match(series[i].name)) {
        chart.series.push_back(&series[i]);
        used[i] = true;
      }
    }
    if (!chart.series.empty()) charts.push_back(std::move(chart));
  }
  for (size_t i = 0; i < series.size(); ++i) {
    if (!used[i]) charts.push_back({series[i].name, {&series[i]}});
  }
  return charts;
}

// Round tick positions covering [lo, hi] (steps of 1, 2 or 5 times a power of ten).
std::vector<double> nice_ticks(double& lo, double& hi) {
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    const double pad = lo == 0.0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / kTargetTicks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1.0 : norm < 3.5 ? 2.0 : norm < 7.5 ? 5.0 : 10.0) * mag;
  lo = std::floor(lo / step) * step;
  hi = std::ceil(hi / step) * step;
  std::vector<double> ticks;
  for (double t = lo; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string render_chart(const Chart& chart) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  for (const auto* s : chart.series) {
    for (double x : s->x) x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x);
    for (double y : s->y) y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
  }
  const auto x_ticks = nice_ticks(x_lo, x_hi);
  const auto y_ticks = nice_ticks(y_lo, y_hi);
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) { return kTop + (1.0 - (y - y_lo) / (y_hi - y_lo)) * plot_h; };

  std::string svg = "<svg viewBox=\"0 0 " + coord(kWidth) + " " + coord(kHeight) +
                    "\" role=\"img\" aria-label=\"" + html_escape(chart.title) + "\">\n";
  for (double t : y_ticks) {
    svg += "<line class=\"grid\" x1=\"" + coord(kLeft) + "\" x2=\"" + coord(kWidth - kRight) +
           "\" y1=\"" + coord(py(t)) + "\" y2=\"" + coord(py(t)) + "\"/>";
    svg += "<text class=\"tick\" x=\"" + coord(kLeft - 6) + "\" y=\"" + coord(py(t) + 4) +
           "\" text-anchor=\"end\">" + number(t) + "</text>\n";
  }
  for (double t : x_ticks) {
    svg += "<line class=\"grid\" y1=\"" + coord(kTop) + "\" y2=\"" + coord(kTop + plot_h) +
           "\" x1=\"" + coord(px(t)) + "\" x2=\"" + coord(px(t)) + "\"/>";
    svg += "<text class=\"tick\" y=\"" + coord(kTop + plot_h + 16) + "\" x=\"" + coord(px(t)) +
           "\" text-anchor=\"middle\">" + number(t) + "</text>\n";
  }
  svg += "<rect class=\"frame\" x=\"" + coord(kLeft) + "\" y=\"" + coord(kTop) + "\" width=\"" +
         coord(plot_w) + "\" height=\"" + coord(plot_h) + "\"/>\n";
  svg += "<text class=\"label\" x=\"" + coord(kLeft + plot_w / 2) + "\" y=\"" + coord(kHeight - 6) +
         "\" text-anchor=\"middle\">step</text>\n";
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const auto& s = *chart.series[k];
    const char* color = kPalette[k % std::size(kPalette)];
    // Eval series (a point per eval) are dashed, so they read apart from the training curves.
    const char* dash = is_eval_reward_metric(s.name) ? "\" stroke-dasharray=\"6 3" : "";
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i) {
      points += (i ? " " : "") + coord(px(s.x[i])) + "," + coord(py(s.y[i]));
    }
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) + dash +
           "\" stroke-width=\"1.8\" points=\"" + points + "\"/>\n";
    if (s.x.size() <= kMaxMarkers) {
      for (size_t i = 0; i < s.x.size(); ++i) {
        svg += "<circle cx=\"" + coord(px(s.x[i])) + "\" cy=\"" + coord(py(s.y[i])) +
               "\" r=\"2.5\" fill=\"" + color + "\"><title>" + html_escape(s.name) + " @ " +
               number(s.x[i]) + ": " + number(s.y[i]) + "</title></circle>";
      }
      svg += "\n";
    }
  }
  svg += "</svg>\n";

  std::string legend = "<ul class=\"legend\">";
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const auto& s = *chart.series[k];
    legend += "<li><span class=\"swatch\" style=\"background:" +
              std::string(kPalette[k % std::size(kPalette)]) + "\"></span>" + html_escape(s.name) +
              " <span class=\"last\">(last " + number(s.y.back()) + ")</span></li>";
  }
  legend += "</ul>\n";
  return "<section class=\"chart\">\n<h2>" + html_escape(chart.title) + "</h2>\n" + svg + legend +
         "</section>\n";
}

const char* const kStyle = R"(<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
       max-width: 1400px; padding: 0 16px; color: #222; background: #fafafa; }
h1 { font-size: 22px; margin-bottom: 4px; }
.meta { color: #666; margin-top: 0; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 16px; }
.chart { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; }
.chart h2 { font-size: 15px; margin: 4px 0 6px; word-break: break-all; }
svg { width: 100%; height: auto; display: block; }
svg .grid { stroke: #e6e6e6; stroke-width: 1; }
svg .frame { fill: none; stroke: #999; stroke-width: 1; }
svg .tick { font-size: 11px; fill: #555; }
svg .label { font-size: 12px; fill: #333; }
.legend { list-style: none; padding: 0; margin: 4px 0; font-size: 12px; }
.legend li { display: inline-block; margin-right: 14px; word-break: break-all; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; border-radius: 2px; }
.last { color: #777; }
section.run, section.evals { background: #fff; border: 1px solid #ddd; border-radius: 6px;
                             padding: 8px 12px; margin: 16px 0; }
section.run h2, section.evals h2 { font-size: 15px; margin: 4px 0 6px; }
table.fields { border-collapse: collapse; font-size: 13px; }
table.fields th { text-align: left; font-weight: 600; padding: 2px 16px 2px 0; color: #444; }
table.fields td { padding: 2px 0; word-break: break-all; }
table.samples { border-collapse: collapse; font-size: 12px; width: 100%; margin: 6px 0 10px; }
table.samples th, table.samples td { border: 1px solid #ddd; padding: 4px 6px; text-align: left;
                                     vertical-align: top; }
table.samples pre { margin: 0; white-space: pre-wrap; word-break: break-word;
                    font-family: ui-monospace, monospace; }
summary { cursor: pointer; font-size: 13px; margin: 4px 0; }
</style>
)";

}  // namespace

std::string render_html_report(const std::vector<JsonlRow>& rows, const std::string& title,
                               const ReportExtras& extras) {
  const auto series = collect_series(rows);
  const auto charts = group_into_charts(series);
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<title>" + html_escape(title) + "</title>\n" + kStyle + "</head>\n<body>\n";
  html += "<h1>" + html_escape(title) + "</h1>\n<p class=\"meta\">" + std::to_string(rows.size()) +
          " rows, " + std::to_string(series.size()) + " series, " + std::to_string(charts.size()) +
          " charts</p>\n";
  html += render_run_header(extras.run_info, rows);
  if (charts.empty()) html += "<p>No numeric metrics.</p>\n";
  html += "<div class=\"grid\">\n";
  for (const auto& chart : charts) html += render_chart(chart);
  html += "</div>\n" + render_eval_samples(extras.eval_samples) + "</body>\n</html>\n";
  return html;
}

void write_html_report(const std::filesystem::path& metrics_jsonl,
                       const std::filesystem::path& out_html, const std::string& title) {
  ReportExtras extras;
  const auto info = run_info_path(metrics_jsonl);
  if (std::filesystem::exists(info)) extras.run_info = read_ordered_json_file(info);
  const auto evals = eval_samples_path(metrics_jsonl);
  if (std::filesystem::exists(evals)) extras.eval_samples = read_jsonl(evals);
  write_file_atomic(out_html, render_html_report(read_jsonl(metrics_jsonl), title, extras));
}

}  // namespace furlong::metrics
