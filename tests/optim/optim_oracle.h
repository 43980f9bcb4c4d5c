// The cases the optim tests check against scripts/oracles/optim_reference.py, one plan for
// the whole binary (one Python run per build tree, cached), and helpers to read its outputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "optim/lr_scheduler.h"

namespace furlong::optim::testing {

struct AdamWCase {
  std::string name;
  std::string dtype;  // "float32" | "bfloat16"
  std::vector<std::vector<int64_t>> shapes;
  int seed = 0;
  std::vector<double> lrs;  // one per step
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  std::vector<std::pair<int, int>> no_grad;  // (step, parameter index) without a grad
};

struct ClipCase {
  std::string name;
  std::string dtype;
  std::vector<std::vector<int64_t>> shapes;
  int seed = 0;
  double scale = 1.0;
  double max_norm = 1.0;
  std::string special;  // "", "inf" or "nan": written into the first element of grad 0
};

struct LrCase {
  std::string name;
  nlohmann::json options;  // LrScheduleOptions fields by name; absent = default
  int64_t train_iters = 0;
  int64_t steps = 0;  // LRs compared for scheduler steps 0 .. steps-1
};

const std::vector<AdamWCase>& adamw_cases();
const std::vector<ClipCase>& clip_cases();
const std::vector<LrCase>& lr_cases();
const ClipCase& clip_case(const std::string& name);

// Runs the oracle (once per build tree) and returns its output directory.
const std::filesystem::path& oracle_dir();
std::shared_ptr<io::SafetensorsFile> oracle_file(const std::string& name);
// A writable copy of a tensor from an oracle file.
at::Tensor oracle_tensor(const io::SafetensorsFile& file, const std::string& name);
LrScheduleOptions lr_options(const nlohmann::json& options);

// Largest distance in units in the last place between two float32 or bfloat16 tensors of the
// same shape and dtype (0 = bit-identical; NaNs must sit at the same places).
int64_t max_ulp_diff(const at::Tensor& a, const at::Tensor& b);
// max |a - b| / (eps * max(|b|, floor)), eps the dtype's machine epsilon (2^-23 for float32,
// 2^-7 for bfloat16): an error in units of roundings at b's scale, where `floor` is the scale
// below which values are cancellation results whose ulp says nothing.
double max_eps_diff(const at::Tensor& a, const at::Tensor& b, double floor);

}  // namespace furlong::optim::testing
