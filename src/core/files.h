// File helpers whose errors name the path and the OS reason.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace furlong {

std::string read_file(const std::filesystem::path& path);
// Writes to a temporary file next to `path`, fsyncs it, then renames it over `path`, so a
// reader sees either the old content or the new, never a torn file.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);
void ensure_directory(const std::filesystem::path& path);
// Reads a JSONL file line by line; calls fn(line_number (1-based), line) for non-blank lines.
template <typename Fn>
void for_each_line(const std::filesystem::path& path, Fn&& fn);

std::string human_bytes(uint64_t bytes);

}  // namespace furlong

#include <fstream>

#include "core/error.h"

template <typename Fn>
void furlong::for_each_line(const std::filesystem::path& path, Fn&& fn) {
  std::ifstream in(path);
  FURLONG_CHECK(in.good(), path.string(), ": cannot open for reading");
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    fn(line_number, line);
  }
}
