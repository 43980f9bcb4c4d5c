#include "fsdp/fsdp_model.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"

namespace furlong::fsdp {

FsdpModel::FsdpModel(std::unique_ptr<models::CausalLM> model, dist::Mesh& mesh,
                     const FsdpOptions& options, c10::Device device)
    : model_(std::move(model)), mesh_(&mesh), options_(options), device_(device) {
  FURLONG_ASSERT(!model_->materialized(), "FSDP takes an unmaterialized model");
  storage_dtype_ = options_.keep_fp32_master ? c10::kFloat : model_->config().dtype;
  UnitConfig config{.storage_dtype = storage_dtype_,
                    .param_dtype = options_.param_dtype,
                    .reduce_dtype = options_.reduce_dtype,
                    .grad_divide_factor = static_cast<double>(mesh.world_size()),
                    .compute_device = device_};
  const c10::Device storage_device = options_.cpu_offload ? c10::Device(c10::kCPU) : device_;
  for (const auto& unit : model_->units()) {
    std::vector<ShardLayout> layouts;
    for (const auto& p : unit.params) {
      layouts.push_back(ShardLayout::make(p.name, p.shape, mesh.shard_index(), mesh.shard_size()));
    }
    units_.push_back(
        std::make_unique<FsdpUnit>(unit.name, std::move(layouts), config, mesh, storage_device));
  }
}

FsdpModel::~FsdpModel() = default;

void FsdpModel::load_hf(const io::HfWeights& weights) {
  load_full([&](const std::string& name) -> at::Tensor {
    FURLONG_CHECK(weights.contains(name), weights.dir().string(), ": tensor '", name,
                  "' is missing from the checkpoint");
    return weights.get(name);
  });
}

void FsdpModel::load_full(const std::function<at::Tensor(const std::string&)>& full_tensor) {
  c10::NoGradGuard no_grad;
  for (auto& unit : units_) {
    for (size_t i = 0; i < unit->layouts().size(); ++i) {
      const auto& l = unit->layouts()[i];
      at::Tensor full = full_tensor(l.name);
      FURLONG_CHECK(full.sizes() == c10::IntArrayRef(l.shape), "tensor '", l.name, "' has shape ",
                    full.sizes(), " but the model expects ", c10::IntArrayRef(l.shape));
      if (l.local_rows > 0) unit->shards()[i].copy_(full.narrow(0, l.row_begin, l.local_rows));
    }
  }
}

void FsdpModel::hook_block_output(at::Tensor& x, int64_t layer) {
  // Runs when the gradient of this block's output is complete, i.e. just before the block's
  // own backward: re-gather it, and start gathering the block before it.
  x.register_hook([this, layer](const at::Tensor&) {
    units_[model_->layer_unit(layer)]->finish_gather();
    if (options_.prefetch && layer > 0) units_[model_->layer_unit(layer - 1)]->start_gather();
  });
}

FsdpModel::Output FsdpModel::forward(const models::PackedBatch& batch,
                                     const models::ForwardOptions& options) {
  const bool grad = c10::GradMode::is_enabled();
  const bool tied = model_->config().tie_word_embeddings;
  const int64_t L = model_->num_layers();
  auto& embed_unit = *units_[models::CausalLM::kEmbedUnit];
  auto& final_unit = *units_[model_->final_unit()];

  embed_unit.finish_gather();
  if (options_.prefetch)
    units_[L > 0 ? model_->layer_unit(0) : model_->final_unit()]->start_gather();
  auto embed_params = embed_unit.full_params();
  auto x_PD = model_->embed(embed_params, batch.tokens_P);
  // The embedding's backward needs only the token ids, so untied weights can go right away.
  if (!tied) embed_unit.release();
  auto ctx = model_->make_context(batch, x_PD.scalar_type(), options);

  for (int64_t l = 0; l < L; ++l) {
    auto& unit = *units_[model_->layer_unit(l)];
    unit.finish_gather();
    if (options_.prefetch) {
      units_[l + 1 < L ? model_->layer_unit(l + 1) : model_->final_unit()]->start_gather();
    }
    x_PD = model_->run_block(l, unit.full_params(), x_PD, ctx, options.activation_checkpointing);
    if (!grad) {
      unit.release();
    } else if (options_.reshard_after_forward) {
      unit.release();
      hook_block_output(x_PD, l);
    }
  }
  final_unit.finish_gather();
  auto final_params = final_unit.full_params();
  Output out;
  out.hidden_PD = model_->final_norm(final_params, x_PD, ctx);
  out.head_VD = model_->head_weight(embed_params, final_params);
  // Backward starts with the last block: have it on its way.
  if (grad && options_.reshard_after_forward && options_.prefetch && L > 0) {
    units_[model_->layer_unit(L - 1)]->start_gather();
  }
  return out;
}

void FsdpModel::end_step() {
  for (auto& unit : units_) unit->release();
}

std::vector<at::Tensor> FsdpModel::parameters() {
  std::vector<at::Tensor> params;
  for (auto& unit : units_) {
    for (auto& s : unit->shards()) params.push_back(s);
  }
  return params;
}

void FsdpModel::for_each_full_parameter(
    c10::ScalarType dtype, const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  for (auto& unit : units_) {
    auto full = unit->gather_full(dtype);
    for (size_t i = 0; i < full.size(); ++i) fn(unit->layouts()[i].name, full[i]);
  }
}

void FsdpModel::for_each_full_gradient(
    c10::ScalarType dtype, const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  for (auto& unit : units_) {
    std::vector<at::Tensor> grads;
    for (auto& s : unit->shards()) grads.push_back(s.grad());
    auto full = unit->gather_full(grads, dtype);
    for (size_t i = 0; i < full.size(); ++i) fn(unit->layouts()[i].name, full[i]);
  }
}

void FsdpModel::to(c10::Device device) {
  end_step();
  for (auto& unit : units_) unit->to(device);
  device_ = device;
}

}  // namespace furlong::fsdp
