// Qwen3_5ForCausalLM (transformers' models/qwen3_5, the text model): a hybrid decoder whose
// layers mix Gated DeltaNet ("linear_attention", models/gated_delta_net.h) with softmax
// attention ("full_attention", every 4th layer by default). Differences from Qwen3 besides the
// DeltaNet layers: q_proj also yields a per-head sigmoid gate on the attention output, RoPE
// turns only the first partial_rotary_factor (0.25) of each head, and every RMSNorm but the
// DeltaNet's gated one stores its weight as an offset from 1. Text positions are the same in
// each mRoPE section, so plain RoPE over the rotated dims is what the model computes for text.
// Defaults mirror transformers' Qwen3_5TextConfig.
#include <ATen/ATen.h>

#include <cmath>

#include "models/causal_lm.h"
#include "models/gated_delta_net.h"
#include "models/registry.h"

namespace furlong::models {
namespace {

constexpr const char* kLinear = "linear_attention";
constexpr const char* kFull = "full_attention";

// Unit layout: the two norms, the mixer's parameters from kMixer, then the MLP's (mlp_begin).
enum Slot : int { kInputNorm, kPostNorm, kMixer };
// Gated DeltaNet parameters (from kMixer).
enum DeltaSlot : int {
  kQkv = kMixer,
  kZ,
  kB,
  kA,
  kConv,
  kDtBias,
  kALog,
  kGatedNorm,
  kOut,
  kDeltaEnd
};
// Softmax attention parameters (from kMixer); biases follow when attention_bias is set.
enum AttnSlot : int { kQ = kMixer, kK, kV, kO, kQNorm, kKNorm, kQBias, kKBias, kVBias, kOBias };
// MLP parameters, from mlp_begin(layer). Dense: gate, up, down. Sparse (Qwen3.5-MoE): the
// router, the shared expert and its gate, then each expert's gate, up and down.
enum DenseMlpSlot : int { kGate, kUp, kDown };
enum SparseMlpSlot : int {
  kRouter,
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kSharedExpertGate,
  kExperts
};

class Qwen35LM : public CausalLM {
 public:
  explicit Qwen35LM(ModelConfig config) : CausalLM(std::move(config)) {
    build_units([this](int64_t layer) { return block_param_specs(layer); });
  }

  at::Tensor block(int64_t layer, const UnitTensors& p, const at::Tensor& x_PD,
                   const ForwardContext& ctx) const override {
    const double eps = config_.rms_norm_eps;
    auto h_PD = zero_centered_rms_norm(x_PD, p[kInputNorm], eps, ctx.fused_kernels);
    auto mixed_PD = config_.linear_attention.is_linear_layer(layer)
                        ? delta_net(layer, p, h_PD, ctx)
                        : gated_attention(layer, p, h_PD, ctx);
    auto x1_PD = x_PD + mixed_PD;
    auto h2_PD = zero_centered_rms_norm(x1_PD, p[kPostNorm], eps, ctx.fused_kernels);
    return x1_PD + mlp(layer, p, h2_PD, ctx);
  }

 private:
  std::vector<ParamSpec> block_param_specs(int64_t layer) const {
    const int64_t D = config_.hidden_size;
    std::vector<ParamSpec> s = {{"input_layernorm.weight", {D}, ParamInit::kZeros},
                                {"post_attention_layernorm.weight", {D}, ParamInit::kZeros}};
    auto mixer = mixer_param_specs(layer);
    s.insert(s.end(), mixer.begin(), mixer.end());
    FURLONG_ASSERT(static_cast<int>(s.size()) == mlp_begin(layer), "qwen3_5: unit layout");
    auto mlp = mlp_param_specs();
    s.insert(s.end(), mlp.begin(), mlp.end());
    return s;
  }

  // Where the MLP's parameters start in layer `layer`'s unit.
  int mlp_begin(int64_t layer) const {
    if (config_.linear_attention.is_linear_layer(layer)) return kDeltaEnd;
    return config_.qkv_bias ? kOBias + 1 : kKNorm + 1;
  }

