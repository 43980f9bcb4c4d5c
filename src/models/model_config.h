// The model hyper-parameters furlong reads from a HF config.json.
//
// Every architecture file parses its own config (its defaults are those of the matching
// transformers config class, so a config.json that omits a field means the same thing to both),
// using the shared helpers below for the fields the Llama family has in common.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json_util.h"

namespace furlong::models {

// Rotary position embedding parameters: transformers' "rope_parameters" (v5) or the older
// top-level "rope_theta" + "rope_scaling" spelling.
struct RopeConfig {
  std::string type = "default";  // default | linear | dynamic | yarn | llama3
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 / yarn
  int64_t original_max_position_embeddings = 0;
  // yarn
  std::optional<double> attention_factor;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  bool truncate = true;
};

// Mixture-of-experts fields (Qwen3-MoE, Qwen3.5-MoE). num_experts == 0: a dense model.
struct MoeConfig {
  int64_t num_experts = 0;          // E ("num_experts", or transformers 5's "num_local_experts")
  int64_t experts_per_token = 0;    // K ("num_experts_per_tok")
  int64_t expert_intermediate = 0;  // F of each expert ("moe_intermediate_size")
  int64_t decoder_sparse_step = 1;  // layer l is sparse when (l + 1) % step == 0 ...
  std::vector<int64_t> mlp_only_layers;  // ... and l is not listed here
  bool norm_topk_prob = false;           // renormalize the k chosen weights to sum to 1
  double router_aux_loss_coef = 0.001;   // transformers' coefficient (furlong's flag decides)
  // Qwen3.5-MoE: a SwiGLU expert of this width that every token goes through, scaled by
  // sigmoid(x . shared_expert_gate); 0: none.
  int64_t shared_expert_intermediate = 0;

  bool enabled() const { return num_experts > 0; }
  bool is_sparse_layer(int64_t layer) const;
  int64_t num_sparse_layers(int64_t num_layers) const;
};

// Gated DeltaNet ("linear_attention") layers of hybrid models (Qwen3.5): the layers that have
// them, and their sizes. No layer listed: every layer has softmax attention.
struct LinearAttentionConfig {
  std::vector<int64_t> layers;   // ascending; the others are "full_attention"
  int64_t conv_kernel = 4;       // linear_conv_kernel_dim
  int64_t key_head_dim = 128;    // linear_key_head_dim (d_k)
  int64_t value_head_dim = 128;  // linear_value_head_dim (d_v)
  int64_t num_key_heads = 16;    // linear_num_key_heads (q and k heads)
  int64_t num_value_heads = 32;  // linear_num_value_heads (a multiple of num_key_heads)

  bool enabled() const { return !layers.empty(); }
  bool is_linear_layer(int64_t layer) const;
  // Channels of the conv over q, k and v: 2 * num_key_heads * d_k + num_value_heads * d_v.
  int64_t conv_channels() const {
    return 2 * num_key_heads * key_head_dim + num_value_heads * value_head_dim;
  }
  // Bytes of one sequence's state over all DeltaNet layers: the conv window [C, W - 1] in the
  // compute dtype and the recurrent state [Hv, d_k, d_v] in fp32.
  int64_t state_bytes_per_sequence(int64_t compute_dtype_bytes) const {
    const auto n = static_cast<int64_t>(layers.size());
    return n * conv_channels() * (conv_kernel - 1) * compute_dtype_bytes +
           recurrent_state_bytes_per_sequence();
  }
  // The recurrent states' part of it.
  int64_t recurrent_state_bytes_per_sequence() const {
    return static_cast<int64_t>(layers.size()) * num_value_heads * key_head_dim * value_head_dim *
           4;
  }
};

struct ModelConfig {
  std::string architecture;  // e.g. "Qwen3ForCausalLM"
  std::string model_type;    // e.g. "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double initializer_range = 0.02;
  bool tie_word_embeddings = false;
  // Structure switches the architecture file sets (not all are config fields).
  bool qkv_bias = false;
  bool o_proj_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;
  // RMSNorm weights stored as offsets from 1 (scale = 1 + weight, computed in fp32; Qwen3.5).
  bool zero_centered_norm = false;
  // q_proj also gives a per-head sigmoid gate on the attention output (Qwen3.5).
  bool attention_output_gate = false;
  RopeConfig rope;
  MoeConfig moe;
  LinearAttentionConfig linear_attention;
  // The checkpoint dtype ("torch_dtype" / "dtype"), float32 when absent.
  c10::ScalarType dtype = c10::kFloat;
  // The config.json as read; kept so exports write back every field.
  Json raw;
  // Where this model's tensors live in the checkpoint: under "model." (a causal LM), or, for a
  // multimodal checkpoint whose text model furlong runs, "model.language_model."; the tensors
  // outside it (a vision tower) are kept as they are and exported unchanged.
  std::string checkpoint_text_prefix = "model.";
};

// Defaults of the transformers config class an architecture mirrors.
struct ConfigDefaults {
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t intermediate_size;
  int64_t num_hidden_layers;
  int64_t num_attention_heads;
  std::optional<int64_t> num_key_value_heads;  // nullopt -> num_attention_heads
  std::optional<int64_t> head_dim;             // nullopt -> hidden_size / num_attention_heads
  int64_t max_position_embeddings;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // Set: the architecture applies RoPE to the first partial_rotary_factor of each head, and
  // this is the factor when config.json gives none. Unset: the factor must be 1.
  std::optional<double> partial_rotary_factor = std::nullopt;
};

// The parameter count of the decoder `c` describes, in closed form (nothing is allocated), as
// doubles: a corrupted config can overflow int64. Biases and per-head norms are left out.
struct ParameterEstimate {
  double embedding = 0;  // vocab_size x hidden_size (x2 with an untied lm_head)
  double per_layer = 0;  // attention + MLP + norms of one block (the mean, for MoE models)
  double total = 0;
};
ParameterEstimate estimate_parameters(const ModelConfig& c);

// Sanity limits on what a config may describe, far above any published model, so that a
// corrupted config.json fails with a message instead of an allocation of terabytes.
inline constexpr int64_t kMaxHiddenLayers = 10000;
inline constexpr int64_t kMaxHeadDim = 65536;
inline constexpr double kMaxParameters = 1e13;

// Fails, naming the fields, when `c` describes more layers or parameters than the sanity limits
// above. parse_decoder_config calls it; architectures with more fields (MoE) call it again.
void check_plausible_size(const ModelConfig& c, const std::string& where);

// Reads the Llama-family fields with `defaults` for absent ones, validates them (positive
// sizes, heads divide evenly, activation is silu, no sliding window, within the sanity limits
// above) and returns the config. `where` names the file in errors.
ModelConfig parse_decoder_config(const Json& json, const std::string& where,
                                 const ConfigDefaults& defaults);

// The MoE defaults of the transformers config class an architecture mirrors.
struct MoeDefaults {
  int64_t num_experts;
  int64_t experts_per_token;
  int64_t expert_intermediate;
  int64_t shared_expert_intermediate = 0;  // 0: no shared expert field
};

// Reads and validates the MoE fields (num_experts or num_local_experts, num_experts_per_tok,
// moe_intermediate_size, shared_expert_intermediate_size where the architecture has one,
// decoder_sparse_step, mlp_only_layers, norm_topk_prob, router_aux_loss_coef).
MoeConfig parse_moe_config(const Json& json, const std::string& where, int64_t num_layers,
                           const MoeDefaults& defaults);

}  // namespace furlong::models
