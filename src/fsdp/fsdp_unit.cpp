#include "fsdp/fsdp_unit.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include "core/error.h"

namespace furlong::fsdp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

// A tensor over `base`'s storage that autograd does not treat as a view of `base`.
at::Tensor alias(const at::Tensor& base, int64_t offset, const std::vector<int64_t>& shape) {
  auto t = at::empty({0}, base.options());
  t.set_(base.storage(), base.storage_offset() + offset, shape, contiguous_strides(shape));
  return t;
}

// Frees / re-allocates a tensor's storage in place, so tensors aliasing it stay valid objects.
void free_storage(const at::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
}

void allocate_storage(const at::Tensor& t, size_t nbytes) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == nbytes) return;
  impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

struct UnitHolder : torch::CustomClassHolder {
  FsdpUnit* unit;
  explicit UnitHolder(FsdpUnit* u) : unit(u) {}
};

// Identity on the data (the gather happened outside autograd); its backward reduce-scatters the
// full-parameter gradients into gradients of the local shards.
struct GatheredParams : torch::autograd::Function<GatheredParams> {
  static variable_list forward(AutogradContext* ctx, at::TensorList shards,
                               c10::intrusive_ptr<UnitHolder> holder,
                               std::vector<at::Tensor> full) {
    ctx->saved_data["unit"] = c10::IValue::make_capsule(holder);
    return full;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto holder = ctx->saved_data["unit"].toCapsule();
    auto* unit = static_cast<UnitHolder*>(holder.get())->unit;
    variable_list out = unit->reduce_gradients(grads);
    out.push_back(at::Tensor());  // holder
    out.push_back(at::Tensor());  // the full tensors (not differentiable inputs)
    return out;
  }
};

}  // namespace

FsdpUnit::FsdpUnit(std::string name, std::vector<ShardLayout> layouts, const UnitConfig& config,
                   dist::Mesh& mesh, c10::Device device)
    : name_(std::move(name)),
      layouts_(std::move(layouts)),
      config_(config),
      mesh_(&mesh),
      device_(device) {
  flat_numel_ = assign_flat_offsets(layouts_);
  flat_shard_ =
      at::zeros({flat_numel_}, at::TensorOptions().dtype(config_.storage_dtype).device(device_));
  for (const auto& l : layouts_) {
    FURLONG_ASSERT(!l.shape.empty(), "FSDP does not shard 0-d parameter ", l.name);
    shards_.push_back(alias(flat_shard_, l.flat_offset, l.local_shape()).set_requires_grad(true));
  }
  const int64_t S = mesh_->shard_size();
  int64_t offset = 0;
  for (const auto& l : layouts_) {
    unsharded_offsets_.push_back(offset);
    offset += S * l.padded_shard_numel();
  }
  unsharded_ =
      at::empty({S * flat_numel_}, at::TensorOptions().dtype(config_.param_dtype).device(device_));
  free_storage(unsharded_);
}

FsdpUnit::~FsdpUnit() {
  if (in_flight_) {
    try {
      pending_.wait();
    } catch (...) {
    }
  }
}

void FsdpUnit::allocate_unsharded() {
  allocate_storage(unsharded_, static_cast<size_t>(unsharded_.numel()) * unsharded_.element_size());
}

void FsdpUnit::start_gather() {
  if (gathered_ || in_flight_) return;
  c10::NoGradGuard no_grad;
  // Copy-in: cast (and, with CPU offload, upload) the whole flat shard at once.
  send_ = flat_shard_.to(compute_device(), config_.param_dtype);
  recv_ = at::empty({mesh_->shard_size() * flat_numel_}, send_.options());
  pending_ = mesh_->dp_shard().all_gather_async(recv_, send_);
  in_flight_ = true;
}

void FsdpUnit::finish_gather() {
  if (gathered_) return;
  if (!in_flight_) start_gather();
  pending_.wait();
  in_flight_ = false;
  copy_out_gathered();
  send_ = at::Tensor();
  recv_ = at::Tensor();
  gathered_ = true;
}

// recv is rank-major ([S, flat]: every rank's padded shards of all parameters); the unsharded
// buffer is parameter-major ([S * R rows] per parameter), so each parameter is contiguous.
void FsdpUnit::copy_out_gathered() {
  c10::NoGradGuard no_grad;
  allocate_unsharded();
  const int64_t S = mesh_->shard_size();
  auto by_rank = recv_.view({S, flat_numel_});
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const auto& l = layouts_[i];
    auto dst = unsharded_.narrow(0, unsharded_offsets_[i], S * l.padded_shard_numel())
                   .view({S, l.padded_shard_numel()});
    dst.copy_(by_rank.narrow(1, l.flat_offset, l.padded_shard_numel()));
  }
}

std::vector<at::Tensor> FsdpUnit::full_params() {
  FURLONG_ASSERT(gathered_, "unit ", name_, " used before it was gathered");
  std::vector<at::Tensor> full;
  for (size_t i = 0; i < layouts_.size(); ++i) {
    full.push_back(alias(unsharded_, unsharded_offsets_[i], layouts_[i].shape));
  }
  bool needs_grad = c10::GradMode::is_enabled();
  if (!needs_grad) return full;
  return GatheredParams::apply(at::TensorList(shards_), c10::make_intrusive<UnitHolder>(this),
                               full);
}

