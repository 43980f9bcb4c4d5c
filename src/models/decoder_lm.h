// The Llama-family decoder block shared by Qwen3, Qwen2 and Llama (pre-norm, grouped-query
// attention with rotary embeddings, SwiGLU MLP). Architectures differ in which optional
// parameters exist (q/k/v/o biases, per-head q/k RMSNorm, MLP biases); each architecture file
// parses its config and sets the switches in ModelConfig accordingly.
#pragma once

#include "models/causal_lm.h"

namespace furlong::models {

class DecoderLM : public CausalLM {
 public:
  explicit DecoderLM(ModelConfig config);
  at::Tensor block(int64_t layer, const UnitTensors& params, const at::Tensor& x_PD,
                   const ForwardContext& ctx) const override;

 private:
  // Index of each block parameter in the unit (-1 where the architecture has none).
  struct Slots {
    int input_norm = -1, q = -1, q_bias = -1, k = -1, k_bias = -1, v = -1, v_bias = -1, o = -1,
        o_bias = -1, q_norm = -1, k_norm = -1, post_norm = -1, gate = -1, gate_bias = -1, up = -1,
        up_bias = -1, down = -1, down_bias = -1;
  };
  std::vector<ParamSpec> block_param_specs();
  Slots slots_;
};

}  // namespace furlong::models
