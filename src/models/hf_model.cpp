#include "models/hf_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <fstream>
#include <set>

#include "core/dtype.h"
#include "core/files.h"
#include "core/log.h"
#include "core/strings.h"
#include "models/registry.h"

namespace furlong::models {
namespace {

std::string shape_string(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool holds_weights(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir / "model.safetensors", ec) ||
         std::filesystem::exists(dir / "model.safetensors.index.json", ec);
}

// The layer indices N of the checkpoint's "model.layers.N." tensors.
std::set<int64_t> checkpoint_layers(const io::HfWeights& weights) {
  static const std::string kPrefix = "model.layers.";
  std::set<int64_t> layers;
  for (const auto& name : weights.names()) {
    if (!name.starts_with(kPrefix)) continue;
    size_t end = name.find('.', kPrefix.size());
    const std::string digits = name.substr(kPrefix.size(), end - kPrefix.size());
    if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos &&
        digits.size() < 10) {
      layers.insert(std::stoll(digits));
    }
  }
  return layers;
}

// config[key], when present as a number, must equal what the checkpoint holds.
void check_field(const Json& config, const char* key, int64_t in_checkpoint,
                 const std::string& where, const std::string& evidence) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_number()) return;
  const double given = it->get<double>();
  FURLONG_CHECK(given == static_cast<double>(in_checkpoint), where, ": field '", key, "' is ",
                it->dump(), " but the checkpoint has ", in_checkpoint, " (", evidence,
                "); config.json does not describe these weights");
}

// The fields whose mistakes cost the most memory, checked on the raw JSON before the
// architecture builds anything from them.
void check_fields_against_checkpoint(const Json& config, const io::HfWeights& weights,
                                     const std::string& where) {
  const auto layers = checkpoint_layers(weights);
  if (!layers.empty()) {
    check_field(
        config, "num_hidden_layers", static_cast<int64_t>(layers.size()), where,
        "tensors of layers model.layers.0 .. model.layers." + std::to_string(*layers.rbegin()));
  }
  if (weights.contains("model.embed_tokens.weight")) {
    const auto& shape = weights.info("model.embed_tokens.weight").shape;
    if (shape.size() == 2) {
      const std::string evidence = "model.embed_tokens.weight is " + shape_string(shape);
      check_field(config, "vocab_size", shape[0], where, evidence);
      check_field(config, "hidden_size", shape[1], where, evidence);
    }
  }
  if (weights.contains("model.layers.0.mlp.gate_proj.weight")) {
    const auto& shape = weights.info("model.layers.0.mlp.gate_proj.weight").shape;
    if (shape.size() == 2) {
      check_field(config, "intermediate_size", shape[0], where,
                  "model.layers.0.mlp.gate_proj.weight is " + shape_string(shape));
    }
  }
  // q_proj is [num_attention_heads * head_dim, hidden_size]: head_dim follows from its rows
  // (twice as many in Qwen3.5, whose q_proj also gives each head an output gate).
  auto heads = config.find("num_attention_heads");
  const auto model_type = config.value("model_type", std::string());
  const int64_t rows_per_dim = model_type.starts_with("qwen3_5") ? 2 : 1;
  if (weights.contains("model.layers.0.self_attn.q_proj.weight") && heads != config.end() &&
      heads->is_number_integer() && heads->get<int64_t>() > 0) {
    const auto& shape = weights.info("model.layers.0.self_attn.q_proj.weight").shape;
    const int64_t n = heads->get<int64_t>() * rows_per_dim;
    if (shape.size() == 2 && shape[0] % n == 0) {
      check_field(config, "head_dim", shape[0] / n, where,
                  "model.layers.0.self_attn.q_proj.weight is " + shape_string(shape) + " for " +
                      std::to_string(n / rows_per_dim) + " attention heads");
    }
  }
}

// /proc/meminfo's MemAvailable in bytes; nullopt when it cannot be read.
std::optional<uint64_t> available_host_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

namespace {

void apply_text_prefix(io::HfWeights& weights, const ModelConfig& config) {
  if (config.checkpoint_text_prefix != "model.") {
    weights.rename_prefix(config.checkpoint_text_prefix, "model.");
  }
}

}  // namespace

io::HfWeights open_hf_weights(const std::filesystem::path& dir, const ModelConfig& config) {
  auto weights = io::HfWeights::open(dir);
  apply_text_prefix(weights, config);
  return weights;
}

std::string checkpoint_tensor_name(const ModelConfig& config, const std::string& name) {
  static const std::string kModel = "model.";
  if (config.checkpoint_text_prefix == kModel || !name.starts_with(kModel)) return name;
  return config.checkpoint_text_prefix + name.substr(kModel.size());
}

std::vector<std::string> passenger_tensors(const CausalLM& model, const io::HfWeights& weights) {
  if (model.config().checkpoint_text_prefix == "model.") return {};
  std::set<std::string> used;
  for (const auto& unit : model.units()) {
    for (const auto& spec : unit.params) used.insert(spec.name);
  }
  std::vector<std::string> out;
  for (const auto& name : weights.names()) {
    const bool tied_head = name == "lm_head.weight" && model.config().tie_word_embeddings;
    if (!used.count(name) && !tied_head) out.push_back(weights.on_disk(name));
  }
  return out;
}