  std::vector<ParamSpec> mlp_param_specs() const {
    const auto& c = config_;
    const int64_t D = c.hidden_size;
    auto swiglu = [&](const std::string& prefix, int64_t F) {
      return std::vector<ParamSpec>{{prefix + "gate_proj.weight", {F, D}, ParamInit::kNormal},
                                    {prefix + "up_proj.weight", {F, D}, ParamInit::kNormal},
                                    {prefix + "down_proj.weight", {D, F}, ParamInit::kNormal}};
    };
    if (!c.moe.enabled()) return swiglu("mlp.", c.intermediate_size);
    std::vector<ParamSpec> s = {{"mlp.gate.weight", {c.moe.num_experts, D}, ParamInit::kNormal}};
    auto shared = swiglu("mlp.shared_expert.", c.moe.shared_expert_intermediate);
    s.insert(s.end(), shared.begin(), shared.end());
    s.push_back({"mlp.shared_expert_gate.weight", {1, D}, ParamInit::kNormal});
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      auto expert = swiglu("mlp.experts." + std::to_string(e) + ".", c.moe.expert_intermediate);
      s.insert(s.end(), expert.begin(), expert.end());
    }
    return s;
  }

  std::vector<ParamSpec> mixer_param_specs(int64_t layer) const {
    const auto& c = config_;
    const int64_t D = c.hidden_size;
    std::vector<ParamSpec> s;
    if (c.linear_attention.is_linear_layer(layer)) {
      const auto& la = c.linear_attention;
      const int64_t K = la.num_key_heads * la.key_head_dim;
      const int64_t V = la.num_value_heads * la.value_head_dim, Hv = la.num_value_heads;
      const std::string a = "linear_attn.";
      s.insert(s.end(), {{a + "in_proj_qkv.weight", {2 * K + V, D}, ParamInit::kNormal},
                         {a + "in_proj_z.weight", {V, D}, ParamInit::kNormal},
                         {a + "in_proj_b.weight", {Hv, D}, ParamInit::kNormal},
                         {a + "in_proj_a.weight", {Hv, D}, ParamInit::kNormal},
                         {a + "conv1d.weight", {2 * K + V, 1, la.conv_kernel}, ParamInit::kNormal},
                         {a + "dt_bias", {Hv}, ParamInit::kOnes},
                         {a + "A_log", {Hv}, ParamInit::kZeros},  // A = 1
                         {a + "norm.weight", {la.value_head_dim}, ParamInit::kOnes},
                         {a + "out_proj.weight", {D, V}, ParamInit::kNormal}});
      return s;
    }
    const int64_t H = c.head_dim, NH = c.num_attention_heads * H, KH = c.num_key_value_heads * H;
    const std::string a = "self_attn.";
    s.insert(s.end(), {{a + "q_proj.weight", {2 * NH, D}, ParamInit::kNormal},
                       {a + "k_proj.weight", {KH, D}, ParamInit::kNormal},
                       {a + "v_proj.weight", {KH, D}, ParamInit::kNormal},
                       {a + "o_proj.weight", {D, NH}, ParamInit::kNormal},
                       {a + "q_norm.weight", {H}, ParamInit::kZeros},
                       {a + "k_norm.weight", {H}, ParamInit::kZeros}});
    if (c.qkv_bias) {
      s.insert(s.end(), {{a + "q_proj.bias", {2 * NH}, ParamInit::kZeros},
                         {a + "k_proj.bias", {KH}, ParamInit::kZeros},
                         {a + "v_proj.bias", {KH}, ParamInit::kZeros},
                         {a + "o_proj.bias", {D}, ParamInit::kZeros}});
    }
    return s;
  }

