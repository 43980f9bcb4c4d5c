// The explicit list of architectures furlong implements, keyed by the names HF config.json
// uses ("architectures"[0], or "model_type"). Adding a model = one file + one line in
// registry.cpp (see docs/adding-a-model.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "models/causal_lm.h"

namespace furlong::models {

using ArchFactory = std::unique_ptr<CausalLM> (*)(const Json& config, const std::string& where);

struct ArchEntry {
  const char* architecture;  // "Qwen3ForCausalLM"
  const char* model_type;    // "qwen3"
  ArchFactory create;
};

const std::vector<ArchEntry>& architectures();

// Builds the (unmaterialized) model a config.json describes; `where` names the file.
std::unique_ptr<CausalLM> create_model(const Json& config, const std::string& where);

// One factory per architecture file.
std::unique_ptr<CausalLM> create_qwen3(const Json& config, const std::string& where);
std::unique_ptr<CausalLM> create_qwen3_moe(const Json& config, const std::string& where);
std::unique_ptr<CausalLM> create_qwen2(const Json& config, const std::string& where);
std::unique_ptr<CausalLM> create_llama(const Json& config, const std::string& where);
std::unique_ptr<CausalLM> create_qwen3_5(const Json& config, const std::string& where);
std::unique_ptr<CausalLM> create_qwen3_5_moe(const Json& config, const std::string& where);
// Qwen3_5(Moe)ForConditionalGeneration: its text model, the vision tower kept as it is.
std::unique_ptr<CausalLM> create_qwen3_5_multimodal(const Json& config, const std::string& where);

}  // namespace furlong::models
