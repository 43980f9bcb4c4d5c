#include "common/tiny_models.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "core/files.h"

namespace furlong::testing {

namespace fs = std::filesystem;

Json tiny_model_config(TinyFamily family, const Json& overrides) {
  if (family == TinyFamily::kQwen3Moe) {
    return as_qwen3_moe(tiny_model_config(TinyFamily::kQwen3), overrides);
  }
  Json c{{"hidden_size", 64},          {"intermediate_size", 128}, {"num_hidden_layers", 2},
         {"num_attention_heads", 4},   {"num_key_value_heads", 2}, {"max_position_embeddings", 64},
         {"tie_word_embeddings", true}};
  switch (family) {
    case TinyFamily::kQwen3:
      c["architectures"] = {"Qwen3ForCausalLM"};
      c["model_type"] = "qwen3";
      c["head_dim"] = 16;
      break;
    case TinyFamily::kQwen2:
      c["architectures"] = {"Qwen2ForCausalLM"};
      c["model_type"] = "qwen2";
      break;
    case TinyFamily::kLlama:
      c["architectures"] = {"LlamaForCausalLM"};
      c["model_type"] = "llama";
      break;
    case TinyFamily::kQwen3Moe:
      break;
  }
  c.merge_patch(overrides);
  return c;
}

Json tiny_qwen3_5_config(const Json& overrides) {
  Json c{{"architectures", {"Qwen3_5ForCausalLM"}},
         {"model_type", "qwen3_5_text"},
         {"vocab_size", 97},
         {"hidden_size", 48},
         {"intermediate_size", 96},
         {"num_hidden_layers", 4},
         {"num_attention_heads", 4},
         {"num_key_value_heads", 2},
         {"head_dim", 16},
         {"linear_num_key_heads", 2},
         {"linear_num_value_heads", 4},
         {"linear_key_head_dim", 8},
         {"linear_value_head_dim", 12},
         {"linear_conv_kernel_dim", 4},
         {"max_position_embeddings", 256},
         {"tie_word_embeddings", false},
         {"initializer_range", 0.1},
         {"rms_norm_eps", 1e-6}};
  c.merge_patch(overrides);
  return c;
}

Json tiny_qwen3_5_moe_config(const Json& overrides) {
  Json c = tiny_qwen3_5_config({{"architectures", {"Qwen3_5MoeForCausalLM"}},
                                {"model_type", "qwen3_5_moe_text"},
                                {"intermediate_size", nullptr},
                                {"num_experts", 8},
                                {"num_experts_per_tok", 2},
                                {"moe_intermediate_size", 16},
                                {"shared_expert_intermediate_size", 24}});
  c.merge_patch(overrides);
  return c;
}

Json tiny_qwen3_5_multimodal_config(const Json& text) {
  const bool moe = text.value("model_type", std::string()) == "qwen3_5_moe_text";
  Json text_config = text;
  text_config.erase("architectures");
  return {{"architectures",
           {moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"}},
          {"model_type", moe ? "qwen3_5_moe" : "qwen3_5"},
          {"tie_word_embeddings", text.value("tie_word_embeddings", false)},
          {"text_config", text_config},
          {"vision_config",
           {{"depth", 1},
            {"hidden_size", 32},
            {"intermediate_size", 64},
            {"num_heads", 2},
            {"out_hidden_size", text.at("hidden_size")},
            {"patch_size", 4},
            {"num_position_embeddings", 16}}}};
}

Json as_qwen3_moe(Json config, const Json& overrides) {
  config["architectures"] = {"Qwen3MoeForCausalLM"};
  config["model_type"] = "qwen3_moe";
  config["num_hidden_layers"] = 3;
  config["num_experts"] = 8;
  config["num_experts_per_tok"] = 2;
  config["moe_intermediate_size"] = 32;
  config["norm_topk_prob"] = true;
  config["mlp_only_layers"] = {1};
  config.merge_patch(overrides);
  return config;
}

fs::path init_model(const fs::path& dir, const std::string& name, const Json& config,
                    const fs::path& tokenizer, int seed, const std::string& dtype) {
  const auto config_file = dir / (name + ".config.json");
  write_file_atomic(config_file, config.dump());
  const auto out = dir / name;
  auto r = run_command(shell_quote(furlong_binary().string()) + " init-model --config " +
                       shell_quote(config_file.string()) + " --tokenizer " +
                       shell_quote(tokenizer.string()) + " --out " + shell_quote(out.string()) +
                       " --seed " + std::to_string(seed) + " --dtype " + dtype + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

}  // namespace furlong::testing
