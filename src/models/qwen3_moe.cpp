// Qwen3MoeForCausalLM: Qwen3's attention (per-head q/k RMSNorm, explicit head_dim) with a
// mixture-of-experts MLP in the layers the config makes sparse: layer l is sparse when
// (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers; the others keep a dense
// SwiGLU MLP of intermediate_size. Each sparse layer routes every token to its top
// num_experts_per_tok of num_experts experts (SwiGLU of moe_intermediate_size each).
// Defaults mirror transformers' Qwen3MoeConfig.
#include "models/decoder_lm.h"
#include "models/registry.h"

namespace furlong::models {
std::unique_ptr<CausalLM> create_qwen3_moe(const Json& json, const std::string& where) {
  ConfigDefaults defaults{.vocab_size = 151936,
                          .hidden_size = 2048,
                          .intermediate_size = 6144,
                          .num_hidden_layers = 24,
                          .num_attention_heads = 32,
                          .num_key_value_heads = 4,
                          .head_dim = std::nullopt,  // hidden_size / num_attention_heads
                          .max_position_embeddings = 32768};
  ModelConfig config = parse_decoder_config(json, where, defaults);
  config.architecture = "Qwen3MoeForCausalLM";
  set_qwen3_attention(config, json, where);
  config.moe =
      parse_moe_config(json, where, config.num_hidden_layers,
                       {.num_experts = 128, .experts_per_token = 8, .expert_intermediate = 768});
  check_plausible_size(config, where);
  return std::make_unique<DecoderLM>(std::move(config));
}

}  // namespace furlong::models
