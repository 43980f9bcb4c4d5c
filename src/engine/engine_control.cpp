// Engine control operations: weight updates (in process and over a process group), the weights
// digest, and memory release/resume. Each runs with the scheduler held between steps, so no
// model work overlaps it; queued and running requests stay where they are and continue with the
// new weights (their cached K/V were computed with the old ones, as in SGLang's in-place update;
// callers that need a clean cut abort or drain first).
#include <ATen/ATen.h>

#include "core/digest.h"
#include "core/error.h"
#include "core/host_block_cache.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "engine/weight_sync.h"

namespace furlong::engine {

void Engine::Impl::copy_weights(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  auto& weights = model->weights();
  const auto& units = model->units();
  auto options = at::TensorOptions().dtype(dtype).device(device);
  // Check every tensor before touching any, so a bad update changes nothing.
  for (const auto& [name, t] : named) {
    auto [u, i] = model->locate(name);
    const auto& spec = units[u].params[i];
    FURLONG_CHECK(t.defined() && t.sizes().vec() == spec.shape, "weight update: '", name,
                  "' has shape ", t.defined() ? t.sizes() : at::IntArrayRef{},
                  " but the model expects ", at::IntArrayRef(spec.shape));
  }
  for (const auto& [name, t] : named) {
    auto [u, i] = model->locate(name);
    auto& w = weights[u][i];
    if (!w.defined()) w = at::empty(units[u].params[i].shape, options);
    w.copy_(t);
  }
  if (weights_released) {
    bool all = true;
    for (const auto& unit : weights) {
      for (const auto& w : unit) all = all && w.defined();
    }
    weights_released = !all;
  }
}

void Engine::update_weights_from_tensors(
    const std::vector<std::pair<std::string, at::Tensor>>& named, int64_t version) {
  impl_->with_scheduler_held([&] {
    impl_->copy_weights(named);
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (version >= 0) impl_->weight_version = version;
  });
  LOG_DEBUG("engine: updated ", named.size(), " tensors in process (weight version ",
            weight_version(), ")");
}

void Engine::init_weights_update_group(const WeightGroupSpec& spec) {
  FURLONG_CHECK(!impl_->weight_group,
                "init_weights_update_group: this engine already joined a "
                "weight update group; destroy it first");
  FURLONG_CHECK(spec.rank_offset >= 1,
                "init_weights_update_group: rank_offset must be >= 1 "
                "(rank 0 is the trainer), got ",
                spec.rank_offset);
  impl_->weight_group = join_weight_group(spec, spec.rank_offset);
  LOG_INFO("engine: joined weight update group '", spec.group_name, "' as rank ", spec.rank_offset,
           " of ", spec.world_size);
}

void Engine::update_weights_from_distributed(const std::vector<WeightMeta>& metas,
                                             int64_t version) {
  FURLONG_CHECK(impl_->weight_group,
                "update_weights_from_distributed: no weight update group; "
                "call init_weights_update_group first");
  // Validate names and shapes before receiving anything: a mismatch found halfway would leave
  // the broadcast sequence out of step with the sender.
  const auto& units = impl_->model->units();
  for (const auto& m : metas) {
    auto [u, i] = impl_->model->locate(m.name);
    FURLONG_CHECK(m.shape == units[u].params[i].shape, "update_weights_from_distributed: '", m.name,
                  "' has shape ", at::IntArrayRef(m.shape), " but the model expects ",
                  at::IntArrayRef(units[u].params[i].shape));
  }
  impl_->with_scheduler_held([&] {
    auto received =
        receive_weights(impl_->weight_group->world(), metas, impl_->weight_group->device());
    impl_->copy_weights(received);
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (version >= 0) impl_->weight_version = version;
  });
}

void Engine::destroy_weights_update_group() {
  impl_->weight_group.reset();
}

int64_t Engine::weight_version() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->weight_version;
}

std::string Engine::weights_digest() const {
  return impl_->with_scheduler_held([&] {
    impl_->check_weights_present();
    return tensors_digest(impl_->model->named_weights());
  });
}

void Engine::release_memory(bool include_weights) {
  impl_->with_scheduler_held([&] {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      FURLONG_CHECK(impl_->live.empty(), "release_memory: ", impl_->live.size(),
                    " requests are queued or running; abort them or wait for them first");
      impl_->memory_released = true;
    }
    if (!impl_->cache->released()) impl_->cache->release();
    if (include_weights) {
      for (auto& unit : impl_->model->weights()) {
        for (auto& w : unit) w = at::Tensor();
      }
      impl_->weights_released = true;
    }
    HostBlockCache::instance().trim();  // the freed host blocks go back to the system
  });
}

void Engine::resume_memory() {
  impl_->with_scheduler_held([&] {
    if (impl_->cache->released()) impl_->cache->rebuild();
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->memory_released = false;
  });
}

bool Engine::memory_released() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->memory_released;
}

}  // namespace furlong::engine
