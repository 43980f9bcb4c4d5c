#include "models/causal_lm.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "models/activation_checkpoint.h"

namespace furlong::models {

CausalLM::CausalLM(ModelConfig config)
    : config_(std::move(config)), rope_(RotaryEmbedding::create(config_)) {}

CausalLM::~CausalLM() = default;

void CausalLM::build_units(const std::vector<ParamSpec>& block_params) {
  build_units([&](int64_t) { return block_params; });
}

void CausalLM::build_units(
    const std::function<std::vector<ParamSpec>(int64_t layer)>& block_params) {
  const int64_t V = config_.vocab_size, D = config_.hidden_size;
  units_.clear();
  units_.push_back({"embed", {{"model.embed_tokens.weight", {V, D}, ParamInit::kNormal}}});
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    UnitSpec unit{"layers." + std::to_string(l), {}};
    for (const auto& p : block_params(l)) {
      unit.params.push_back({"model.layers." + std::to_string(l) + "." + p.name, p.shape, p.init});
    }
    units_.push_back(std::move(unit));
  }
  const ParamInit norm_init = config_.zero_centered_norm ? ParamInit::kZeros : ParamInit::kOnes;
  UnitSpec final_unit{"final", {{"model.norm.weight", {D}, norm_init}}};
  if (!config_.tie_word_embeddings) {
    final_unit.params.push_back({"lm_head.weight", {V, D}, ParamInit::kNormal});
  }
  units_.push_back(std::move(final_unit));
}

int64_t CausalLM::num_parameters() const {
  int64_t n = 0;
  for (const auto& unit : units_) {
    for (const auto& p : unit.params) {
      int64_t numel = 1;
      for (auto s : p.shape) numel *= s;
      n += numel;
    }
  }
  return n;
}

std::pair<size_t, size_t> CausalLM::locate(const std::string& name) const {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (size_t i = 0; i < units_[u].params.size(); ++i) {
      if (units_[u].params[i].name == name) return {u, i};
    }
  }
  FURLONG_FAIL(config_.architecture, " has no parameter named '", name, "'");
}

void CausalLM::add_lora(const LoraSpec& spec) {
  FURLONG_CHECK(spec.enabled(), "add_lora: the rank must be >= 1");
  FURLONG_CHECK(!lora_.enabled(), config_.architecture, ": LoRA adapters are already added");
  FURLONG_CHECK(computes_lora(), config_.architecture,
                " computes no LoRA adapters (furlong has them for the Llama-family decoders: "
                "Qwen3, Qwen3-MoE attention, Qwen2, Llama)");
  FURLONG_CHECK(!materialized(), "add_lora: call it before the weights are materialized");
  std::vector<std::string> found;
  lora_slots_.assign(static_cast<size_t>(num_layers()), {});
  for (int64_t l = 0; l < num_layers(); ++l) {
    auto& params = units_[layer_unit(l)].params;
    auto& slots = lora_slots_[static_cast<size_t>(l)];
    slots.assign(params.size(), {-1, -1});
    const size_t base_count = params.size();
    for (size_t i = 0; i < base_count; ++i) {
      const ParamSpec base = params[i];
      if (!base.name.ends_with(".weight") || base.shape.size() != 2 ||
          base.name.find(".experts.") != std::string::npos)
        continue;
      const std::string module = base.name.substr(0, base.name.size() - 7);
      const std::string leaf = module.substr(module.rfind('.') + 1);
      if (!spec.targets_leaf(leaf)) continue;
      if (std::find(found.begin(), found.end(), leaf) == found.end()) found.push_back(leaf);
      const int64_t out = base.shape[0], in = base.shape[1];
      slots[i] = {static_cast<int>(params.size()), static_cast<int>(params.size() + 1)};
      params.push_back({module + ".lora_A.weight", {spec.rank, in}, ParamInit::kLoraA});
      params.push_back({module + ".lora_B.weight", {out, spec.rank}, ParamInit::kZeros});
    }
  }
  for (const auto& t : spec.targets) {
    FURLONG_CHECK(std::find(found.begin(), found.end(), t) != found.end(), "LoRA target '", t,
                  "' names no projection of ", config_.architecture,
                  " outside the MoE experts (they get no adapters)");
  }
  lora_ = spec;
}

std::pair<int, int> CausalLM::lora_slots(int64_t layer, int slot) const {
  if (!lora_.enabled() || slot < 0) return {-1, -1};
  const auto& slots = lora_slots_[static_cast<size_t>(layer)];
  return static_cast<size_t>(slot) < slots.size() ? slots[static_cast<size_t>(slot)]
                                                  : std::pair<int, int>{-1, -1};
}

at::Tensor CausalLM::project(int64_t layer, const LinearFn& linear, const at::Tensor& x,
                             const UnitTensors& p, int slot, const at::Tensor& bias) const {
  const auto [a, b] = lora_slots(layer, slot);
  if (a < 0) return apply_linear(linear, x, p[static_cast<size_t>(slot)], bias);
  return lora_linear(linear, x, p[static_cast<size_t>(slot)], bias, p[static_cast<size_t>(a)],
                     p[static_cast<size_t>(b)], lora_.scaling());
}

