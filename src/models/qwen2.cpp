// Qwen2ForCausalLM: Llama-family decoder with biases on the q/k/v projections (always) and
// none on o_proj or the MLP. Defaults mirror transformers' Qwen2Config.
#include "models/decoder_lm.h"
#include "models/registry.h"

namespace furlong::models {

std::unique_ptr<CausalLM> create_qwen2(const Json& json, const std::string& where) {
  ConfigDefaults defaults{.vocab_size = 151936,
                          .hidden_size = 4096,
                          .intermediate_size = 22016,
                          .num_hidden_layers = 32,
                          .num_attention_heads = 32,
                          .num_key_value_heads = 32,
                          .head_dim = std::nullopt,
                          .max_position_embeddings = 32768};
  ModelConfig config = parse_decoder_config(json, where, defaults);
  config.architecture = "Qwen2ForCausalLM";
  config.qkv_bias = true;
  return std::make_unique<DecoderLM>(std::move(config));
}

}  // namespace furlong::models