Json read_hf_config(const std::filesystem::path& dir) {
  auto path = dir / "config.json";
  FURLONG_CHECK(std::filesystem::is_directory(dir), dir.string(),
                ": not a directory (expected a HF model directory with config.json)");
  FURLONG_CHECK(std::filesystem::exists(path), path.string(),
                ": not found (expected a HF model directory)");
  std::error_code ec;  // a FIFO or device would block or never end the read
  FURLONG_CHECK(std::filesystem::is_regular_file(path, ec), path.string(), ": not a regular file");
  Json config = read_json_file(path);
  if (config.is_object() && holds_weights(dir)) {
    // The fields are checked against the tensors before the architecture reads them; a
    // multimodal checkpoint's text_config once its text tensors have furlong's names.
    auto weights = io::HfWeights::open(dir);
    const bool nested = config.contains("text_config") && config["text_config"].is_object();
    if (!nested) check_fields_against_checkpoint(config, weights, path.string());
    auto model = create_model(config, path.string());
    apply_text_prefix(weights, model->config());
    if (nested) check_fields_against_checkpoint(config["text_config"], weights, path.string());
    check_weight_shapes(*model, weights, dir);
  }
  return config;
}

void check_weight_shapes(const CausalLM& model, const io::HfWeights& weights,
                         const std::filesystem::path& dir) {
  for (const auto& unit : model.units()) {
    for (const auto& spec : unit.params) {
      if (is_lora_parameter(spec.name)) continue;  // adapters come from an adapter directory
      const auto stored = checkpoint_tensor_name(model.config(), spec.name);
      FURLONG_CHECK(weights.contains(spec.name), dir.string(), ": tensor '", stored,
                    "' is missing from the checkpoint (", model.config().architecture,
                    " expects shape ", shape_string(spec.shape), ")");
      const auto& info = weights.info(spec.name);
      FURLONG_CHECK(info.shape == spec.shape, weights.file_of(spec.name).string(), ": tensor '",
                    stored, "' has shape ", shape_string(info.shape), " but config.json implies ",
                    shape_string(spec.shape));
    }
  }
}

void check_memory_for_weights(const CausalLM& model, c10::ScalarType dtype, c10::Device device,
                              const std::string& where) {
  const double bytes =
      static_cast<double>(model.num_parameters()) * static_cast<double>(c10::elementSize(dtype));
  if (!device.is_cpu()) return;  // device memory is the allocator's to report
  const auto available = available_host_memory();
  if (!available) return;
  FURLONG_CHECK(bytes <= static_cast<double>(*available), where, ": the model's ",
                model.num_parameters(), " parameters need ",
                human_bytes(static_cast<uint64_t>(bytes)), " in ", dtype_name(dtype), ", but only ",
                human_bytes(*available),
                " is available (MemAvailable, /proc/meminfo); check hidden_size, "
                "intermediate_size, num_hidden_layers and vocab_size in config.json");
}

void load_weights(CausalLM& model, const io::HfWeights& weights, const std::filesystem::path& dir) {
  check_weight_shapes(model, weights, dir);
  std::set<std::string> used;
  for (size_t u = 0; u < model.units().size(); ++u) {
    const auto& unit = model.units()[u];
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const auto& spec = unit.params[i];
      if (is_lora_parameter(spec.name)) continue;
      at::Tensor& dst = model.weights()[u][i];
      c10::NoGradGuard no_grad;
      dst.copy_(weights.get(spec.name));
      used.insert(spec.name);
    }
  }
  const auto passengers = passenger_tensors(model, weights);
  if (!passengers.empty()) {
    LOG_INFO(dir.string(), ": running the text model of ",
             model.config().raw.value("architectures", Json::array()).dump(), "; ",
             passengers.size(),
             " tensors outside it (such as the vision tower) are kept as they are, not trained");
    return;
  }
  std::vector<std::string> unused;
  for (const auto& name : weights.names()) {
    bool tied_head = name == "lm_head.weight" && model.config().tie_word_embeddings;
    if (!used.count(name) && !tied_head) unused.push_back(name);
  }
  if (!unused.empty()) {
    if (unused.size() > 5) unused.resize(5), unused.push_back("...");
    LOG_WARN(dir.string(),
             ": ignoring checkpoint tensors the model does not use: ", join(unused, ", "));
  }
}

