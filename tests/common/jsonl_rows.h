// JSONL files in tests: every non-empty line of a file as one JSON value, and back.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace furlong::testing {

inline std::vector<Json> read_jsonl_rows(const std::filesystem::path& file) {
  std::vector<Json> rows;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

inline void write_jsonl_rows(const std::filesystem::path& file, const std::vector<Json>& rows) {
  std::ofstream out(file);
  for (const auto& r : rows) out << r.dump() << "\n";
}

}  // namespace furlong::testing
