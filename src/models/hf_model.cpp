#include "models/hf_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

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

}  // namespace

Json read_hf_config(const std::filesystem::path& dir) {
  auto path = dir / "config.json";
  FURLONG_CHECK(std::filesystem::is_directory(dir), dir.string(),
                ": not a directory (expected a HF model directory with config.json)");
  FURLONG_CHECK(std::filesystem::exists(path), path.string(),
                ": not found (expected a HF model directory)");
  return read_json_file(path);
}

void load_weights(CausalLM& model, const io::HfWeights& weights, const std::filesystem::path& dir) {
  std::set<std::string> used;
  for (size_t u = 0; u < model.units().size(); ++u) {
    const auto& unit = model.units()[u];
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const auto& spec = unit.params[i];
      FURLONG_CHECK(weights.contains(spec.name), dir.string(), ": tensor '", spec.name,
                    "' is missing from the checkpoint (", model.config().architecture,
                    " expects shape ", shape_string(spec.shape), ")");
      const auto& info = weights.info(spec.name);
      FURLONG_CHECK(info.shape == spec.shape, weights.file_of(spec.name).string(), ": tensor '",
                    spec.name, "' has shape ", shape_string(info.shape),
                    " but config.json implies ", shape_string(spec.shape));
      at::Tensor& dst = model.weights()[u][i];
      c10::NoGradGuard no_grad;
      dst.copy_(weights.get(spec.name));
      used.insert(spec.name);
    }
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
  auto weights = io::HfWeights::open(dir);
  auto dtype = options.dtype.value_or(model->config().dtype);
  model->materialize(at::TensorOptions().dtype(dtype).device(options.device));
  load_weights(*model, weights, dir);
  return model;
}

Json hf_config_json(const CausalLM& model, c10::ScalarType dtype) {
  Json json = model.config().raw;
  json["architectures"] = Json::array({model.config().architecture});
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
    tensors.emplace_back(name, tensor.detach().to(at::kCPU, dtype).contiguous());
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
      }
      model.weights()[u][i].copy_(value);
    }
  }
}

}  // namespace furlong::models