  // The dense SwiGLU MLP, or (Qwen3.5-MoE) the routed experts plus the gated shared expert:
  // experts(x) + sigmoid(x . shared_expert_gate) * shared_expert(x), as transformers'
  // Qwen3_5MoeSparseMoeBlock sums them.
  at::Tensor mlp(int64_t layer, const UnitTensors& p, const at::Tensor& h_PD,
                 const ForwardContext& ctx) const {
    const int m = mlp_begin(layer);
    const LinearFn& lin = ctx.linear_override;
    if (!config_.moe.enabled()) {
      return swiglu_mlp(h_PD, p[m + kGate], {}, p[m + kUp], {}, p[m + kDown], {}, ctx.fused_kernels,
                        lin);
    }
    MoeParams params;
    params.router_ED = p[m + kRouter];
    for (int64_t e = 0; e < config_.moe.num_experts; ++e) {
      const auto base = static_cast<size_t>(m + kExperts + 3 * e);
      params.gate_FD.push_back(p[base]);
      params.up_FD.push_back(p[base + 1]);
      params.down_DF.push_back(p[base + 2]);
    }
    auto routed_PD = sparse_moe_mlp(layer, h_PD, params, config_.moe, ctx.moe.get(),
                                    ctx.fused_kernels, lin, ctx.grouped_linear_override);
    auto shared_PD = swiglu_mlp(h_PD, p[m + kSharedGate], {}, p[m + kSharedUp], {},
                                p[m + kSharedDown], {}, ctx.fused_kernels, lin);
    auto gate_P1 = at::sigmoid(apply_linear(lin, h_PD, p[m + kSharedExpertGate], {}));
    return routed_PD + gate_P1 * shared_PD;
  }

  // Gated DeltaNet over each document of the batch, from a zero state or the kept one.
  at::Tensor delta_net(int64_t layer, const UnitTensors& p, const at::Tensor& h_PD,
                       const ForwardContext& ctx) const {
    const auto& la = config_.linear_attention;
    const int64_t P = h_PD.size(0), Hv = la.num_value_heads, dv = la.value_head_dim;
    const LinearFn& lin = ctx.linear_override;
    const auto& cu = ctx.batch.cu_seqlens;
    Mixed in;
    in.qkv_PC = apply_linear(lin, h_PD, p[kQkv], {});
    in.b_PH = apply_linear(lin, h_PD, p[kB], {});
    in.a_PH = apply_linear(lin, h_PD, p[kA], {});
    in.z_PHV = apply_linear(lin, h_PD, p[kZ], {}).view({P, Hv, dv});
    if (ctx.linear_states) std::tie(in.window_BCW, in.state_BHKV) = ctx.linear_states->read(layer);
    // A step of single tokens with kept states (the engine's decode) runs as one batch through
    // the recurrent rule, as transformers' generate does. Anything else runs document by
    // document through the chunked rule, so a document's result does not depend on what else
    // is in the batch (the engine's exact log-probs then equal the trainer's bit for bit).
    Mixed out;
    if (ctx.linear_states && ctx.batch.max_document_length() <= 1) {
      auto buffers = ctx.linear_states->decode_buffers(layer);
      out = mix(p, in, cu, /*decode=*/true, buffers.from.empty() ? nullptr : &buffers);
    } else {
      std::vector<Mixed> docs;
      for (size_t d = 0; d + 1 < cu.size(); ++d) {
        docs.push_back(mix(p, in.document(cu[d], cu[d + 1], static_cast<int64_t>(d)),
                           {0, cu[d + 1] - cu[d]}, /*decode=*/false));
      }
      out = Mixed::concat(docs);
    }
    if (ctx.linear_states) ctx.linear_states->write(layer, out.window_BCW, out.state_BHKV);
    return apply_linear(lin, out.o_PHV.reshape({P, Hv * dv}), p[kOut], {});
  }

  // The token mixing of a DeltaNet layer over documents `cu`: in: the projections (qkv_PC,
  // b_PH, a_PH, z_PHV) and, where kept, the documents' windows and states; out: o_PHV (gated
  // and normalized) and the windows and states after them.
  struct Mixed {
    at::Tensor qkv_PC, b_PH, a_PH, z_PHV, o_PHV;
    at::Tensor window_BCW, state_BHKV;  // undefined: zero (input), not needed (output)

    Mixed document(int64_t begin, int64_t end, int64_t d) const {
      Mixed m;
      m.qkv_PC = qkv_PC.slice(0, begin, end);
      m.b_PH = b_PH.slice(0, begin, end);
      m.a_PH = a_PH.slice(0, begin, end);
      m.z_PHV = z_PHV.slice(0, begin, end);
      if (window_BCW.defined()) m.window_BCW = window_BCW.narrow(0, d, 1);
      if (state_BHKV.defined()) m.state_BHKV = state_BHKV.narrow(0, d, 1);
      return m;
    }
    static Mixed concat(const std::vector<Mixed>& docs) {
      Mixed m;
      std::vector<at::Tensor> o, w, s;
      for (const auto& d : docs) {
        o.push_back(d.o_PHV);
        if (d.window_BCW.defined()) w.push_back(d.window_BCW);
        s.push_back(d.state_BHKV);
      }
      m.o_PHV = at::cat(o);
      m.state_BHKV = at::cat(s);
      if (!w.empty()) m.window_BCW = at::cat(w);
      return m;
    }
  };