void FsdpUnit::release() {
  if (in_flight_) {
    pending_.wait();
    in_flight_ = false;
    send_ = at::Tensor();
    recv_ = at::Tensor();
  }
  if (!gathered_) return;
  free_storage(unsharded_);
  gathered_ = false;
}

std::vector<at::Tensor> FsdpUnit::gather_full(c10::ScalarType dtype) {
  return gather_full(shards_, dtype);
}

std::vector<at::Tensor> FsdpUnit::gather_full(const std::vector<at::Tensor>& local,
                                              c10::ScalarType dtype) {
  c10::NoGradGuard no_grad;
  const int64_t S = mesh_->shard_size();
  if (S == 1) {
    // A single shard is the whole parameter: no gather, and no copy when the dtype matches
    // (callers copy out of what they are given; weight sync then costs one pass over memory).
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < layouts_.size(); ++i) {
      out.push_back(local[i].defined()
                        ? local[i].detach().reshape(layouts_[i].shape).to(dtype)
                        : at::zeros(layouts_[i].shape, at::TensorOptions().dtype(dtype)));
    }
    return out;
  }
  auto send = at::zeros({flat_numel_}, at::TensorOptions().dtype(dtype).device(compute_device()));
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const auto& l = layouts_[i];
    if (local[i].defined() && l.local_numel() > 0) {
      send.narrow(0, l.flat_offset, l.local_numel()).copy_(local[i].reshape({-1}));
    }
  }
  auto recv = at::empty({S * flat_numel_}, send.options());
  mesh_->dp_shard().all_gather(recv, send);
  auto by_rank = recv.view({S, flat_numel_});
  std::vector<at::Tensor> out;
  for (const auto& l : layouts_) {
    auto padded = by_rank.narrow(1, l.flat_offset, l.padded_shard_numel())
                      .contiguous()
                      .view({S * l.rows_per_rank, l.row_numel});
    out.push_back(padded.narrow(0, 0, l.rows()).reshape(l.shape));
  }
  return out;
}

std::vector<at::Tensor> FsdpUnit::reduce_gradients(const std::vector<at::Tensor>& full_grads) {
  c10::NoGradGuard no_grad;
  const int64_t S = mesh_->shard_size();
  auto opts = at::TensorOptions().dtype(config_.reduce_dtype).device(compute_device());
  // Rank-major send buffer: chunk s holds, for every parameter, rows [s R, (s + 1) R).
  auto send = at::zeros({S, flat_numel_}, opts);
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const auto& l = layouts_[i];
    if (!full_grads[i].defined()) continue;
    // copy_ below casts to the reduce dtype on the way (no full-size converted temporary).
    auto rows = full_grads[i].reshape({l.rows(), l.row_numel});
    auto dst = send.narrow(1, l.flat_offset, l.padded_shard_numel())
                   .view({S, l.rows_per_rank, l.row_numel});
    int64_t full_chunks = l.rows() / l.rows_per_rank, tail = l.rows() % l.rows_per_rank;
    if (full_chunks > 0) {
      dst.narrow(0, 0, full_chunks)
          .copy_(rows.narrow(0, 0, full_chunks * l.rows_per_rank)
                     .view({full_chunks, l.rows_per_rank, l.row_numel}));
    }
    if (tail > 0) {
      dst.select(0, full_chunks)
          .narrow(0, 0, tail)
          .copy_(rows.narrow(0, full_chunks * l.rows_per_rank, tail));
    }
  }
  auto reduced = at::empty({flat_numel_}, opts);
  auto send_flat = send.view({S * flat_numel_});
  // `send` is this call's own buffer: Gloo's emulation may all-reduce it in place.
  mesh_->dp_shard().reduce_scatter_sum_overwriting_input(reduced, send_flat);
  if (mesh_->replicate_size() > 1) mesh_->dp_replicate().all_reduce_sum(reduced);
  if (config_.grad_divide_factor != 1.0) reduced.div_(config_.grad_divide_factor);
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const auto& l = layouts_[i];
    grads.push_back(full_grads[i].defined() ? reduced.narrow(0, l.flat_offset, l.local_numel())
                                                  .view(l.local_shape())
                                                  .to(config_.storage_dtype)
                                            : at::Tensor());
  }
  return grads;
}

void FsdpUnit::to(c10::Device device) {
  if (device == device_) return;
  FURLONG_ASSERT(!gathered_ && !in_flight_, "unit ", name_, " moved while gathered");
  c10::NoGradGuard no_grad;
  auto moved = flat_shard_.to(device);
  std::vector<at::Tensor> grads;
  for (auto& s : shards_) grads.push_back(s.grad().defined() ? s.grad().to(device) : at::Tensor());
  flat_shard_ = moved;
  for (size_t i = 0; i < layouts_.size(); ++i) {
    // Keep the same leaf objects (the optimizer holds them): repoint their storage.
    shards_[i].set_data(alias(flat_shard_, layouts_[i].flat_offset, layouts_[i].local_shape()));
    if (grads[i].defined()) shards_[i].mutable_grad() = grads[i];
  }
  device_ = device;
  unsharded_ = at::empty({mesh_->shard_size() * flat_numel_},
                         at::TensorOptions().dtype(config_.param_dtype).device(compute_device()));
  free_storage(unsharded_);
}

}  // namespace furlong::fsdp
