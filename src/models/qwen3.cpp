// Qwen3ForCausalLM: Llama-family decoder with per-head RMSNorm on queries and keys (q_norm,
// k_norm over the head dim, before RoPE) and an explicit head_dim. Attention biases only when
// the config sets attention_bias. Defaults mirror transformers' Qwen3Config.
#include "models/decoder_lm.h"
#include "models/registry.h"

namespace furlong::models {

void set_qwen3_attention(ModelConfig& config, const Json& json, const std::string& where) {
  bool attention_bias = json_get_or<bool>(json, "attention_bias", false, where);
  config.qkv_bias = attention_bias;
  config.o_proj_bias = attention_bias;
  config.qk_norm = true;
}

std::unique_ptr<CausalLM> create_qwen3(const Json& json, const std::string& where) {
  ConfigDefaults defaults{.vocab_size = 151936,
                          .hidden_size = 4096,
                          .intermediate_size = 22016,
                          .num_hidden_layers = 32,
                          .num_attention_heads = 32,
                          .num_key_value_heads = 32,
                          .head_dim = 128,
                          .max_position_embeddings = 32768};
  ModelConfig config = parse_decoder_config(json, where, defaults);
  config.architecture = "Qwen3ForCausalLM";
  set_qwen3_attention(config, json, where);
  return std::make_unique<DecoderLM>(std::move(config));
}

}  // namespace furlong::models
