// One FSDP unit (the embedding, a transformer block, or the final norm + head): the local shards
// of its parameters (leaf tensors the optimizer updates), and the buffer their all-gathered full
// values live in while the unit computes.
//
// Life of a unit in a training step: start_gather() casts the local shards to the compute dtype
// and issues an asynchronous all-gather over the shard group; finish_gather() waits and copies the
// result into the unsharded buffer; full_params() hands the full tensors to the model (through
// an autograd node whose backward reduce-scatters their gradients); release() frees the
// unsharded buffer (the tensors stay valid objects whose storage is empty until the next gather).
//
// Invariant: full_params() tensors are only read while the unit is gathered.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/mesh.h"
#include "fsdp/shard_layout.h"

namespace furlong::fsdp {

struct UnitConfig {
  c10::ScalarType storage_dtype = c10::kFloat;   // shards (fp32 master, or checkpoint dtype)
  c10::ScalarType param_dtype = c10::kBFloat16;  // all-gathered / compute dtype
  c10::ScalarType reduce_dtype = c10::kFloat;    // gradient reduction dtype
  double grad_divide_factor = 1.0;               // gradients are divided by this (dp world size)
  // Where gathered parameters live and collectives run; unset = the shards' device. With CPU
  // offload the shards (and optimizer state) stay in host memory and this is the GPU.
  std::optional<c10::Device> compute_device;
};

class FsdpUnit {
 public:
  FsdpUnit(std::string name, std::vector<ShardLayout> layouts, const UnitConfig& config,
           dist::Mesh& mesh, c10::Device device);
  ~FsdpUnit();

  const std::string& name() const { return name_; }
  const std::vector<ShardLayout>& layouts() const { return layouts_; }
  // Leaf tensors of this rank's valid rows, one per parameter, requiring grad.
  std::vector<at::Tensor>& shards() { return shards_; }

  void start_gather();
  void finish_gather();
  void gather() {
    start_gather();
    finish_gather();
  }
  bool gathered() const { return gathered_; }
  // Full parameters for one forward: fresh tensors aliasing the unsharded buffer, produced by an
  // autograd node that reduce-scatters their gradients into the shards' .grad.
  std::vector<at::Tensor> full_params();
  void release();

  // Gathers the full value of every parameter in `dtype` from the shards (storage precision,
  // not the compute cast), without touching the unsharded buffer. Collective over the shard group.
  std::vector<at::Tensor> gather_full(c10::ScalarType dtype);
  // The same for any per-parameter local tensors shaped like the shards (gradients, optimizer
  // moments); undefined entries count as zeros.
  std::vector<at::Tensor> gather_full(const std::vector<at::Tensor>& local, c10::ScalarType dtype);

  // Reduces full-parameter gradients: reduce-scatter SUM over the shard group, all-reduce SUM
  // over the replicate group, divide; returns one gradient per shard (storage dtype).
  std::vector<at::Tensor> reduce_gradients(const std::vector<at::Tensor>& full_grads);

  // Moves shards, their grads and the buffers to `device` (sleep / wake_up), bit-identically.
  void to(c10::Device device);
  int64_t flat_shard_numel() const { return flat_numel_; }
  c10::Device compute_device() const { return config_.compute_device.value_or(device_); }

 private:
  void allocate_unsharded();
  void copy_out_gathered();

  std::string name_;
  std::vector<ShardLayout> layouts_;
  UnitConfig config_;
  dist::Mesh* mesh_;
  c10::Device device_;      // where the shards live
  int64_t flat_numel_ = 0;  // padded shard elements of the unit
  at::Tensor flat_shard_;   // [flat_numel_] storage dtype; shards_ alias it
  std::vector<at::Tensor> shards_;
  at::Tensor unsharded_;  // [S * flat_numel_] param dtype, per-parameter padded full rows
  std::vector<int64_t> unsharded_offsets_;
  at::Tensor send_;     // [flat_numel_] param dtype: the cast shards being gathered
  at::Tensor recv_;     // [S * flat_numel_] param dtype: the all-gather result
  dist::Work pending_;  // the in-flight all-gather (a completed no-op when none)
  bool in_flight_ = false;
  bool gathered_ = false;
};

}  // namespace furlong::fsdp
