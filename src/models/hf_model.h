// HF model directories, as-is: config.json + safetensors (single or sharded) in, and out.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "io/safetensors.h"
#include "models/causal_lm.h"

namespace furlong::models {

// <dir>/config.json, parsed (errors name the file). When the directory holds weights, the
// config is checked against the checkpoint's tensor shapes (headers only, nothing allocated):
// num_hidden_layers against the layers present, vocab_size / hidden_size against the embedding,
// intermediate_size against the MLP, then every tensor the architecture expects.
Json read_hf_config(const std::filesystem::path& dir);

// The checkpoint's weights under furlong's names for `config` (ModelConfig::
// checkpoint_text_prefix: a multimodal checkpoint's text tensors appear under "model.").
io::HfWeights open_hf_weights(const std::filesystem::path& dir, const ModelConfig& config);

// The name furlong's tensor `name` has in a checkpoint of `config` (the inverse of the above).
std::string checkpoint_tensor_name(const ModelConfig& config, const std::string& name);

// The checkpoint tensors `model` does not run (a multimodal checkpoint's vision tower), under
// their stored names; empty for a causal-LM checkpoint.
std::vector<std::string> passenger_tensors(const CausalLM& model, const io::HfWeights& weights);

// Fails when the shapes `model` expects differ from the checkpoint's (or a tensor is missing).
void check_weight_shapes(const CausalLM& model, const io::HfWeights& weights,
                         const std::filesystem::path& dir);

// Fails before an allocation that cannot succeed: the model's parameters in `dtype` on `device`
// (CPU: compared with MemAvailable of /proc/meminfo) must fit. `where` names the config file.
void check_memory_for_weights(const CausalLM& model, c10::ScalarType dtype, c10::Device device,
                              const std::string& where);

struct LoadOptions {
  // Parameter dtype; default: the checkpoint's torch_dtype.
  std::optional<c10::ScalarType> dtype;
  // Instead of `dtype`: core/dtype.h's resolve_auto_dtype of the checkpoint's torch_dtype (fp32
  // where `device` has no native bf16), logged at info level.
  bool auto_dtype = false;
  c10::Device device = c10::kCPU;
  // A PEFT LoRA adapter directory: its adapters are added to the model (models/lora.h) and
  // loaded from adapter_model.safetensors.
  std::optional<std::filesystem::path> lora_adapter = std::nullopt;
};

// Builds the model config.json describes and loads its weights, matched by HF name with shape
// checks. Tensors the model does not use are reported (warning), missing ones are an error.
std::unique_ptr<CausalLM> load_hf_model(const std::filesystem::path& dir,
                                        const LoadOptions& options = {});

// Copies checkpoint tensors into the model's materialized weights (cast to their dtype).
void load_weights(CausalLM& model, const io::HfWeights& weights, const std::filesystem::path& dir);

// Copies a PEFT adapter directory's tensors into the model's adapters (added with the spec of
// its adapter_config.json). Every adapter must be there with its shape, and every tensor of the
// file must be one of them; errors name the file and the tensor.
void load_peft_adapter(CausalLM& model, const std::filesystem::path& dir);
// Writes the model's adapters as a PEFT adapter directory (adapter_config.json naming
// `base_model_dir`, adapter_model.safetensors in `dtype` under PEFT's names), which
// peft.PeftModel.from_pretrained loads.
void save_peft_adapter(const CausalLM& model, const std::filesystem::path& dir,
                       c10::ScalarType dtype, const std::string& base_model_dir);
// Writes config.json (torch_dtype set to `dtype`) and model.safetensors (sharded past
// max_shard_bytes) for the model's owned weights, so that transformers loads the directory.
void save_hf_model(const CausalLM& model, const std::filesystem::path& dir, c10::ScalarType dtype,
                   uint64_t max_shard_bytes = 5ull << 30);

// The config.json content for `model` saved in `dtype`.
Json hf_config_json(const CausalLM& model, c10::ScalarType dtype);

// transformers' default initialization: normal(0, initializer_range) for projection and
// embedding weights, ones for norms, zeros for biases. Deterministic for a seed (draws on the
// CPU in parameter order, then copies to the weights' device and dtype).
void init_weights(CausalLM& model, uint64_t seed);

}  // namespace furlong::models
