#include "models/model_config.h"

#include <algorithm>
#include <cstdio>

#include "core/dtype.h"

namespace furlong::models {
namespace {

int64_t positive_field(const Json& json, const char* key, int64_t fallback,
                       const std::string& where) {
  int64_t v = json_get_or<int64_t>(json, key, fallback, where);
  FURLONG_CHECK(v > 0, where, ": field '", key, "' must be a positive integer, got ", v);
  return v;
}

// The special-token fields transformers reads from config.json: eos_token_id is an id or a list
// of ids, pad_token_id an id; either may be null or absent. Only their types are checked: some
// published conversions write -1 for "no pad token".
void check_special_token_fields(const Json& json, const std::string& where) {
  auto is_id = [](const Json& v) { return v.is_number_integer(); };
  if (auto eos = json.find("eos_token_id"); eos != json.end() && !eos->is_null()) {
    const bool ok =
        is_id(*eos) || (eos->is_array() && std::all_of(eos->begin(), eos->end(), is_id));
    FURLONG_CHECK(ok, where,
                  ": field 'eos_token_id' must be an integer token id or a list of them, got ",
                  json_type_name(*eos), " ", json_excerpt(*eos));
  }
  if (auto pad = json.find("pad_token_id"); pad != json.end() && !pad->is_null()) {
    FURLONG_CHECK(is_id(*pad), where,
                  ": field 'pad_token_id' must be an integer token id or null, got ",
                  json_type_name(*pad), " ", json_excerpt(*pad));
  }
}

// transformers v5 writes "rope_parameters"; older files have "rope_theta" at the top level and
// an optional "rope_scaling" dict ("type" or "rope_type").
RopeConfig parse_rope(const Json& json, const std::string& where, double default_theta,
                      int64_t max_position_embeddings) {
  RopeConfig rope;
  Json params = Json::object();
  const char* params_key = "rope_parameters";
  if (json.contains("rope_parameters") && !json["rope_parameters"].is_null()) {
    params = json["rope_parameters"];
  } else if (json.contains("rope_scaling") && !json["rope_scaling"].is_null()) {
    params = json["rope_scaling"];
    params_key = "rope_scaling";
  }
  std::string ctx = where + ": " + params_key;
  FURLONG_CHECK(params.is_object(), where, ": field '", params_key, "' must be an object, got ",
                json_type_name(params));
  rope.theta = json_get_or<double>(json, "rope_theta", default_theta, where);
  rope.theta = json_get_or<double>(params, "rope_theta", rope.theta, ctx);
  rope.partial_rotary_factor = json_get_or<double>(json, "partial_rotary_factor", 1.0, where);
  rope.partial_rotary_factor =
      json_get_or<double>(params, "partial_rotary_factor", rope.partial_rotary_factor, ctx);
  rope.type = json_get_or<std::string>(params, "type", "default", ctx);
  rope.type = json_get_or<std::string>(params, "rope_type", rope.type, ctx);
  FURLONG_CHECK(rope.theta > 0, where, ": rope_theta must be positive, got ", rope.theta);

  const std::string& t = rope.type;
  FURLONG_CHECK(t == "default" || t == "linear" || t == "dynamic" || t == "yarn" || t == "llama3",
                where, ": unsupported rope_type '", t,
                "'; furlong supports default, linear, dynamic, yarn and llama3");
  if (t == "default") return rope;
  rope.factor = json_get<double>(params, "factor", ctx);
  FURLONG_CHECK(rope.factor >= 1.0, ctx, ": 'factor' must be >= 1, got ", rope.factor);
  rope.original_max_position_embeddings = json_get_or<int64_t>(
      json, "original_max_position_embeddings", max_position_embeddings, where);
  rope.original_max_position_embeddings = json_get_or<int64_t>(
      params, "original_max_position_embeddings", rope.original_max_position_embeddings, ctx);
  if (t == "llama3") {
    rope.low_freq_factor = json_get<double>(params, "low_freq_factor", ctx);
    rope.high_freq_factor = json_get<double>(params, "high_freq_factor", ctx);
    FURLONG_CHECK(rope.high_freq_factor > rope.low_freq_factor, ctx,
                  ": high_freq_factor must exceed low_freq_factor");
  } else if (t == "yarn") {
    rope.attention_factor = json_get_optional<double>(params, "attention_factor", ctx);
    rope.beta_fast = json_get_or<double>(params, "beta_fast", 32.0, ctx);
    rope.beta_slow = json_get_or<double>(params, "beta_slow", 1.0, ctx);
    rope.mscale = json_get_optional<double>(params, "mscale", ctx);
    rope.mscale_all_dim = json_get_optional<double>(params, "mscale_all_dim", ctx);
    rope.truncate = json_get_or<bool>(params, "truncate", true, ctx);
  }
  return rope;
}

std::string scientific(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

}  // namespace

bool MoeConfig::is_sparse_layer(int64_t layer) const {
  if (!enabled() || (layer + 1) % decoder_sparse_step != 0) return false;
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

int64_t MoeConfig::num_sparse_layers(int64_t num_layers) const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += is_sparse_layer(l) ? 1 : 0;
  return n;
}

ParameterEstimate estimate_parameters(const ModelConfig& c) {
  const auto D = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const double H = static_cast<double>(c.head_dim);
  const double NH = static_cast<double>(c.num_attention_heads) * H;
  const double KH = static_cast<double>(c.num_key_value_heads) * H;
  const auto L = static_cast<double>(c.num_hidden_layers);
  ParameterEstimate p;
  p.embedding = static_cast<double>(c.vocab_size) * D * (c.tie_word_embeddings ? 1 : 2);
  double attention_and_norms = 2 * NH * D + 2 * KH * D + 2 * D;
  double dense_mlp = 3 * F * D;
  // Counted without a loop over layers, so that a corrupted num_hidden_layers costs nothing.
  double sparse_layers = 0;
  double sparse_mlp = 0;
  if (c.moe.enabled()) {
    const auto E = static_cast<double>(c.moe.num_experts);
    sparse_mlp = E * D + E * 3 * static_cast<double>(c.moe.expert_intermediate) * D +
                 3 * static_cast<double>(c.moe.shared_expert_intermediate) * D;
    sparse_layers = L <= static_cast<double>(kMaxHiddenLayers)
                        ? static_cast<double>(c.moe.num_sparse_layers(c.num_hidden_layers))
                        : L / static_cast<double>(c.moe.decoder_sparse_step);
  }
  double mlps = (L - sparse_layers) * dense_mlp + sparse_layers * sparse_mlp;
  p.per_layer = attention_and_norms + (L > 0 ? mlps / L : 0);
  p.total = p.embedding + L * p.per_layer + D;
  return p;
}

void check_plausible_size(const ModelConfig& c, const std::string& where) {
  FURLONG_CHECK(c.num_hidden_layers <= kMaxHiddenLayers, where, ": field 'num_hidden_layers' is ",
                c.num_hidden_layers, ", beyond furlong's limit of ", kMaxHiddenLayers,
                " (published models have at most a few hundred layers); is the file corrupted?");
  const ParameterEstimate p = estimate_parameters(c);
  std::string experts = c.moe.enabled() ? ", num_experts " + std::to_string(c.moe.num_experts) +
                                              ", moe_intermediate_size " +
                                              std::to_string(c.moe.expert_intermediate)
                                        : "";
  FURLONG_CHECK(
      p.total <= kMaxParameters, where, ": the model described has about ", scientific(p.total),
      " parameters (embedding: vocab_size ", c.vocab_size, " x hidden_size ", c.hidden_size, " = ",
      scientific(p.embedding), "; num_hidden_layers ", c.num_hidden_layers, " x ",
      scientific(p.per_layer), " per layer from hidden_size ", c.hidden_size,
      ", intermediate_size ", c.intermediate_size, ", num_attention_heads ", c.num_attention_heads,
      ", num_key_value_heads ", c.num_key_value_heads, ", head_dim ", c.head_dim, experts,
      "), beyond furlong's limit of ", scientific(kMaxParameters), "; check these fields");
}

bool LinearAttentionConfig::is_linear_layer(int64_t layer) const {
  return std::binary_search(layers.begin(), layers.end(), layer);
}

namespace {

bool gives_partial_rotary(const Json& json) {
  if (json.contains("partial_rotary_factor")) return true;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (json.contains(key) && json[key].is_object() && json[key].contains("partial_rotary_factor"))
      return true;
  }
  return false;
}

// The rotary share of each head: 1 unless the architecture rotates part of it (and then the
// rotated width must be a positive even number of dims).
void check_partial_rotary(const Json& json, ModelConfig& c, const ConfigDefaults& defaults,
                          const std::string& where) {
  double& f = c.rope.partial_rotary_factor;
  if (!defaults.partial_rotary_factor) {
    FURLONG_CHECK(f == 1.0, where, ": partial_rotary_factor != 1 is not supported for ",
                  c.model_type.empty() ? "this architecture" : c.model_type);
    return;
  }
  if (!gives_partial_rotary(json)) f = *defaults.partial_rotary_factor;
  const auto rotary = static_cast<int64_t>(static_cast<double>(c.head_dim) * f);
  FURLONG_CHECK(f > 0 && f <= 1 && rotary > 0 && rotary % 2 == 0, where, ": partial_rotary_factor ",
                f, " with head_dim ", c.head_dim, " rotates ", rotary,
                " dims; it must rotate a positive even number of dims, at most head_dim");
}

}  // namespace

ModelConfig parse_decoder_config(const Json& json, const std::string& where,
                                 const ConfigDefaults& defaults) {
  FURLONG_CHECK(json.is_object(), where, ": expected a JSON object, got ", json_type_name(json));
  ModelConfig c;
  c.raw = json;
  c.model_type = json_get_or<std::string>(json, "model_type", "", where);
  c.vocab_size = positive_field(json, "vocab_size", defaults.vocab_size, where);
  c.hidden_size = positive_field(json, "hidden_size", defaults.hidden_size, where);
  c.intermediate_size =
      positive_field(json, "intermediate_size", defaults.intermediate_size, where);
  c.num_hidden_layers =
      positive_field(json, "num_hidden_layers", defaults.num_hidden_layers, where);
  c.num_attention_heads =
      positive_field(json, "num_attention_heads", defaults.num_attention_heads, where);
  c.num_key_value_heads =
      positive_field(json, "num_key_value_heads",
                     defaults.num_key_value_heads.value_or(c.num_attention_heads), where);
  FURLONG_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, where,
                ": num_attention_heads (", c.num_attention_heads,
                ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  std::optional<int64_t> head_dim = json_get_optional<int64_t>(json, "head_dim", where);
  if (!head_dim) head_dim = defaults.head_dim;
  if (!head_dim) {
    FURLONG_CHECK(c.hidden_size % c.num_attention_heads == 0, where, ": hidden_size (",
                  c.hidden_size, ") must be a multiple of num_attention_heads (",
                  c.num_attention_heads, ") when head_dim is not given");
    head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.head_dim = *head_dim;
  FURLONG_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, where,
                ": head_dim must be a positive even number, got ", c.head_dim);
  // RoPE tables are head_dim wide: a corrupted value would allocate gigabytes before any
  // parameter count is checked.
  FURLONG_CHECK(c.head_dim <= kMaxHeadDim, where, ": field 'head_dim' is ", c.head_dim,
                ", beyond furlong's limit of ", kMaxHeadDim,
                " (published models use 64 to 256); is the file corrupted?");
  c.max_position_embeddings =
      positive_field(json, "max_position_embeddings", defaults.max_position_embeddings, where);
  c.rms_norm_eps = json_get_or<double>(json, "rms_norm_eps", defaults.rms_norm_eps, where);
  FURLONG_CHECK(c.rms_norm_eps > 0, where, ": rms_norm_eps must be positive");
  c.initializer_range = json_get_or<double>(json, "initializer_range", 0.02, where);
  c.tie_word_embeddings = json_get_or<bool>(json, "tie_word_embeddings", false, where);
  check_special_token_fields(json, where);

  std::string act = json_get_or<std::string>(json, "hidden_act", "silu", where);
  FURLONG_CHECK(act == "silu", where, ": hidden_act '", act, "' is not supported (only silu)");
  FURLONG_CHECK(!json_get_or<bool>(json, "use_sliding_window", false, where), where,
                ": use_sliding_window=true is not supported by furlong yet");
  double dropout = json_get_or<double>(json, "attention_dropout", 0.0, where);
  FURLONG_CHECK(dropout == 0.0, where, ": attention_dropout must be 0 (got ", dropout, ")");
  int64_t tp = json_get_or<int64_t>(json, "pretraining_tp", 1, where);
  FURLONG_CHECK(tp == 1, where, ": pretraining_tp=", tp, " is not supported (only 1)");

  c.rope = parse_rope(json, where, defaults.rope_theta, c.max_position_embeddings);
  check_partial_rotary(json, c, defaults, where);

  std::string dtype = json_get_or<std::string>(json, "torch_dtype", "float32", where);
  dtype = json_get_or<std::string>(json, "dtype", dtype, where);
  c.dtype = parse_dtype(dtype, where + ": field 'torch_dtype'");
  check_plausible_size(c, where);  // before any architecture builds its parameter list
  return c;
}

MoeConfig parse_moe_config(const Json& json, const std::string& where, int64_t num_layers,
                           const MoeDefaults& defaults) {
  MoeConfig moe;
  // transformers 5 writes the expert count as "num_local_experts"; published configs say
  // "num_experts".
  int64_t experts = json_get_or<int64_t>(json, "num_local_experts", defaults.num_experts, where);
  moe.num_experts = json_get_or<int64_t>(json, "num_experts", experts, where);
  moe.experts_per_token =
      json_get_or<int64_t>(json, "num_experts_per_tok", defaults.experts_per_token, where);
  moe.expert_intermediate =
      json_get_or<int64_t>(json, "moe_intermediate_size", defaults.expert_intermediate, where);
  if (defaults.shared_expert_intermediate > 0) {
    moe.shared_expert_intermediate = json_get_or<int64_t>(
        json, "shared_expert_intermediate_size", defaults.shared_expert_intermediate, where);
    FURLONG_CHECK(moe.shared_expert_intermediate > 0, where,
                  ": field 'shared_expert_intermediate_size' must be positive, got ",
                  moe.shared_expert_intermediate);
  }
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

}  // namespace furlong::models
