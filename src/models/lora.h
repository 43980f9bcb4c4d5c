// LoRA adapters on a model's linear projections, as PEFT defines them (its `LoraConfig`, tuner
// "LORA"): for a targeted projection y = x W^T + b with W [out, in],
//
//   y = x W^T + b + ((x A^T) B^T) * scaling,   A [r, in], B [out, r],
//   scaling = alpha / r  (alpha / sqrt(r) with rsLoRA),
//
// computed unmerged, in this order, as PEFT's forward does. The adapters are parameters of the
// block's unit, named after the projection: "model.layers.3.self_attn.q_proj.lora_A.weight"
// (PEFT saves "base_model.model." + that name). PEFT's initialization: A kaiming-uniform
// (bounds +-1/sqrt(in)), B zeros, so a fresh adapter leaves the model's outputs unchanged.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "models/layers.h"

namespace furlong::models {

struct LoraSpec {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16.0;
  bool rslora = false;
  // Projection leaf names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj).
  std::vector<std::string> targets;

  bool enabled() const { return rank > 0; }
  double scaling() const;
  bool targets_leaf(const std::string& leaf) const;
};

// The projections "all-linear" means for a decoder (PEFT's all-linear without the lm_head).
const std::vector<std::string>& all_linear_lora_targets();

// A PEFT adapter directory's adapter_config.json as a LoraSpec: peft_type LORA, r, lora_alpha,
// target_modules (a list or "all-linear"), use_rslora. Errors name the file and the field, and
// refuse what furlong does not compute (dropout > 0 is accepted: it changes training only).
LoraSpec read_peft_adapter_config(const std::filesystem::path& dir);
// adapter_config.json for `spec` (what PeftModel.from_pretrained reads).
Json peft_adapter_config(const LoraSpec& spec, const std::string& base_model_dir);

// The name PEFT saves furlong's adapter parameter `name` under, and back.
std::string peft_tensor_name(const std::string& name);
bool is_lora_parameter(const std::string& name);

// y = x W^T + b, plus the adapter's ((x A^T) B^T) * scaling when `a_RI` is defined. `linear`
// computes every GEMM (the trainer's at::linear or the engine's kernel).
at::Tensor lora_linear(const LinearFn& linear, const at::Tensor& x, const at::Tensor& w,
                       const at::Tensor& b, const at::Tensor& a_RI, const at::Tensor& b_OR,
                       double scaling);

}  // namespace furlong::models
