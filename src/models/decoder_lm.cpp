#include "models/decoder_lm.h"

#include <ATen/ATen.h>

#include <cmath>

namespace furlong::models {

DecoderLM::DecoderLM(ModelConfig config) : CausalLM(std::move(config)) {
  build_units([this](int64_t layer) { return block_param_specs(layer); });
}

std::vector<ParamSpec> DecoderLM::block_param_specs(int64_t layer) {
  const auto& c = config_;
  const int64_t D = c.hidden_size, H = c.head_dim, F = c.intermediate_size;
  const int64_t NH = c.num_attention_heads * H, KH = c.num_key_value_heads * H;
  std::vector<ParamSpec> specs;
  auto add = [&](int& slot, std::string name, std::vector<int64_t> shape, ParamInit init) {
    slot = static_cast<int>(specs.size());
    specs.push_back({std::move(name), std::move(shape), init});
  };
  add(slots_.input_norm, "input_layernorm.weight", {D}, ParamInit::kOnes);
  add(slots_.q, "self_attn.q_proj.weight", {NH, D}, ParamInit::kNormal);
  if (c.qkv_bias) add(slots_.q_bias, "self_attn.q_proj.bias", {NH}, ParamInit::kZeros);
  add(slots_.k, "self_attn.k_proj.weight", {KH, D}, ParamInit::kNormal);
  if (c.qkv_bias) add(slots_.k_bias, "self_attn.k_proj.bias", {KH}, ParamInit::kZeros);
  add(slots_.v, "self_attn.v_proj.weight", {KH, D}, ParamInit::kNormal);
  if (c.qkv_bias) add(slots_.v_bias, "self_attn.v_proj.bias", {KH}, ParamInit::kZeros);
  add(slots_.o, "self_attn.o_proj.weight", {D, NH}, ParamInit::kNormal);
  if (c.o_proj_bias) add(slots_.o_bias, "self_attn.o_proj.bias", {D}, ParamInit::kZeros);
  if (c.qk_norm) {
    add(slots_.q_norm, "self_attn.q_norm.weight", {H}, ParamInit::kOnes);
    add(slots_.k_norm, "self_attn.k_norm.weight", {H}, ParamInit::kOnes);
  }
  add(slots_.post_norm, "post_attention_layernorm.weight", {D}, ParamInit::kOnes);
  if (c.moe.is_sparse_layer(layer)) {
    const int64_t E = c.moe.num_experts, FE = c.moe.expert_intermediate;
    add(router_slot_, "mlp.gate.weight", {E, D}, ParamInit::kNormal);
    for (int64_t e = 0; e < E; ++e) {
      std::string expert = "mlp.experts." + std::to_string(e) + ".";
      specs.push_back({expert + "gate_proj.weight", {FE, D}, ParamInit::kNormal});
      specs.push_back({expert + "up_proj.weight", {FE, D}, ParamInit::kNormal});
      specs.push_back({expert + "down_proj.weight", {D, FE}, ParamInit::kNormal});
    }
    return specs;
  }
  add(slots_.gate, "mlp.gate_proj.weight", {F, D}, ParamInit::kNormal);
  if (c.mlp_bias) add(slots_.gate_bias, "mlp.gate_proj.bias", {F}, ParamInit::kZeros);
  add(slots_.up, "mlp.up_proj.weight", {F, D}, ParamInit::kNormal);
  if (c.mlp_bias) add(slots_.up_bias, "mlp.up_proj.bias", {F}, ParamInit::kZeros);
  add(slots_.down, "mlp.down_proj.weight", {D, F}, ParamInit::kNormal);
  if (c.mlp_bias) add(slots_.down_bias, "mlp.down_proj.bias", {D}, ParamInit::kZeros);
  return specs;
}

at::Tensor DecoderLM::attention_half(int64_t layer, const UnitTensors& p, const at::Tensor& x_PD,
                                     const ForwardContext& ctx) const {
  const auto& c = config_;
  auto opt = [&](int slot) { return slot >= 0 ? p[slot] : at::Tensor(); };
  const int64_t P = x_PD.size(0), N = c.num_attention_heads, K = c.num_key_value_heads;
  const int64_t H = c.head_dim;

  const bool fused = ctx.fused_kernels;
  const LinearFn& lin = ctx.linear_override;
  auto h_PD = rms_norm(x_PD, p[slots_.input_norm], c.rms_norm_eps, fused);
  auto q_PNH = project(layer, lin, h_PD, p, slots_.q, opt(slots_.q_bias)).view({P, N, H});
  auto k_PKH = project(layer, lin, h_PD, p, slots_.k, opt(slots_.k_bias)).view({P, K, H});
  auto v_PKH = project(layer, lin, h_PD, p, slots_.v, opt(slots_.v_bias)).view({P, K, H});
  if (c.qk_norm) {
    q_PNH = rms_norm(q_PNH, p[slots_.q_norm], c.rms_norm_eps, fused);
    k_PKH = rms_norm(k_PKH, p[slots_.k_norm], c.rms_norm_eps, fused);
  }
  q_PNH = apply_rope(q_PNH, ctx.cos_PH, ctx.sin_PH, fused);
  k_PKH = apply_rope(k_PKH, ctx.cos_PH, ctx.sin_PH, fused);
  double scale = 1.0 / std::sqrt(static_cast<double>(H));
  auto o_PNH = ctx.attention_override ? ctx.attention_override(layer, q_PNH, k_PKH, v_PKH, scale)
                                      : attention(q_PNH, k_PKH, v_PKH, ctx.batch, ctx.attn, scale);
  auto attn_PD = project(layer, lin, o_PNH.reshape({P, N * H}), p, slots_.o, opt(slots_.o_bias));
  return x_PD + attn_PD;
}

at::Tensor DecoderLM::sparse_mlp(int64_t layer, const UnitTensors& p, const at::Tensor& h_PD,
                                 const ForwardContext& ctx) const {
  const int64_t E = config_.moe.num_experts;
  MoeParams params;
  params.router_ED = p[router_slot_];
  for (int64_t e = 0; e < E; ++e) {
    const auto base = static_cast<size_t>(router_slot_ + 1 + 3 * e);
    params.gate_FD.push_back(p[base]);
    params.up_FD.push_back(p[base + 1]);
    params.down_DF.push_back(p[base + 2]);
  }
  return sparse_moe_mlp(layer, h_PD, params, config_.moe, ctx.moe.get(), ctx.fused_kernels,
                        ctx.linear_override, ctx.grouped_linear_override);
}

at::Tensor DecoderLM::block(int64_t layer, const UnitTensors& p, const at::Tensor& x_PD,
                            const ForwardContext& ctx) const {
  const auto& c = config_;
  auto opt = [&](int slot) { return slot >= 0 ? p[slot] : at::Tensor(); };
  auto x1_PD = attention_half(layer, p, x_PD, ctx);
  auto h2_PD = rms_norm(x1_PD, p[slots_.post_norm], c.rms_norm_eps, ctx.fused_kernels);
  if (c.moe.is_sparse_layer(layer)) return x1_PD + sparse_mlp(layer, p, h2_PD, ctx);
  const bool adapters = lora_slots(layer, slots_.gate).first >= 0 ||
                        lora_slots(layer, slots_.up).first >= 0 ||
                        lora_slots(layer, slots_.down).first >= 0;
  if (adapters) {  // transformers' down(silu(gate(x)) * up(x)), each projection with its adapter
    const LinearFn& lin = ctx.linear_override;
    auto act_PF = at::silu(project(layer, lin, h2_PD, p, slots_.gate, opt(slots_.gate_bias))) *
                  project(layer, lin, h2_PD, p, slots_.up, opt(slots_.up_bias));
    return x1_PD + project(layer, lin, act_PF, p, slots_.down, opt(slots_.down_bias));
  }
  auto mlp_PD =
      swiglu_mlp(h2_PD, p[slots_.gate], opt(slots_.gate_bias), p[slots_.up], opt(slots_.up_bias),
                 p[slots_.down], opt(slots_.down_bias), ctx.fused_kernels, ctx.linear_override);
  return x1_PD + mlp_PD;
}

}  // namespace furlong::models
