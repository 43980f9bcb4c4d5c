// Shared pieces of the CUDA test subset (tests/cuda): which device the "GPU side" runs on, the
// tiny models both sides load, and the figures the tests hand to scripts/device_check.sh.
#pragma once

#include <c10/core/Device.h>

#include <filesystem>
#include <optional>
#include <string>

#include "core/json_util.h"

namespace furlong::cuda_testing {

// cuda:0 when libtorch sees a GPU. Without one: the CPU when FURLONG_CUDA_TESTS_ON_CPU=1 (the
// tests then compare CPU with CPU, which checks their own logic on a machine without a GPU),
// else nothing and the test skips.
std::optional<c10::Device> test_device();

// Why a test skipped: names the missing GPU and the variable above.
std::string skip_reason();

// The tiny Qwen3 of the arithmetic task (tests/common/arith_task.h: hidden 64, 2 layers, 4/2
// heads of 16, vocab 32, tied embeddings), initialized with `seed` and saved in `dtype` to a
// fresh directory under the test scratch folder, with the arithmetic tokenizer beside it.
std::filesystem::path write_tiny_model(const std::string& name, uint64_t seed,
                                       const std::string& dtype);
Json tiny_config();

// Appends {"test": name, ...figures} as one JSON line to $FURLONG_DEVICE_CHECK_RECORDS when
// set (scripts/device_check.sh collects them into its JSON), and prints it either way.
void record(const std::string& name, Json figures);

}  // namespace furlong::cuda_testing

// Skips the calling test when there is no device to run on.
#define FURLONG_REQUIRE_TEST_DEVICE(var)                                  \
  auto var##_opt = ::furlong::cuda_testing::test_device();                \
  if (!var##_opt) GTEST_SKIP() << ::furlong::cuda_testing::skip_reason(); \
  const c10::Device var = *var##_opt