std::unique_ptr<CausalLM> load_hf_model(const std::filesystem::path& dir,
                                        const LoadOptions& options) {
  Json config = read_hf_config(dir);
  auto model = create_model(config, (dir / "config.json").string());
  if (options.lora_adapter) model->add_lora(read_peft_adapter_config(*options.lora_adapter));
  auto weights = open_hf_weights(dir, model->config());
  auto dtype = options.dtype.value_or(model->config().dtype);
  if (options.auto_dtype) {
    std::string reason;
    dtype = resolve_auto_dtype(model->config().dtype, options.device, &reason);
    LOG_INFO(dir.string(), ": checkpoint dtype ", dtype_name(model->config().dtype),
             ", compute dtype ", reason);
  }
  check_memory_for_weights(*model, dtype, options.device, (dir / "config.json").string());
  model->materialize(at::TensorOptions().dtype(dtype).device(options.device));
  load_weights(*model, weights, dir);
  if (options.lora_adapter) load_peft_adapter(*model, *options.lora_adapter);
  return model;
}

void load_peft_adapter(CausalLM& model, const std::filesystem::path& dir) {
  const auto file = io::SafetensorsFile::open(dir / "adapter_model.safetensors");
  std::set<std::string> used;
  for (size_t u = 0; u < model.units().size(); ++u) {
    const auto& params = model.units()[u].params;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!is_lora_parameter(params[i].name)) continue;
      const std::string stored = peft_tensor_name(params[i].name);
      const auto* info = file->find(stored);
      FURLONG_CHECK(info != nullptr, file->path().string(), ": tensor '", stored,
                    "' is missing (adapter_config.json targets its projection)");
      FURLONG_CHECK(info->shape == params[i].shape, file->path().string(), ": tensor '", stored,
                    "' has shape ", shape_string(info->shape), " but the model and r imply ",
                    shape_string(params[i].shape));
      c10::NoGradGuard no_grad;
      model.weights()[u][i].copy_(file->tensor(stored));
      used.insert(stored);
    }
  }
  // An adapter tensor the model does not apply would change PEFT's outputs but not furlong's.
  std::vector<std::string> unused;
  for (const auto& t : file->tensors()) {
    if (!used.count(t.name)) unused.push_back(t.name);
  }
  if (unused.size() > 5) unused.resize(5), unused.push_back("...");
  FURLONG_CHECK(unused.empty(), file->path().string(),
                ": tensors furlong would not apply: ", join(unused, ", "));
}

void save_peft_adapter(const CausalLM& model, const std::filesystem::path& dir,
                       c10::ScalarType dtype, const std::string& base_model_dir) {
  FURLONG_CHECK(model.lora().enabled(), "save_peft_adapter: the model has no LoRA adapters");
  FURLONG_ASSERT(model.materialized(), "save_peft_adapter: weights are not materialized");
  ensure_directory(dir);
  io::NamedTensors tensors;
  for (auto& [name, tensor] : model.named_weights()) {
    if (!is_lora_parameter(name)) continue;
    tensors.emplace_back(peft_tensor_name(name), tensor.detach().to(at::kCPU, dtype).contiguous());
  }
  io::save_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir / "adapter_config.json",
                    peft_adapter_config(model.lora(), base_model_dir).dump(2) + "\n");
}

Json hf_config_json(const CausalLM& model, c10::ScalarType dtype) {
  Json json = model.config().raw;
  if (model.config().checkpoint_text_prefix == "model.") {
    json["architectures"] = Json::array({model.config().architecture});
  }
  json.erase("dtype");
  json["torch_dtype"] = dtype_name(dtype);
  return json;
}

void save_hf_model(const CausalLM& model, const std::filesystem::path& dir, c10::ScalarType dtype,
                   uint64_t max_shard_bytes) {
  FURLONG_ASSERT(model.materialized(), "save_hf_model: weights are not materialized");
  ensure_directory(dir);
  io::NamedTensors tensors;
  for (auto& [name, tensor] : model.named_weights()) {
    tensors.emplace_back(checkpoint_tensor_name(model.config(), name),
                         tensor.detach().to(at::kCPU, dtype).contiguous());
  }
  io::save_hf_weights(dir, tensors, max_shard_bytes);
  write_file_atomic(dir / "config.json", hf_config_json(model, dtype).dump(2) + "\n");
}

void init_weights(CausalLM& model, uint64_t seed) {
  FURLONG_ASSERT(model.materialized(), "init_weights: weights are not materialized");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  c10::NoGradGuard no_grad;
  double std_dev = model.config().initializer_range;
  for (size_t u = 0; u < model.units().size(); ++u) {
    const auto& unit = model.units()[u];
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const auto& spec = unit.params[i];
      at::Tensor value;
      switch (spec.init) {
        case ParamInit::kNormal:
          value = at::empty(spec.shape, at::kFloat).normal_(0.0, std_dev, gen);
          break;
        case ParamInit::kOnes:
          value = at::ones(spec.shape, at::kFloat);
          break;
        case ParamInit::kZeros:
          value = at::zeros(spec.shape, at::kFloat);
          break;
        case ParamInit::kLoraA: {
          const double bound = 1.0 / std::sqrt(static_cast<double>(spec.shape.at(1)));
          value = at::empty(spec.shape, at::kFloat).uniform_(-bound, bound, gen);
          break;
        }
      }
      model.weights()[u][i].copy_(value);
    }
  }
}

}  // namespace furlong::models
