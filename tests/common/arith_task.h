// The tiny RL task of furlong's end-to-end tests: a random 2-layer Qwen3 with 32 embedding rows,
// made by `furlong init-model` with the arithmetic tokenizer (examples/tokenizers/arith, whose
// end token is id 17), and the 55 prompts "a+b=" for a, b >= 0 with a + b <= 9.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace furlong::testing {

// The config.json of the tiny Qwen3 (hidden 64, 2 layers, 4/2 heads of 16, tied embeddings).
std::string tiny_qwen3_config_json();

// A fresh, empty directory build/tests/<area>/<name>.<pid>: one per test process, because ctest
// runs the cases of one program in parallel processes.
std::filesystem::path fresh_process_dir(const std::string& area, const std::string& name);

// Writes `config_json` to <dir>/<name>.config.json and runs `furlong init-model` with the
// arithmetic tokenizer into <dir>/<name>; a test failure (with init-model's output) if it fails.
std::filesystem::path init_tiny_model(const std::filesystem::path& dir, const std::string& name,
                                      int seed = 7, const std::string& dtype = "float32",
                                      const std::string& config_json = tiny_qwen3_config_json());

// Writes one JSONL row per prompt (a-major order) to `path`: `row(a, b)`.
void write_arith_rows(const std::filesystem::path& path, const std::function<Json(int, int)>& row);

// The threshold task: {"input": "a+b=", "label": "1" if a + b >= 5 else "0"}.
Json threshold_row(int a, int b);

// `furlong train` flags of the threshold task's GRPO runs: the model and prompts (input/label
// keys, exact-match reward, special tokens skipped, shuffled), 8 prompts x 8 samples per
// rollout, one global batch of 64, responses of at most 2 tokens, `num_rollout` rollouts.
std::vector<std::string> threshold_grpo_flags(const std::filesystem::path& model,
                                              const std::filesystem::path& prompts,
                                              int num_rollout);

}  // namespace furlong::testing
