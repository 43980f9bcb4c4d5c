// Fully sharded data parallelism (FSDP2 semantics) applied from outside to a single-device
// CausalLM: one FsdpUnit per model unit (embedding, each block, final norm + head), parameters
// sharded on dim 0 over the mesh's shard group and replicated over its replicate group.
//
// forward() gathers each unit just before it computes (the next unit's gather is issued first,
// so communication overlaps compute where the backend allows), frees blocks after their forward
// (reshard_after_forward), and hooks each block's output so backward re-gathers the block (and
// prefetches the one before) right before its gradients are computed. Gradients are reduced in
// reduce_dtype (fp32): reduce-scatter SUM over the shard group, all-reduce SUM over the
// replicate group, divided by the data-parallel world size; they accumulate in the shards'
// .grad across micro-batches. With tied embeddings the embedding unit stays gathered for the
// whole step (the head needs it at the end of forward and the start of backward).
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/mesh.h"
#include "fsdp/fsdp_unit.h"
#include "io/safetensors.h"
#include "models/causal_lm.h"

namespace furlong::fsdp {

struct FsdpOptions {
  c10::ScalarType param_dtype = c10::kBFloat16;  // compute dtype (bf16, or fp16 with --fp16)
  c10::ScalarType reduce_dtype = c10::kFloat;
  // Shards (and optimizer state) in fp32 when true; otherwise in the checkpoint's dtype.
  bool keep_fp32_master = true;
  bool reshard_after_forward = true;
  bool prefetch = true;
  // Shards, gradients and optimizer state in host memory; gathered parameters and collectives
  // on the compute device (meaningful with a GPU; on a CPU run everything is host memory).
  bool cpu_offload = false;
};

class FsdpModel {
 public:
  // `model` is unmaterialized (nothing allocated); only this rank's shards are. `device` is the
  // compute device.
  FsdpModel(std::unique_ptr<models::CausalLM> model, dist::Mesh& mesh, const FsdpOptions& options,
            c10::Device device);
  ~FsdpModel();

  const models::CausalLM& model() const { return *model_; }
  const FsdpOptions& options() const { return options_; }
  dist::Mesh& mesh() { return *mesh_; }
  // The dtype shards are stored in.
  c10::ScalarType storage_dtype() const { return storage_dtype_; }

  // Fills this rank's rows of every parameter from a HF checkpoint (each rank reads only its
  // rows, through the mmap), cast to the storage dtype.
  void load_hf(const io::HfWeights& weights);
  // Fills the shards from full tensors given by name (e.g. the same seeded init on every rank).
  void load_full(const std::function<at::Tensor(const std::string& name)>& full_tensor);

  struct Output {
    at::Tensor hidden_PD;  // final hidden states (after the final norm), param dtype
    at::Tensor head_VD;    // lm_head weight (the embedding when tied), param dtype
  };
  // The packed forward. Under grad mode the returned tensors carry the autograd graph whose
  // backward reduces gradients into the shards. Call end_step() after backward (or after using
  // the outputs of a no-grad forward).
  Output forward(const models::PackedBatch& batch, const models::ForwardOptions& options);
  // Releases every gathered unit.
  void end_step();

  // Every shard leaf (the optimizer's parameters), unit by unit.
  std::vector<at::Tensor> parameters();
  std::vector<std::unique_ptr<FsdpUnit>>& units() { return units_; }
  // Gathers full parameters unit by unit in `dtype` (from the stored precision) and calls
  // fn(hf_name, tensor) for each, in model order. Collective over the shard group.
  void for_each_full_parameter(
      c10::ScalarType dtype, const std::function<void(const std::string&, const at::Tensor&)>& fn);
  // The same for the accumulated gradients of the shards (zeros where a shard has none).
  void for_each_full_gradient(c10::ScalarType dtype,
                              const std::function<void(const std::string&, const at::Tensor&)>& fn);
  // Moves shards and gradients to `device` (sleep / wake_up), bit-identically.
  void to(c10::Device device);
  c10::Device device() const { return device_; }

 private:
  void hook_block_output(at::Tensor& x, int64_t layer);

  std::unique_ptr<models::CausalLM> model_;
  dist::Mesh* mesh_;
  FsdpOptions options_;
  c10::Device device_;
  c10::ScalarType storage_dtype_;
  std::vector<std::unique_ptr<FsdpUnit>> units_;  // aligned with model units
};

}  // namespace furlong::fsdp
