// CausalLM: the base of every decoder architecture furlong trains and serves.
//
// A model is described as *units* of named parameters (HF names): unit 0 is the token
// embedding, units 1..L are the transformer blocks, the last unit is the final norm (and
// lm_head when embeddings are untied). Units are what sharding, checkpointing and weight sync
// work on; the model itself knows nothing about parallelism.
//
// The forward pieces are functional: they take the parameter tensors of their unit as
// arguments, so a caller may substitute tensors (e.g. gathered shards) without the model
// knowing. For plain single-device use the model also owns one set of weights (weights()).
//
// Construction allocates nothing (so a model can be described without memory, as on the meta
// device); materialize() allocates the owned weights with the given options.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/layers.h"
#include "models/lora.h"
#include "models/model_config.h"
#include "models/moe.h"
#include "models/packed_batch.h"

namespace furlong::models {

class LinearAttentionStates;  // models/gated_delta_net.h

// kLoraA: PEFT's lora_A initialization, uniform in +-1/sqrt(in) (kaiming-uniform with a = sqrt(5)).
enum class ParamInit { kNormal, kOnes, kZeros, kLoraA };

struct ParamSpec {
  std::string name;  // full HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  ParamInit init = ParamInit::kNormal;
};

struct UnitSpec {
  std::string name;  // "embed", "layers.3", "final"
  std::vector<ParamSpec> params;
};

using UnitTensors = std::vector<at::Tensor>;  // aligned with UnitSpec::params

struct ForwardOptions {
  AttnImpl attn = AttnImpl::kSdpa;
  bool activation_checkpointing = false;  // recompute each block in backward
  // One-pass CPU kernels for RMSNorm, RoPE and SwiGLU (src/kernels); off = the ATen op chain
  // that mirrors transformers op for op.
  bool fused_kernels = true;
  // MoE models: what this forward records or replays of its expert choices (models/moe.h).
  // Null: free routing, nothing recorded.
  std::shared_ptr<MoeTrace> moe;
};

// Per-forward values shared by all blocks.
// Holds its own copy of the batch layout so that a checkpointed block can be recomputed in
// backward after the caller's batch object is gone.
struct ForwardContext {
  PackedBatch batch;
  at::Tensor cos_PH;
  at::Tensor sin_PH;
  AttnImpl attn = AttnImpl::kSdpa;
  bool fused_kernels = true;
  // Optional replacement for attention() (e.g. the rollout engine's paged KV cache): blocks
  // call it with their layer index and the post-RoPE q [P, N, H], k/v [P, K, H] and the
  // softmax scale, and use the [P, N, H] it returns. Unset: attention() over `batch`.
  using AttentionFn =
      std::function<at::Tensor(int64_t layer, const at::Tensor& q_PNH, const at::Tensor& k_PKH,
                               const at::Tensor& v_PKH, double scale)>;
  AttentionFn attention_override;
  // Optional replacement for at::linear in the blocks (layers.h, LinearFn).
  LinearFn linear_override;
  // Optional grouped GEMM for the MoE experts (layers.h, GroupedLinearFn).
  GroupedLinearFn grouped_linear_override;
  // Shared with ForwardOptions::moe (and so with a checkpointed block's recomputation).
  std::shared_ptr<MoeTrace> moe;
  // Optional: the DeltaNet states each document starts from and leaves (the rollout engine's;
  // models/gated_delta_net.h). Unset: every document starts from zero.
  std::shared_ptr<LinearAttentionStates> linear_states;
};

class CausalLM {
 public:
  virtual ~CausalLM();
  CausalLM(const CausalLM&) = delete;
  CausalLM& operator=(const CausalLM&) = delete;

  const ModelConfig& config() const { return config_; }
  int64_t num_layers() const { return config_.num_hidden_layers; }
  const std::vector<UnitSpec>& units() const { return units_; }
  static constexpr size_t kEmbedUnit = 0;
  size_t layer_unit(int64_t layer) const { return static_cast<size_t>(1 + layer); }
  size_t final_unit() const { return units_.size() - 1; }
  int64_t num_parameters() const;
  // (unit, index) of a parameter by HF name; error if unknown.
  std::pair<size_t, size_t> locate(const std::string& name) const;

