#include "metrics/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "core/json_util.h"
#include "metrics/run_report.h"
#include "metrics/tensorboard.h"

namespace furlong::metrics {

namespace {

// Short, readable numbers: integers as such, others with 4 significant digits.
std::string compact_number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[64];
  if (v == std::floor(v) && std::abs(v) < 1e12) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  }
  return buf;
}

std::pair<std::string, std::string> split_group(const std::string& name) {
  auto slash = name.find('/');
  if (slash == std::string::npos) return {"-", name};
  return {name.substr(0, slash), name.substr(slash + 1)};
}

// One write(2) per row on an O_APPEND descriptor, so rows from concurrent writers never
// interleave; a short write (disk full, signal) is finished with further writes.
void append_whole(int fd, const std::string& line, const std::filesystem::path& path) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    FURLONG_CHECK(n > 0, path.string(), ": write failed: ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

constexpr size_t kTableWidth = 110;  // wrap a group's line past this many characters

}  // namespace

std::string format_metrics_table(int64_t step, const MetricValues& values) {
  std::vector<std::string> groups;
  std::vector<std::vector<std::string>> cells;
  size_t group_width = 1;
  for (const auto& [name, value] : values) {
    auto [group, metric] = split_group(name);
    size_t g = 0;
    while (g < groups.size() && groups[g] != group) ++g;
    if (g == groups.size()) {
      groups.push_back(group);
      cells.emplace_back();
      group_width = std::max(group_width, group.size());
    }
    cells[g].push_back(metric + "=" + compact_number(value));
  }
  std::string out = "step " + std::to_string(step) + "\n";
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string indent = "  " + std::string(group_width + 2, ' ');
    std::string line = "  " + groups[g] + std::string(group_width + 2 - groups[g].size(), ' ');
    bool first = true;
    for (const auto& cell : cells[g]) {
      if (!first && line.size() + 2 + cell.size() > kTableWidth) {
        out += line + "\n";
        line = indent;
        first = true;
      }
      line += (first ? "" : "  ") + cell;
      first = false;
    }
    out += line + "\n";
  }
  return out;
}

MetricsLogger::MetricsLogger(MetricsOptions options) : options_(std::move(options)) {
  if (!options_.jsonl_path.empty()) {
    if (options_.jsonl_path.has_parent_path()) ensure_directory(options_.jsonl_path.parent_path());
    // A new JSONL is a new run: the report's side files of an older one must not mix in.
    if (!std::filesystem::exists(options_.jsonl_path)) remove_side_files(options_.jsonl_path);
    jsonl_fd_ =
        ::open(options_.jsonl_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    FURLONG_CHECK(jsonl_fd_ >= 0, options_.jsonl_path.string(),
                  ": cannot open the metrics file for appending: ", std::strerror(errno));
  }
  if (!options_.tensorboard_dir.empty()) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(options_.tensorboard_dir);
  }
}

MetricsLogger::~MetricsLogger() {
  if (jsonl_fd_ >= 0) ::close(jsonl_fd_);
}

void MetricsLogger::log(int64_t step, const MetricValues& values) {
  std::set<std::string> seen;
  for (const auto& [name, value] : values) {
    FURLONG_CHECK(!name.empty(), "metrics at step ", step, ": a metric has an empty name");
    FURLONG_CHECK(name != "step", "metrics at step ", step, ": 'step' is reserved");
    FURLONG_CHECK(seen.insert(name).second, "metrics at step ", step, ": '", name,
                  "' is logged twice");
  }
  if (options_.console_table) {
    const auto table = format_metrics_table(step, values);
    std::fwrite(table.data(), 1, table.size(), stderr);
    std::fflush(stderr);
  }
  if (jsonl_fd_ >= 0) {
    OrderedJson row = OrderedJson::object();
    row["step"] = step;
    for (const auto& [name, value] : values) {
      row[name] = std::isfinite(value) ? OrderedJson(value) : OrderedJson(nullptr);
    }
    const auto line = row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    append_whole(jsonl_fd_, line, options_.jsonl_path);
  }
  if (tensorboard_) tensorboard_->add_scalars(step, values);
}

}  // namespace furlong::metrics
