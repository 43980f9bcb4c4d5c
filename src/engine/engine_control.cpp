// Engine control operations: weight updates (in process and over a process group), the weights
// digest, and memory release/resume. Each runs with the scheduler held between steps, so no
// model work overlaps it; queued and running requests stay where they are and continue with the
// new weights (their cached K/V were computed with the old ones, as in SGLang's in-place update;
// callers that need a clean cut abort or drain first).
#include <ATen/ATen.h>

#include <filesystem>

#include "core/device_memory.h"
#include "core/digest.h"
#include "core/error.h"
#include "core/host_block_cache.h"
#include "core/log.h"
#include "core/tensor_checks.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "engine/paged_forward.h"
#include "engine/sampler.h"
#include "engine/weight_sync.h"
#include "models/hf_model.h"
#include "models/logprobs.h"
#include "models/packed_batch.h"

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
  // A packed copy of a written weight would be stale: pack the written ones again (only those
  // pack_all_weights packs: an untied embedding is not).
  if (pack_weights) {
    const auto& head =
        model->head_weight(weights[models::CausalLM::kEmbedUnit], weights[model->final_unit()]);
    for (const auto& [name, t] : named) {
      auto [u, i] = model->locate(name);
      const auto& w = weights[u][i];
      if (u != models::CausalLM::kEmbedUnit || w.is_same(head)) packed_weights.pack(w);
    }
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

void Engine::update_weights_from_disk(const std::string& hf_dir, int64_t version) {
  const std::string where = "update_weights_from_disk '" + hf_dir + "'";
  FURLONG_CHECK(std::filesystem::is_directory(hf_dir), where, ": not a directory");
  // Read and check everything on the CPU first; the served weights change only at the copy.
  models::LoadOptions load;
  load.dtype = impl_->dtype;
  std::unique_ptr<models::CausalLM> fresh = run_on_fresh_thread([&] {
    c10::InferenceMode guard;
    return models::load_hf_model(hf_dir, load);
  });
  const auto& served = impl_->model->config();
  FURLONG_CHECK(fresh->config().architecture == served.architecture, where, ": architecture ",
                fresh->config().architecture, " differs from the served ", served.architecture);
  auto named = fresh->named_weights();
  FURLONG_CHECK(static_cast<int64_t>(named.size()) == static_cast<int64_t>([&] {
                  size_t n = 0;
                  for (const auto& unit : impl_->model->units()) n += unit.params.size();
                  return n;
                }()),
                where, ": holds ", named.size(),
                " tensors, which is not the served model's parameter count");
  // The trainer's weight sync refuses non-finite weights; a checkpoint on disk gets the same.
  for (const auto& [name, t] : named) {
    FURLONG_CHECK(all_finite(t), where, ": tensor '", name,
                  "' holds NaN or inf values; the served weights are unchanged");
  }
  impl_->with_scheduler_held([&] {
    impl_->copy_weights(named);
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (version >= 0) impl_->weight_version = version;
  });
  LOG_INFO("engine: loaded weights from ", hf_dir, " (weight version ", weight_version(), ")");
}

void Engine::refill_released_weights(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  impl_->with_scheduler_held([&] {
    std::vector<std::pair<std::string, at::Tensor>> missing;
    const auto& weights = impl_->model->weights();
    for (const auto& [name, t] : named) {
      auto [u, i] = impl_->model->locate(name);
      if (!weights[u][i].defined()) missing.emplace_back(name, t);
    }
    if (!missing.empty()) impl_->copy_weights(missing);
  });
}

Engine::PromptLogprobs Engine::prompt_logprobs(const std::vector<int64_t>& input_ids,
                                               double temperature, int64_t start,
                                               int64_t top_n) const {
  const auto size = static_cast<int64_t>(input_ids.size());
  FURLONG_CHECK(start >= 1 && start <= size, "prompt_logprobs: start ", start, " is outside [1, ",
                size, "]");
  const int64_t vocab = impl_->model->config().vocab_size;
  for (auto id : input_ids) {
    FURLONG_CHECK(id >= 0 && id < vocab, "prompt_logprobs: token ", id,
                  " is outside the vocabulary");
  }
  const double t = temperature == 0.0 ? 1.0 : temperature;
  return impl_->with_scheduler_held([&] {
    impl_->check_weights_present();
    PromptLogprobs out;
    if (start == size) return out;
    auto& impl = *impl_;
    auto batch = models::PackedBatch::from_documents({input_ids}).to(impl.device);
    auto hidden_PD = impl.model->forward_hidden(batch, impl.forward);
    // Row p - 1 predicts token p; the head runs on bounded chunks (a [P, V] block can be large).
    constexpr int64_t kChunk = 256;
    for (int64_t from = start; from < size; from += kChunk) {
      const int64_t n = std::min(kChunk, size - from);
      auto logits_RV = lm_head_logits(*impl.model, hidden_PD.narrow(0, from - 1, n));
      std::vector<int64_t> targets(input_ids.begin() + from, input_ids.begin() + from + n);
      auto lp =
          models::logprobs_from_logits(logits_RV, at::tensor(targets, at::kLong).to(impl.device), t)
              .to(at::kCPU)
              .contiguous();
      out.logprobs.insert(out.logprobs.end(), lp.data_ptr<float>(), lp.data_ptr<float>() + n);
      for (int64_t r = 0; top_n > 0 && r < n; ++r)
        out.top.push_back(top_logprobs(logits_RV[r], t, top_n));
    }
    return out;
  });
}

int64_t Engine::weight_version() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->weight_version;
}

std::string Engine::weights_digest() const {
  return impl_->with_scheduler_held([&] {
    impl_->check_weights_present();
    // In the dtype the trainer sends (the checkpoint's): an engine that widened bf16 weights to
    // fp32 (--dtype auto) holds values exact in bf16, so narrowing them back is exact.
    const auto wire = impl_->model->config().dtype;
    auto named = impl_->model->named_weights();
    if (c10::elementSize(wire) < c10::elementSize(impl_->dtype)) {
      for (auto& [name, t] : named) t = t.to(wire);
    }
    return tensors_digest(named);
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
      impl_->packed_weights.clear();
      for (auto& unit : impl_->model->weights()) {
        for (auto& w : unit) w = at::Tensor();
      }
      impl_->weights_released = true;
    }
    HostBlockCache::instance().trim();   // the freed host blocks go back to the system
    return_freed_memory(impl_->device);  // CUDA: the allocator's freed blocks go to the device
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