  // ---- owned weights ----
  bool materialized() const { return !weights_.empty(); }
  void materialize(const c10::TensorOptions& options);
  std::vector<UnitTensors>& weights() { return weights_; }
  const std::vector<UnitTensors>& weights() const { return weights_; }
  at::Tensor& weight(const std::string& name);
  std::vector<std::pair<std::string, at::Tensor>> named_weights() const;
  void set_requires_grad(bool requires_grad);

  // Whether a batch may hold shared prefixes (PackedBatch::prefixes): softmax attention only;
  // a DeltaNet layer's state would have to branch at the prefix's end.
  bool supports_shared_prefixes() const { return !config_.linear_attention.enabled(); }

  // ---- LoRA adapters (models/lora.h) ----
  // Adds an adapter to every targeted projection of the blocks, before materialize(): lora_A
  // [r, in] and lora_B [out, r] after the unit's other parameters (so their indices do not move).
  // MoE experts get none. Errors for an architecture that computes no adapters, a target it has
  // no projection of, or a second call.
  void add_lora(const LoraSpec& spec);
  const LoraSpec& lora() const { return lora_; }
  // Unit indices {A, B} of the adapter on the parameter at `slot` of block `layer`; {-1, -1}
  // when it has none.
  std::pair<int, int> lora_slots(int64_t layer, int slot) const;

  // ---- functional forward pieces ----
  ForwardContext make_context(const PackedBatch& batch, c10::ScalarType dtype,
                              const ForwardOptions& options) const;
  at::Tensor embed(const UnitTensors& params, const at::Tensor& tokens_P) const;
  virtual at::Tensor block(int64_t layer, const UnitTensors& params, const at::Tensor& x_PD,
                           const ForwardContext& ctx) const = 0;
  at::Tensor final_norm(const UnitTensors& params, const at::Tensor& x_PD,
                        const ForwardContext& ctx) const;
  // lm_head weight [V, D]: the embedding when tied, else the final unit's lm_head.
  const at::Tensor& head_weight(const UnitTensors& embed_params,
                                const UnitTensors& final_params) const;
  // One block, optionally wrapped in activation checkpointing.
  at::Tensor run_block(int64_t layer, const UnitTensors& params, const at::Tensor& x_PD,
                       const ForwardContext& ctx, bool checkpoint) const;

  // ---- single-device forward over the owned weights ----
  // Final hidden states [P, D] (after the final norm).
  at::Tensor forward_hidden(const PackedBatch& batch, const ForwardOptions& options = {}) const;
  // Logits [P, V] in the weights' dtype.
  at::Tensor forward_logits(const PackedBatch& batch, const ForwardOptions& options = {}) const;

 protected:
  explicit CausalLM(ModelConfig config);
  // Subclasses call this from their constructor with the per-block parameters (names relative
  // to "model.layers.<i>.", in the order block() indexes them), for every layer alike or per
  // layer (MoE models mix dense and sparse layers).
  void build_units(const std::vector<ParamSpec>& block_params);
  void build_units(const std::function<std::vector<ParamSpec>(int64_t layer)>& block_params);
  // Whether block() computes adapters (through project()); add_lora refuses otherwise.
  virtual bool computes_lora() const { return false; }
  // x W^T + b for the projection at `slot` of block `layer`'s unit `p`, with its adapter.
  at::Tensor project(int64_t layer, const LinearFn& linear, const at::Tensor& x,
                     const UnitTensors& p, int slot, const at::Tensor& bias) const;

  ModelConfig config_;
  RotaryEmbedding rope_;

 private:
  std::vector<UnitSpec> units_;
  std::vector<UnitTensors> weights_;
  LoraSpec lora_;
  std::vector<std::vector<std::pair<int, int>>> lora_slots_;  // [layer][slot]
};

}  // namespace furlong::models
