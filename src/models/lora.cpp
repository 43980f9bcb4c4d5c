#include "models/lora.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/strings.h"

namespace furlong::models {
namespace {

const std::vector<std::string>& attn_targets() {
  static const std::vector<std::string> t = {"q_proj", "k_proj", "v_proj", "o_proj"};
  return t;
}
const std::vector<std::string>& mlp_targets() {
  static const std::vector<std::string> t = {"gate_proj", "up_proj", "down_proj"};
  return t;
}

constexpr const char* kPeftPrefix = "base_model.model.";

void add_unique(std::vector<std::string>& out, const std::string& leaf) {
  if (std::find(out.begin(), out.end(), leaf) == out.end()) out.push_back(leaf);
}

// The leaf names of a comma-separated list of leaves and groups; `where` names it in errors.
std::vector<std::string> leaves_of(const std::string& list, const std::string& where) {
  std::vector<std::string> out;
  for (const auto& raw : split(list, ',')) {
    const std::string item(trim(raw));
    if (item.empty()) continue;
    if (item == "all-linear") {
      for (const auto& t : all_linear_lora_targets()) add_unique(out, t);
    } else if (item == "attn") {
      for (const auto& t : attn_targets()) add_unique(out, t);
    } else if (item == "mlp") {
      for (const auto& t : mlp_targets()) add_unique(out, t);
    } else {
      const auto& known = all_linear_lora_targets();
      if (std::find(known.begin(), known.end(), item) == known.end()) {
        std::vector<std::string> names = known;
        for (const char* g : {"all-linear", "attn", "mlp"}) names.emplace_back(g);
        const auto hint = closest_match(item, names);
        FURLONG_FAIL(where, ": unknown LoRA target '", item, "'; furlong puts adapters on ",
                     join(names, ", "), hint ? " (did you mean " + *hint + "?)" : "");
      }
      add_unique(out, item);
    }
  }
  return out;
}

}  // namespace

double LoraSpec::scaling() const {
  FURLONG_ASSERT(rank > 0, "LoraSpec::scaling without a rank");
  const double r = static_cast<double>(rank);
  return rslora ? alpha / std::sqrt(r) : alpha / r;
}

bool LoraSpec::targets_leaf(const std::string& leaf) const {
  return std::find(targets.begin(), targets.end(), leaf) != targets.end();
}

const std::vector<std::string>& all_linear_lora_targets() {
  static const std::vector<std::string> t = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
  return t;
}

LoraSpec read_peft_adapter_config(const std::filesystem::path& dir) {
  const auto path = dir / "adapter_config.json";
  const std::string where = path.string();
  FURLONG_CHECK(std::filesystem::exists(path), where,
                " does not exist: a PEFT adapter directory holds adapter_config.json and "
                "adapter_model.safetensors");
  const Json c = Json::parse(read_ordered_json_file(path).dump());
  FURLONG_CHECK(c.is_object(), where, ": expected a JSON object");
  FURLONG_CHECK(c.value("peft_type", std::string()) == "LORA", where,
                ": peft_type must be \"LORA\", got ", c.value("peft_type", Json()).dump());
  LoraSpec spec;
  spec.rank = json_get<int64_t>(c, "r", where);
  FURLONG_CHECK(spec.rank >= 1 && spec.rank <= 65536, where, ": r must be in 1..65536, got ",
                spec.rank);
  spec.alpha = json_get_or<double>(c, "lora_alpha", 8.0, where);
  FURLONG_CHECK(std::isfinite(spec.alpha) && spec.alpha > 0, where,
                ": lora_alpha must be a positive number, got ", spec.alpha);
  spec.rslora = json_get_or<bool>(c, "use_rslora", false, where);
  // What changes the forward and furlong does not compute is refused, by name.
  auto refuse_unless = [&](const char* field, const Json& fine, const char* why) {
    if (!c.contains(field) || c[field].is_null() || c[field] == fine) return;
    if (c[field].is_object() && c[field].empty() && fine.is_null()) return;
    if (c[field].is_array() && c[field].empty() && fine.is_null()) return;
    FURLONG_FAIL(where, ": ", field, " = ", c[field].dump(), " is not supported (", why, ")");
  };
  refuse_unless("use_dora", false, "DoRA");
  refuse_unless("bias", "none", "trained biases");
  refuse_unless("fan_in_fan_out", false, "Conv1D-style weights");
  refuse_unless("rank_pattern", Json(), "per-module ranks");
  refuse_unless("alpha_pattern", Json(), "per-module alphas");
  refuse_unless("layers_to_transform", Json(), "adapters on some layers only");
  refuse_unless("modules_to_save", Json(), "fully trained extra modules");
  refuse_unless("target_parameters", Json(), "adapters on parameters (MoE experts)");
  const Json& targets = c.value("target_modules", Json());
  if (targets.is_string()) {
    spec.targets = leaves_of(targets.get<std::string>(), where + ": target_modules");
  } else {
    FURLONG_CHECK(targets.is_array() && !targets.empty(), where,
                  ": target_modules must be a non-empty list of module names or \"all-linear\"");
    std::vector<std::string> names;
    for (const auto& t : targets) {
      FURLONG_CHECK(t.is_string(), where, ": target_modules holds a non-string ", t.dump());
      // PEFT matches a module name by suffix: "model.layers.0.self_attn.q_proj" names q_proj.
      std::string name = t.get<std::string>();
      names.push_back(name.substr(name.rfind('.') + 1));
    }
    spec.targets = leaves_of(join(names, ","), where + ": target_modules");
  }
  return spec;
}

Json peft_adapter_config(const LoraSpec& spec, const std::string& base_model_dir) {
  return Json{{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"base_model_name_or_path", base_model_dir},
              {"r", spec.rank},
              {"lora_alpha", spec.alpha},
              {"lora_dropout", 0.0},
              {"use_rslora", spec.rslora},
              {"target_modules", spec.targets},
              {"bias", "none"},
              {"fan_in_fan_out", false},
              {"init_lora_weights", true},
              {"use_dora", false}};
}

std::string peft_tensor_name(const std::string& name) {
  return kPeftPrefix + name;
}

bool is_lora_parameter(const std::string& name) {
  return name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight");
}

at::Tensor lora_linear(const LinearFn& linear, const at::Tensor& x, const at::Tensor& w,
                       const at::Tensor& b, const at::Tensor& a_RI, const at::Tensor& b_OR,
                       double scaling) {
  at::Tensor y = apply_linear(linear, x, w, b);
  if (!a_RI.defined()) return y;
  const at::Tensor none;
  return y + apply_linear(linear, apply_linear(linear, x, a_RI, none), b_OR, none) * scaling;
}

}  // namespace furlong::models
