// LlamaForCausalLM (Llama 2/3.x): the plain Llama-family decoder; attention_bias adds biases to
// q/k/v/o, mlp_bias to the MLP. Llama 3.1+ checkpoints use the "llama3" rope scaling.
// Defaults mirror transformers' LlamaConfig.
#include "models/decoder_lm.h"
#include "models/registry.h"

namespace furlong::models {

std::unique_ptr<CausalLM> create_llama(const Json& json, const std::string& where) {
  ConfigDefaults defaults{.vocab_size = 32000,
                          .hidden_size = 4096,
                          .intermediate_size = 11008,
                          .num_hidden_layers = 32,
                          .num_attention_heads = 32,
                          .num_key_value_heads = std::nullopt,
                          .head_dim = std::nullopt,
                          .max_position_embeddings = 2048};
  ModelConfig config = parse_decoder_config(json, where, defaults);
  config.architecture = "LlamaForCausalLM";
  bool attention_bias = json_get_or<bool>(json, "attention_bias", false, where);
  config.qkv_bias = attention_bias;
  config.o_proj_bias = attention_bias;
  config.mlp_bias = json_get_or<bool>(json, "mlp_bias", false, where);
  return std::make_unique<DecoderLM>(std::move(config));
}

}  // namespace furlong::models
