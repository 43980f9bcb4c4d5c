#include "metrics/run_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "core/files.h"

namespace furlong::metrics {
namespace {

std::filesystem::path with_suffix(const std::filesystem::path& path, const char* suffix) {
  auto out = path;
  out += suffix;
  return out;
}

// The largest cut <= `at` that does not fall inside a UTF-8 sequence of `text`.
size_t utf8_floor(const std::string& text, size_t at) {
  while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) {
    --at;
  }
  return at;
}

// The smallest cut >= `at` that does not fall inside a UTF-8 sequence of `text`.
size_t utf8_ceil(const std::string& text, size_t at) {
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
  return at;
}

std::string dump_line(const OrderedJson& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

std::filesystem::path run_info_path(const std::filesystem::path& metrics_jsonl) {
  return with_suffix(metrics_jsonl, ".run_info.json");
}

std::filesystem::path eval_samples_path(const std::filesystem::path& metrics_jsonl) {
  return with_suffix(metrics_jsonl, ".eval_samples.jsonl");
}

void remove_side_files(const std::filesystem::path& metrics_jsonl) {
  std::error_code ignored;
  std::filesystem::remove(run_info_path(metrics_jsonl), ignored);
  std::filesystem::remove(eval_samples_path(metrics_jsonl), ignored);
}

void write_run_info(const std::filesystem::path& metrics_jsonl, const OrderedJson& fields,
                    double wall_seconds) {
  OrderedJson doc = OrderedJson::object();
  doc["fields"] = fields;
  doc["wall_seconds"] = wall_seconds;
  write_file_atomic(run_info_path(metrics_jsonl), dump_line(doc));
}

double read_run_wall_seconds(const std::filesystem::path& metrics_jsonl) {
  const auto path = run_info_path(metrics_jsonl);
  if (!std::filesystem::exists(path)) return 0.0;
  try {
    const auto doc = read_ordered_json_file(path);
    const auto it = doc.find("wall_seconds");
    return it != doc.end() && it->is_number() ? it->get<double>() : 0.0;
  } catch (const std::exception&) {
    return 0.0;  // a damaged header only costs the earlier part of the total time
  }
}

void append_eval_samples(const std::filesystem::path& metrics_jsonl, int64_t step,
                         bool before_training, const std::string& set,
                         const std::vector<EvalSampleRow>& rows) {
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < rows.size() && i < kEvalSampleRows; ++i) {
    const auto& r = rows[i];
    out.push_back({{"prompt", clip_text(r.prompt, kEvalSampleTextBytes)},
                   {"response", clip_text(r.response, kEvalSampleTextBytes)},
                   {"label", clip_text(r.label, kEvalSampleTextBytes)},
                   {"reward", r.reward}});
  }
  OrderedJson row = OrderedJson::object();
  row["step"] = step;
  row["before_training"] = before_training;
  row["set"] = set;
  row["rows"] = std::move(out);
  const auto path = eval_samples_path(metrics_jsonl);
  const auto line = dump_line(row);
  // One append write (O_APPEND), as MetricsLogger does: a crash loses at most this row.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  FURLONG_CHECK(fd >= 0, path.string(), ": cannot open for appending: ", std::strerror(errno));
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      FURLONG_FAIL(path.string(), ": write failed: ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

std::string clip_text(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  const size_t head = utf8_floor(text, max_bytes / 2);
  const size_t tail = utf8_ceil(text, text.size() - (max_bytes - max_bytes / 2));
  const size_t cut = tail - head;
  return text.substr(0, head) + " [... " + std::to_string(cut) + " bytes ...] " + text.substr(tail);
}

bool is_eval_reward_metric(const std::string& name) {
  constexpr std::string_view kPrefix = "eval/";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  const std::string set = name.substr(kPrefix.size());
  if (set.find('/') != std::string::npos || set.find("-pass@") != std::string::npos) return false;
  constexpr std::string_view kTruncated = "-truncated_ratio";
  return !(set.size() >= kTruncated.size() &&
           set.compare(set.size() - kTruncated.size(), kTruncated.size(), kTruncated) == 0);
}

}  // namespace furlong::metrics
