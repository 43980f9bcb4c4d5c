#include "common/arith_task.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <system_error>
#include <vector>

#include "common/test_util.h"
#include "common/tiny_models.h"

namespace furlong::testing {

namespace fs = std::filesystem;

Json arith_qwen3_config() {
  return tiny_model_config(TinyFamily::kQwen3,
                           {{"vocab_size", 32}, {"rope_theta", 10000.0}, {"eos_token_id", 17}});
}

namespace {

// The directories fresh_process_dir made, removed when the test binary exits (by the process
// that made them, not by a forked child that exits).
struct ProcessDirs {
  pid_t owner = ::getpid();
  std::vector<fs::path> dirs;
  ~ProcessDirs() {
    if (::getpid() != owner) return;
    std::error_code ignored;
    for (const auto& d : dirs) fs::remove_all(d, ignored);
  }
};

ProcessDirs& process_dirs() {
  static ProcessDirs dirs;
  return dirs;
}

}  // namespace

fs::path fresh_process_dir(const std::string& area, const std::string& name) {
  auto dir = binary_dir() / "tests" / area / (name + "." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  process_dirs().dirs.push_back(dir);
  return dir;
}

fs::path arith_tokenizer_dir() {
  return source_dir() / "examples/tokenizers/arith";
}

fs::path init_tiny_model(const fs::path& dir, const std::string& name, int seed,
                         const std::string& dtype, const Json& config) {
  return init_model(dir, name, config, arith_tokenizer_dir(), seed, dtype);
}

void write_arith_rows(const fs::path& path, const std::function<Json(int, int)>& row) {
  std::ofstream out(path);
  for (int a = 0; a <= 9; ++a) {
    for (int b = 0; a + b <= 9; ++b) out << row(a, b).dump() << "\n";
  }
}

Json threshold_row(int a, int b) {
  return Json{{"input", std::to_string(a) + "+" + std::to_string(b) + "="},
              {"label", a + b >= 5 ? "1" : "0"}};
}

}  // namespace furlong::testing
