#include "common/train_test_util.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>

#include "common/random_models.h"
#include "common/test_util.h"
#include "common/tiny_models.h"
#include "core/files.h"
#include "dist/launcher.h"
#include "io/safetensors.h"
#include "models/hf_model.h"
#include "models/registry.h"

namespace furlong::testing {

Json tiny_config(bool tied) {
  return furlong::testing::tiny_model_config(furlong::testing::TinyFamily::kQwen3,
                                             {{"vocab_size", 61},
                                              {"hidden_size", 24},
                                              {"intermediate_size", 40},
                                              {"head_dim", 6},
                                              {"max_position_embeddings", 256},
                                              {"tie_word_embeddings", tied},
                                              {"initializer_range", 0.2}});
}

void write_model(const std::filesystem::path& dir, const Json& config, c10::ScalarType dtype,
                 uint64_t seed) {
  write_random_model(dir, config, seed, dtype);
}

void write_sft_data(const std::filesystem::path& file, int n, int vocab, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> token(0, vocab - 1), prompt_len(2, 9), response_len(1, 7);
  std::string text;
  for (int i = 0; i < n; ++i) {
    Json prompt = Json::array(), response = Json::array();
    for (int k = prompt_len(rng); k > 0; --k) prompt.push_back(token(rng));
    for (int k = response_len(rng); k > 0; --k) response.push_back(token(rng));
    text += Json{{"prompt_ids", prompt}, {"response_ids", response}}.dump() + "\n";
  }
  write_file_atomic(file, text);
}

RunResult run_ranks(int nproc, const std::vector<std::string>& argv) {
  RunResult result;
  if (nproc == 0) {
    std::string cmd = "env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT";
    for (const auto& a : argv) cmd += " " + furlong::testing::shell_quote(a);
    auto r = furlong::testing::run_command(cmd);
    return {r.exit_code, r.output};
  }
  dist::LaunchOptions options;
  options.nproc_per_node = nproc;
  options.command = argv;
  options.output = [&](const std::string& line, bool) { result.output += line + "\n"; };
  result.exit_code = dist::launch(options);
  return result;
}

std::map<int, std::map<std::string, at::Tensor>> read_dumps(const std::filesystem::path& dir,
                                                            int ranks) {
  std::map<int, std::map<std::string, at::Tensor>> out;
  for (int r = 0; r < ranks; ++r) {
    auto file = io::SafetensorsFile::open(dir / ("rank-" + std::to_string(r) + ".safetensors"));
    for (const auto& info : file->tensors()) out[r][info.name] = file->tensor(info.name).clone();
  }
  return out;
}

double max_violation(const std::map<std::string, at::Tensor>& got,
                     const std::map<std::string, at::Tensor>& want, double rtol, double atol,
                     std::string* worst) {
  double violation = -1e30;
  EXPECT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    auto g = it->second.to(at::kDouble), wd = w.to(at::kDouble);
    double v = ((g - wd).abs() - (atol + rtol * wd.abs())).max().item<double>();
    if (v > violation) {
      violation = v;
      if (worst) *worst = name;
    }
  }
  return violation;
}

std::filesystem::path worker_binary() {
  return furlong::testing::binary_dir() / "tests" / "backend" / "fsdp_worker";
}

}  // namespace furlong::testing
