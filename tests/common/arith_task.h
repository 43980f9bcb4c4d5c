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

// The config.json of the tiny Qwen3 (common/tiny_models.h's, with the arithmetic tokenizer's 32
// rows and end token, rope_theta 10000).
Json arith_qwen3_config();

// A fresh, empty directory build/tests/<area>/<name>.<pid>: one per test process, because ctest
// runs the cases of one program in parallel processes.
std::filesystem::path fresh_process_dir(const std::string& area, const std::string& name);

// The arithmetic tokenizer's files (examples/tokenizers/arith).
std::filesystem::path arith_tokenizer_dir();

// init_model (common/tiny_models.h) of `config` with the arithmetic tokenizer into <dir>/<name>.
std::filesystem::path init_tiny_model(const std::filesystem::path& dir, const std::string& name,
                                      int seed = 7, const std::string& dtype = "float32",
                                      const Json& config = arith_qwen3_config());

// Writes one JSONL row per prompt (a-major order) to `path`: `row(a, b)`.
void write_arith_rows(const std::filesystem::path& path, const std::function<Json(int, int)>& row);

// The threshold task: {"input": "a+b=", "label": "1" if a + b >= 5 else "0"}.
Json threshold_row(int a, int b);

}  // namespace furlong::testing
