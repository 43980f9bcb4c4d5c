// JSONL datasets: one JSON object per line. Reading reports errors as "<file>:<line>: ...";
// writing goes to a temporary file renamed into place on commit(), so an interrupted job never
// leaves a truncated output where a complete one is expected.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace furlong {

struct JsonlRow {
  int64_t line = 0;   // 1-based line number in the file
  std::string where;  // "<file>:<line>"
  OrderedJson value;  // always an object; keys in file order
};

// Reads every non-blank line; each must be a JSON object, nested at most kMaxJsonDepth levels.
// A missing path or a directory is an error naming the path.
std::vector<JsonlRow> read_jsonl(const std::filesystem::path& path);

class JsonlWriter {
 public:
  explicit JsonlWriter(std::filesystem::path path);
  ~JsonlWriter();  // without commit(), the temporary file is removed
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // `line` must be one serialized JSON value without a newline.
  void write_line(const std::string& line);
  template <typename J>
  void write(const J& value) {
    write_line(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  void commit();

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_;
  std::FILE* file_ = nullptr;
};

// Shortest decimal text that reads back as the same float (for compact log-prob output); NaN
// and +-Infinity, which JSON cannot spell, become null.
std::string float_to_json(float value);
std::string floats_to_json_array(const float* values, int64_t n);

}  // namespace furlong
