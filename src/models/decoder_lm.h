// The Llama-family decoder block shared by Qwen3, Qwen2 and Llama (pre-norm, grouped-query
// attention with rotary embeddings, SwiGLU MLP). Architectures differ in which optional
// parameters exist (q/k/v/o biases, per-head q/k RMSNorm, MLP biases); each architecture file
// parses its config and sets the switches in ModelConfig accordingly. With ModelConfig::moe
// enabled, the layers it names as sparse replace the MLP with a mixture of experts
// (models/moe.h; Qwen3-MoE).
#pragma once

#include "models/causal_lm.h"

namespace furlong::models {

// Qwen3's attention switches (Qwen3 and Qwen3-MoE): per-head q/k RMSNorm, and q/k/v/o biases
// when the config sets attention_bias.
void set_qwen3_attention(ModelConfig& config, const Json& json, const std::string& where);

class DecoderLM : public CausalLM {
 public:
  explicit DecoderLM(ModelConfig config);
  at::Tensor block(int64_t layer, const UnitTensors& params, const at::Tensor& x_PD,
                   const ForwardContext& ctx) const override;

 protected:
  bool computes_lora() const override { return true; }

 private:
  // Index of each block parameter in the unit (-1 where the architecture has none).
  struct Slots {
    int input_norm = -1, q = -1, q_bias = -1, k = -1, k_bias = -1, v = -1, v_bias = -1, o = -1,
        o_bias = -1, q_norm = -1, k_norm = -1, post_norm = -1, gate = -1, gate_bias = -1, up = -1,
        up_bias = -1, down = -1, down_bias = -1;
  };
  // The parameters of `layer`; the attention part (and so its slots) is the same in every
  // layer; sparse layers put the router and the experts where dense ones have the MLP.
  std::vector<ParamSpec> block_param_specs(int64_t layer);
  at::Tensor attention_half(int64_t layer, const UnitTensors& p, const at::Tensor& x_PD,
                            const ForwardContext& ctx) const;
  at::Tensor sparse_mlp(int64_t layer, const UnitTensors& p, const at::Tensor& h_PD,
                        const ForwardContext& ctx) const;
  Slots slots_;
  int router_slot_ = -1;  // sparse layers: router, then gate/up/down of expert 0, 1, ...
};

}  // namespace furlong::models