  // `buffers` (decode only, optional): the states are read from and written to them in place
  // of in.state_BHKV / out.state_BHKV (left undefined).
  Mixed mix(const UnitTensors& p, const Mixed& in, const std::vector<int64_t>& cu, bool decode,
            const LinearAttentionStates::DecodeBuffers* buffers = nullptr) const {
    const auto& la = config_.linear_attention;
    const int64_t Hk = la.num_key_heads, Hv = la.num_value_heads;
    const int64_t dk = la.key_head_dim, dv = la.value_head_dim;
    constexpr int64_t kChunk = 64;  // the chunk of the gated delta rule (transformers' default)
    const int64_t multiple = decode ? 1 : kChunk;
    auto x_BTC = pad_documents(in.qkv_PC, cu, multiple);
    auto conv_BTC = causal_conv1d_silu(x_BTC, p[kConv], in.window_BCW);
    const int64_t B = conv_BTC.size(0), T = conv_BTC.size(1);
    auto parts = conv_BTC.split_with_sizes({Hk * dk, Hk * dk, Hv * dv}, 2);
    auto q_BTHK = parts[0].reshape({B, T, Hk, dk});
    auto k_BTHK = parts[1].reshape({B, T, Hk, dk});
    auto v_BTHV = parts[2].reshape({B, T, Hv, dv});
    // beta and the log decay g; zero at padded positions, so the state passes them unchanged.
    auto beta_PH = at::sigmoid(in.b_PH);
    auto g_PH = -p[kALog].to(at::kFloat).exp() * at::softplus(in.a_PH.to(at::kFloat) + p[kDtBias]);
    auto g_BTH = pad_documents(g_PH, cu, multiple);
    auto beta_BTH = pad_documents(beta_PH, cu, multiple);
    GatedDeltaOut rule;
    if (buffers != nullptr) {
      rule.o_BTHV = gated_delta_decode_into(q_BTHK, k_BTHK, v_BTHV, g_BTH, beta_BTH, buffers->from,
                                            buffers->to);
    } else if (decode) {
      rule = recurrent_gated_delta_rule(q_BTHK, k_BTHK, v_BTHV, g_BTH, beta_BTH, in.state_BHKV);
    } else {
      rule = chunk_gated_delta_rule(q_BTHK, k_BTHK, v_BTHV, g_BTH, beta_BTH, in.state_BHKV, kChunk);
    }
    Mixed out;
    out.o_PHV = gated_norm(unpad_documents(rule.o_BTHV, cu), in.z_PHV, p[kGatedNorm]);
    out.state_BHKV = rule.state_BHKV;
    if (in.window_BCW.defined()) out.window_BCW = next_conv_windows(in.window_BCW, x_BTC, cu);
    return out;
  }

  // RMSNorm over each head's output (fp32, cast back, scaled), times SiLU of the gate z.
  at::Tensor gated_norm(const at::Tensor& o_PHV, const at::Tensor& z_PHV,
                        const at::Tensor& weight) const {
    auto y = rms_norm(o_PHV.contiguous(), weight, config_.rms_norm_eps);
    return (y * at::silu(z_PHV.to(at::kFloat))).to(o_PHV.scalar_type());
  }

