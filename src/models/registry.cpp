#include "models/registry.h"

#include "core/strings.h"

namespace furlong::models {

const std::vector<ArchEntry>& architectures() {
  static const std::vector<ArchEntry> kArchitectures = {
      {"Qwen3ForCausalLM", "qwen3", &create_qwen3},
      {"Qwen3MoeForCausalLM", "qwen3_moe", &create_qwen3_moe},
      {"Qwen2ForCausalLM", "qwen2", &create_qwen2},
      {"LlamaForCausalLM", "llama", &create_llama},
      {"Qwen3_5ForCausalLM", "qwen3_5_text", &create_qwen3_5},
      {"Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", &create_qwen3_5_moe},
      {"Qwen3_5ForConditionalGeneration", "qwen3_5", &create_qwen3_5_multimodal},
      {"Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", &create_qwen3_5_multimodal},
  };
  return kArchitectures;
}

std::unique_ptr<CausalLM> create_model(const Json& config, const std::string& where) {
  FURLONG_CHECK(config.is_object(), where, ": expected a JSON object, got ",
                json_type_name(config));
  std::string arch;
  if (config.contains("architectures") && !config["architectures"].is_null()) {
    auto list = json_get<std::vector<std::string>>(config, "architectures", where);
    FURLONG_CHECK(!list.empty(), where, ": field 'architectures' is an empty list");
    arch = list[0];
  }
  std::string model_type = json_get_or<std::string>(config, "model_type", "", where);
  FURLONG_CHECK(!arch.empty() || !model_type.empty(), where,
                ": neither 'architectures' nor 'model_type' says which model this is");
  std::vector<std::string> known;
  for (const auto& entry : architectures()) {
    if ((!arch.empty() && arch == entry.architecture) ||
        (arch.empty() && model_type == entry.model_type)) {
      return entry.create(config, where);
    }
    known.push_back(entry.architecture);
  }
  std::string name =
      arch.empty() ? "model_type '" + model_type + "'" : "architecture '" + arch + "'";
  auto hint = closest_match(arch.empty() ? model_type : arch, known);
  FURLONG_FAIL(where, ": unsupported ", name, "; furlong implements ", join(known, ", "),
               hint ? " (did you mean " + *hint + "?)" : "");
}

}  // namespace furlong::models
