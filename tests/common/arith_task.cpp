#include "common/arith_task.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "common/test_util.h"

namespace furlong::testing {

namespace fs = std::filesystem;

std::string tiny_qwen3_config_json() {
  return R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "vocab_size": 32, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "max_position_embeddings": 64, "rope_theta": 10000.0,
    "tie_word_embeddings": true, "eos_token_id": 17})";
}

fs::path fresh_process_dir(const std::string& area, const std::string& name) {
  auto dir = binary_dir() / "tests" / area / (name + "." + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path init_tiny_model(const fs::path& dir, const std::string& name, int seed,
                         const std::string& dtype, const std::string& config_json) {
  const auto config = dir / (name + ".config.json");
  std::ofstream(config) << config_json;
  const auto out = dir / name;
  auto r = run_command(shell_quote(furlong_binary().string()) + " init-model --config " +
                       shell_quote(config.string()) + " --tokenizer " +
                       shell_quote((source_dir() / "examples/tokenizers/arith").string()) +
                       " --out " + shell_quote(out.string()) + " --seed " + std::to_string(seed) +
                       " --dtype " + dtype + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
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

std::vector<std::string> threshold_grpo_flags(const fs::path& model, const fs::path& prompts,
                                              int num_rollout) {
  return {"--hf-checkpoint",
          model.string(),
          "--prompt-data",
          prompts.string(),
          "--input-key",
          "input",
          "--label-key",
          "label",
          "--rm-type",
          "exact_match",
          "--rollout-skip-special-tokens",
          "--rollout-shuffle",
          "--rollout-batch-size",
          "8",
          "--n-samples-per-prompt",
          "8",
          "--global-batch-size",
          "64",
          "--num-rollout",
          std::to_string(num_rollout),
          "--rollout-max-response-len",
          "2"};
}

}  // namespace furlong::testing