  // Softmax attention whose output each head gates with sigmoid(q_proj's second half).
  at::Tensor gated_attention(int64_t layer, const UnitTensors& p, const at::Tensor& h_PD,
                             const ForwardContext& ctx) const {
    const auto& c = config_;
    const int64_t P = h_PD.size(0), N = c.num_attention_heads, K = c.num_key_value_heads;
    const int64_t H = c.head_dim;
    const double eps = c.rms_norm_eps;
    auto opt = [&](int slot) { return c.qkv_bias ? p[slot] : at::Tensor(); };
    const LinearFn& lin = ctx.linear_override;
    auto qg_PNH2 = apply_linear(lin, h_PD, p[kQ], opt(kQBias)).view({P, N, 2 * H});
    auto gate_PNH = qg_PNH2.slice(2, H, 2 * H).reshape({P, N * H});
    auto q_PNH = zero_centered_rms_norm(qg_PNH2.slice(2, 0, H), p[kQNorm], eps, ctx.fused_kernels);
    auto k_PKH = zero_centered_rms_norm(apply_linear(lin, h_PD, p[kK], opt(kKBias)).view({P, K, H}),
                                        p[kKNorm], eps);
    auto v_PKH = apply_linear(lin, h_PD, p[kV], opt(kVBias)).view({P, K, H});
    q_PNH = partial_rope(q_PNH, ctx);
    k_PKH = partial_rope(k_PKH, ctx);
    const double scale = 1.0 / std::sqrt(static_cast<double>(H));
    auto o_PNH = ctx.attention_override
                     ? ctx.attention_override(layer, q_PNH, k_PKH, v_PKH, scale)
                     : attention(q_PNH, k_PKH, v_PKH, ctx.batch, ctx.attn, scale);
    auto o_PD = o_PNH.reshape({P, N * H}) * at::sigmoid(gate_PNH);
    return apply_linear(lin, o_PD, p[kO], opt(kOBias));
  }

  // RoPE on the first R dims of each head (R = the tables' width), the rest passed through.
  static at::Tensor partial_rope(const at::Tensor& x_PNH, const ForwardContext& ctx) {
    const int64_t R = ctx.cos_PH.size(1), H = x_PNH.size(2);
    if (R == H) return apply_rope(x_PNH.contiguous(), ctx.cos_PH, ctx.sin_PH, ctx.fused_kernels);
    auto turned =
        apply_rope(x_PNH.slice(2, 0, R).contiguous(), ctx.cos_PH, ctx.sin_PH, ctx.fused_kernels);
    return at::cat({turned, x_PNH.slice(2, R, H)}, 2);
  }
};

// layer_types as given (each "linear_attention" or "full_attention"), or every
// full_attention_interval-th layer full (transformers' default pattern).
std::vector<int64_t> linear_layers(const Json& json, int64_t layers, const std::string& where) {
  std::vector<std::string> types;
  if (json.contains("layer_types") && !json["layer_types"].is_null()) {
    types = json_get<std::vector<std::string>>(json, "layer_types", where);
    FURLONG_CHECK(static_cast<int64_t>(types.size()) == layers, where, ": field 'layer_types' has ",
                  types.size(), " entries for num_hidden_layers ", layers);
  } else {
    const auto interval = json_get_or<int64_t>(json, "full_attention_interval", 4, where);
    FURLONG_CHECK(interval >= 1, where, ": full_attention_interval must be >= 1, got ", interval);
    for (int64_t l = 0; l < layers; ++l) types.push_back((l + 1) % interval ? kLinear : kFull);
  }
  std::vector<int64_t> linear;
  for (int64_t l = 0; l < layers; ++l) {
    const auto& t = types[static_cast<size_t>(l)];
    FURLONG_CHECK(t == kLinear || t == kFull, where, ": layer_types[", l, "] is '", t,
                  "'; expected linear_attention or full_attention");
    if (t == kLinear) linear.push_back(l);
  }
  return linear;
}

int64_t positive(const Json& json, const char* key, int64_t fallback, const std::string& where) {
  const auto v = json_get_or<int64_t>(json, key, fallback, where);
  FURLONG_CHECK(v > 0 && v <= 65536, where, ": field '", key, "' must be in [1, 65536], got ", v);
  return v;
}

LinearAttentionConfig parse_linear_attention(const Json& json, int64_t layers,
                                             const std::string& where) {
  LinearAttentionConfig la;
  la.layers = linear_layers(json, layers, where);
  la.conv_kernel = positive(json, "linear_conv_kernel_dim", 4, where);
  la.key_head_dim = positive(json, "linear_key_head_dim", 128, where);
  la.value_head_dim = positive(json, "linear_value_head_dim", 128, where);
  la.num_key_heads = positive(json, "linear_num_key_heads", 16, where);
  la.num_value_heads = positive(json, "linear_num_value_heads", 32, where);
  FURLONG_CHECK(la.num_value_heads % la.num_key_heads == 0, where, ": linear_num_value_heads ",
                la.num_value_heads, " is not a multiple of linear_num_key_heads ",
                la.num_key_heads);
  return la;
}

// The fields both Qwen3.5 text models share.
void set_qwen3_5_fields(ModelConfig& config, const Json& json, const std::string& where) {
  const bool bias = json_get_or<bool>(json, "attention_bias", false, where);
  config.qkv_bias = bias;
  config.o_proj_bias = bias;
  config.qk_norm = true;
  config.zero_centered_norm = true;
  config.attention_output_gate = true;
  config.linear_attention = parse_linear_attention(json, config.num_hidden_layers, where);
}

ModelConfig qwen3_5_config(const Json& json, const std::string& where) {
  ConfigDefaults defaults{.vocab_size = 248320,
                          .hidden_size = 4096,
                          .intermediate_size = 12288,
                          .num_hidden_layers = 32,
                          .num_attention_heads = 16,
                          .num_key_value_heads = 4,
                          .head_dim = 256,
                          .max_position_embeddings = 32768,
                          .partial_rotary_factor = 0.25};
  ModelConfig config = parse_decoder_config(json, where, defaults);
  config.architecture = "Qwen3_5ForCausalLM";
  set_qwen3_5_fields(config, json, where);
  return config;
}

ModelConfig qwen3_5_moe_config(const Json& json, const std::string& where) {
  ConfigDefaults defaults{.vocab_size = 248320,
                          .hidden_size = 2048,
                          .intermediate_size = 512,  // unused: every layer is sparse
                          .num_hidden_layers = 40,
                          .num_attention_heads = 16,
                          .num_key_value_heads = 2,
                          .head_dim = 256,
                          .max_position_embeddings = 32768,
                          .partial_rotary_factor = 0.25};
  ModelConfig config = parse_decoder_config(json, where, defaults);
  config.architecture = "Qwen3_5MoeForCausalLM";
  set_qwen3_5_fields(config, json, where);
  config.moe = parse_moe_config(json, where, config.num_hidden_layers,
                                {.num_experts = 256,
                                 .experts_per_token = 8,
                                 .expert_intermediate = 512,
                                 .shared_expert_intermediate = 512});
  // transformers' Qwen3_5MoeTopKRouter always renormalizes the chosen weights, and every layer
  // is sparse whatever decoder_sparse_step or mlp_only_layers say.
  config.moe.norm_topk_prob = true;
  config.moe.decoder_sparse_step = 1;
  config.moe.mlp_only_layers.clear();
  check_plausible_size(config, where);
  return config;
}

}  // namespace

