#include "core/jsonl.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "core/files.h"

namespace furlong {

std::vector<JsonlRow> read_jsonl(const std::filesystem::path& path) {
  FURLONG_CHECK(std::filesystem::exists(path), path.string(), ": input file not found");
  FURLONG_CHECK(!std::filesystem::is_directory(path), path.string(),
                ": is a directory; expected a JSONL file (one JSON object per line)");
  std::vector<JsonlRow> rows;
  for_each_line(path, [&](int64_t line_number, const std::string& line) {
    std::string where = path.string() + ":" + std::to_string(line_number);
    JsonlRow row{line_number, where, parse_ordered_json(line, where)};
    FURLONG_CHECK(row.value.is_object(), where, ": each line must be a JSON object, got ",
                  json_type_name(row.value));
    rows.push_back(std::move(row));
  });
  return rows;
}

JsonlWriter::JsonlWriter(std::filesystem::path path) : path_(std::move(path)) {
  if (path_.has_parent_path()) ensure_directory(path_.parent_path());
  tmp_ = path_;
  tmp_ += ".tmp." + std::to_string(getpid());
  file_ = std::fopen(tmp_.c_str(), "w");
  FURLONG_CHECK(file_ != nullptr, tmp_.string(), ": cannot create (", std::strerror(errno), ")");
}

JsonlWriter::~JsonlWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void JsonlWriter::write_line(const std::string& line) {
  FURLONG_ASSERT(file_ != nullptr, "write after commit");
  bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() &&
            std::fputc('\n', file_) != EOF;
  FURLONG_CHECK(ok, tmp_.string(), ": write failed (", std::strerror(errno), ")");
}

void JsonlWriter::commit() {
  FURLONG_ASSERT(file_ != nullptr, "commit twice");
  bool ok = std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  std::fclose(file_);
  file_ = nullptr;
  FURLONG_CHECK(ok, tmp_.string(), ": flush failed (", std::strerror(errno), ")");
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  FURLONG_CHECK(!ec, path_.string(), ": cannot move the output into place (", ec.message(), ")");
}

std::string float_to_json(float value) {
  // JSON has no NaN or Infinity: a non-finite value is written as null (as Python's
  // json.dumps(..., allow_nan=False) callers and nlohmann do).
  if (!std::isfinite(value)) return "null";
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, ptr);
}

std::string floats_to_json_array(const float* values, int64_t n) {
  std::string out = "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i) out += ',';
    out += float_to_json(values[i]);
  }
  return out + "]";
}

}  // namespace furlong