void CausalLM::materialize(const c10::TensorOptions& options) {
  weights_.clear();
  for (const auto& unit : units_) {
    UnitTensors tensors;
    for (const auto& p : unit.params) tensors.push_back(at::empty(p.shape, options));
    weights_.push_back(std::move(tensors));
  }
}

at::Tensor& CausalLM::weight(const std::string& name) {
  FURLONG_ASSERT(materialized(), "weights are not materialized");
  auto [u, i] = locate(name);
  return weights_[u][i];
}

std::vector<std::pair<std::string, at::Tensor>> CausalLM::named_weights() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t u = 0; u < units_.size() && u < weights_.size(); ++u) {
    for (size_t i = 0; i < units_[u].params.size(); ++i) {
      out.emplace_back(units_[u].params[i].name, weights_[u][i]);
    }
  }
  return out;
}

void CausalLM::set_requires_grad(bool requires_grad) {
  for (auto& unit : weights_) {
    for (auto& t : unit) t.requires_grad_(requires_grad);
  }
}

ForwardContext CausalLM::make_context(const PackedBatch& batch, c10::ScalarType dtype,
                                      const ForwardOptions& options) const {
  FURLONG_CHECK(!batch.has_prefixes() || supports_shared_prefixes(), config_.architecture,
                ": this model's linear-attention layers cannot continue a shared prompt; pack "
                "its sequences without sharing (--no-pack-shared-prompts)");
  ForwardContext ctx;
  ctx.batch = batch;
  ctx.attn = options.attn;
  ctx.fused_kernels = options.fused_kernels;
  ctx.moe = options.moe;
  std::tie(ctx.cos_PH, ctx.sin_PH) = rope_.cos_sin(batch.position_ids_P, dtype);
  return ctx;
}

at::Tensor CausalLM::embed(const UnitTensors& params, const at::Tensor& tokens_P) const {
  return at::embedding(params[0], tokens_P);
}

at::Tensor CausalLM::final_norm(const UnitTensors& params, const at::Tensor& x_PD,
                                const ForwardContext& ctx) const {
  if (config_.zero_centered_norm)
    return zero_centered_rms_norm(x_PD, params[0], config_.rms_norm_eps, ctx.fused_kernels);
  return rms_norm(x_PD, params[0], config_.rms_norm_eps, ctx.fused_kernels);
}

const at::Tensor& CausalLM::head_weight(const UnitTensors& embed_params,
                                        const UnitTensors& final_params) const {
  return config_.tie_word_embeddings ? embed_params[0] : final_params[1];
}

at::Tensor CausalLM::run_block(int64_t layer, const UnitTensors& params, const at::Tensor& x_PD,
                               const ForwardContext& ctx, bool checkpoint) const {
  if (!checkpoint) return block(layer, params, x_PD, ctx);
  // A sparse layer that collects router probabilities for the load-balancing loss returns them
  // as a second output of the checkpointed call, so that they carry autograd history even
  // though the block's forward runs without it.
  const bool with_router_probs =
      ctx.moe && ctx.moe->collect_router_probs && config_.moe.is_sparse_layer(layer);
  if (!with_router_probs) {
    auto fn = [this, layer, ctx](const at::Tensor& x, const std::vector<at::Tensor>& p) {
      return block(layer, p, x, ctx);
    };
    return checkpointed_call(fn, x_PD, params);
  }
  auto fn = [this, layer, ctx](const at::Tensor& x, const std::vector<at::Tensor>& p) {
    auto y = block(layer, p, x, ctx);
    return std::vector<at::Tensor>{y, ctx.moe->mean_router_probs[layer]};
  };
  auto outputs = checkpointed_call_multi(fn, x_PD, params);
  ctx.moe->mean_router_probs[layer] = outputs[1];
  return outputs[0];
}

at::Tensor CausalLM::forward_hidden(const PackedBatch& batch, const ForwardOptions& options) const {
  FURLONG_ASSERT(materialized(), "forward on a model whose weights are not materialized");
  FURLONG_CHECK(batch.num_tokens() > 0, "forward: the batch is empty");
  const auto& embed_params = weights_[kEmbedUnit];
  auto x_PD = embed(embed_params, batch.tokens_P);
  auto ctx = make_context(batch, x_PD.scalar_type(), options);
  for (int64_t l = 0; l < num_layers(); ++l) {
    x_PD = run_block(l, weights_[layer_unit(l)], x_PD, ctx, options.activation_checkpointing);
  }
  return final_norm(weights_[final_unit()], x_PD, ctx);
}

at::Tensor CausalLM::forward_logits(const PackedBatch& batch, const ForwardOptions& options) const {
  auto hidden_PD = forward_hidden(batch, options);
  return at::linear(hidden_PD, head_weight(weights_[kEmbedUnit], weights_[final_unit()]));
}

}  // namespace furlong::models