std::unique_ptr<CausalLM> create_qwen3_5(const Json& json, const std::string& where) {
  return std::make_unique<Qwen35LM>(qwen3_5_config(json, where));
}

std::unique_ptr<CausalLM> create_qwen3_5_moe(const Json& json, const std::string& where) {
  return std::make_unique<Qwen35LM>(qwen3_5_moe_config(json, where));
}

// Qwen3_5(Moe)ForConditionalGeneration: the text model of text_config, whose tensors the
// checkpoint stores under model.language_model.*; the vision tower (model.visual.*) is kept as
// it is (ModelConfig::checkpoint_text_prefix). The top level's tie_word_embeddings and dtype
// are the ones that apply (the top-level model owns lm_head).
std::unique_ptr<CausalLM> create_qwen3_5_multimodal(const Json& json, const std::string& where) {
  FURLONG_CHECK(json.contains("text_config") && json["text_config"].is_object(), where,
                ": a Qwen3.5 multimodal config needs field 'text_config' (an object: the text "
                "model's config)");
  Json text = json["text_config"];
  for (const char* key : {"tie_word_embeddings", "dtype", "torch_dtype"}) {
    if (json.contains(key)) text[key] = json[key];
  }
  const std::string where_text = where + " (text_config)";
  const bool moe = json_get_or<std::string>(json, "model_type", "", where) == "qwen3_5_moe";
  ModelConfig config =
      moe ? qwen3_5_moe_config(text, where_text) : qwen3_5_config(text, where_text);
  config.architecture =
      moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration";
  config.raw = json;
  config.checkpoint_text_prefix = "model.language_model.";
  return std::make_unique<Qwen35LM>(std::move(config));
}

}  // namespace furlong::models
