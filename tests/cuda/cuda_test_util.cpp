#include "cuda_test_util.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "common/arith_task.h"
#include "common/random_models.h"
#include "common/test_util.h"
#include "core/dtype.h"
#include "models/hf_model.h"
#include "models/registry.h"

namespace furlong::cuda_testing {

namespace fs = std::filesystem;

std::optional<c10::Device> test_device() {
  if (at::hasCUDA()) return c10::Device(c10::kCUDA, 0);
  const char* on_cpu = std::getenv("FURLONG_CUDA_TESTS_ON_CPU");
  if (on_cpu != nullptr && std::string(on_cpu) == "1") return c10::Device(c10::kCPU);
  return std::nullopt;
}

std::string skip_reason() {
  return "no CUDA device: at::hasCUDA() is false (a CPU libtorch, or no GPU visible); these "
         "tests run on the GPU machine (scripts/device_check.sh). FURLONG_CUDA_TESTS_ON_CPU=1 "
         "runs their logic CPU against CPU.";
}

Json tiny_config() {
  return furlong::testing::arith_qwen3_config();
}

fs::path write_tiny_model(const std::string& name, uint64_t seed, const std::string& dtype) {
  const auto dir = furlong::testing::scratch_dir() / name;
  furlong::testing::write_random_model(dir, tiny_config(), seed, parse_dtype(dtype, "dtype"),
                                       furlong::testing::arith_tokenizer_dir());
  return dir;
}

void record(const std::string& name, Json figures) {
  figures["test"] = name;
  const auto line = figures.dump();
  std::printf("device-check record: %s\n", line.c_str());
  if (const char* path = std::getenv("FURLONG_DEVICE_CHECK_RECORDS")) {
    std::ofstream(path, std::ios::app) << line << "\n";
  }
}

}  // namespace furlong::cuda_testing
