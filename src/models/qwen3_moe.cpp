// Qwen3MoeForCausalLM: Qwen3's attention (per-head q/k RMSNorm, explicit head_dim) with a
// mixture-of-experts MLP in the layers the config makes sparse: layer l is sparse when
// (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers; the others keep a dense
// SwiGLU MLP of intermediate_size. Each sparse layer routes every token to its top
// num_experts_per_tok of num_experts experts (SwiGLU of moe_intermediate_size each).
// Defaults mirror transformers' Qwen3MoeConfig.
#include "models/decoder_lm.h"
#include "models/registry.h"

namespace furlong::models {
namespace {

MoeConfig parse_moe(const Json& json, const std::string& where, int64_t num_layers) {
  MoeConfig moe;
  // transformers 5 writes the expert count as "num_local_experts"; published configs say
  // "num_experts".
  int64_t experts = json_get_or<int64_t>(json, "num_local_experts", 128, where);
  moe.num_experts = json_get_or<int64_t>(json, "num_experts", experts, where);
  moe.experts_per_token = json_get_or<int64_t>(json, "num_experts_per_tok", 8, where);
  moe.expert_intermediate = json_get_or<int64_t>(json, "moe_intermediate_size", 768, where);
  moe.decoder_sparse_step = json_get_or<int64_t>(json, "decoder_sparse_step", 1, where);
  moe.norm_topk_prob = json_get_or<bool>(json, "norm_topk_prob", false, where);
  moe.router_aux_loss_coef = json_get_or<double>(json, "router_aux_loss_coef", 0.001, where);
  if (json.contains("mlp_only_layers") && !json["mlp_only_layers"].is_null()) {
    moe.mlp_only_layers = json_get<std::vector<int64_t>>(json, "mlp_only_layers", where);
  }
  FURLONG_CHECK(moe.num_experts > 0, where, ": field 'num_experts' must be positive, got ",
                moe.num_experts);
  FURLONG_CHECK(moe.experts_per_token > 0 && moe.experts_per_token <= moe.num_experts, where,
                ": field 'num_experts_per_tok' must be in [1, num_experts = ", moe.num_experts,
                "], got ", moe.experts_per_token);
  FURLONG_CHECK(moe.expert_intermediate > 0, where,
                ": field 'moe_intermediate_size' must be positive, got ", moe.expert_intermediate);
  FURLONG_CHECK(moe.decoder_sparse_step > 0, where,
                ": field 'decoder_sparse_step' must be positive, got ", moe.decoder_sparse_step);
  for (int64_t l : moe.mlp_only_layers) {
    FURLONG_CHECK(l >= 0 && l < num_layers, where, ": field 'mlp_only_layers' names layer ", l,
                  ", expected a layer in [0, num_hidden_layers = ", num_layers, ")");
  }
  return moe;
}

}  // namespace

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
  config.moe = parse_moe(json, where, config.num_hidden_layers);
  check_plausible_size(config, where);
  return std::make_unique<DecoderLM>(std::move(config));
}

}  // namespace furlong::models
