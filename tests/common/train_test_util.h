// Helpers for the training-backend tests: tiny HF model directories, pre-tokenized SFT data,
// running a program as N ranks, and comparing the workers' dumps.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace furlong::testing {

// A tiny Qwen3-style config (vocab 61 and other sizes chosen so that dim-0 sharding over 4 ranks
// pads: 61 rows -> 16 per rank, the last holding 13).
Json tiny_config(bool tied);
// Writes a seeded random model with `config` in `dtype` to dir.
void write_model(const std::filesystem::path& dir, const Json& config, c10::ScalarType dtype,
                 uint64_t seed);
// `n` pre-tokenized SFT rows of varied prompt/response lengths (tokens < vocab).
void write_sft_data(const std::filesystem::path& file, int n, int vocab, uint64_t seed);

struct RunResult {
  int exit_code = 0;
  std::string output;
};
// Runs argv as `nproc` ranks through dist::launch (nproc 0: one process without the env).
RunResult run_ranks(int nproc, const std::vector<std::string>& argv);

// The worker's dumps: rank -> name -> tensor.
std::map<int, std::map<std::string, at::Tensor>> read_dumps(const std::filesystem::path& dir,
                                                            int ranks);
// Largest violation of |a - b| <= atol + rtol |b| over all tensors of `got` vs `want` (<= 0
// means all within tolerance); reports the worst tensor name in `worst`.
double max_violation(const std::map<std::string, at::Tensor>& got,
                     const std::map<std::string, at::Tensor>& want, double rtol, double atol,
                     std::string* worst);

std::filesystem::path worker_binary();

}  // namespace furlong::testing
