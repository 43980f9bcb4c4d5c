// --colocate: the engine lives in training rank 0's process and receives the weights as
// tensors (no copy through a process group); its KV cache and weights are released while the
// trainer trains and rebuilt before the next weight sync.
#include <ATen/ATen.h>

#include "core/digest.h"
#include "core/error.h"
#include "core/log.h"
#include "models/causal_lm.h"
#include "train/rollout_engines.h"

namespace furlong::train {
namespace {

int64_t tensor_bytes(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  int64_t bytes = 0;
  for (const auto& [name, t] : named) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

class ColocatedEngines : public RolloutEngines {
 public:
  ColocatedEngines(const TrainOptions& options, int rank) {
    if (rank != 0) return;
    engine::EngineOptions eo;
    eo.attn_implementation = options.model.attn_implementation;
    eo.fused_kernels = options.model.fused_kernels;
    eo.max_total_tokens = options.rollout.engine_max_total_tokens;
    eo.mem_fraction_static = options.rollout.engine_mem_fraction_static;
    eo.exact_logprobs = options.rollout.engine_exact_logprobs;
    eo.num_threads = options.rollout.engine_num_threads;
    engine_ = engine::Engine::load(options.model.hf_checkpoint, eo);
  }

  void submit(engine::GenerateRequest request, Done done) override {
    FURLONG_CHECK(engine_, "generation is driven from rank 0");
    engine_->submit(std::move(request),
                    [done = std::move(done)](engine::RequestId, engine::GenerateOutput out) {
                      done(std::move(out));
                    });
  }

  void abort_all() override {
    if (engine_) engine_->abort_all();
  }

  void release_memory() override {
    if (!engine_) return;
    // On a GPU the engine gives back its weights too (miles' default offload level). On the
    // CPU trainer and engine share host memory, and refaulting a fresh copy of the weights at
    // every sync costs more than it frees: the engine keeps them and the sync overwrites them.
    const auto& w = engine_->model().weights();
    const bool on_gpu = !w.empty() && !w.front().empty() && w.front().front().is_cuda();
    engine_->release_memory(/*include_weights=*/on_gpu);
  }

  void resume_memory() override {
    if (engine_ && engine_->memory_released()) engine_->resume_memory();
  }

  int64_t sync_weights(TrainBackend& backend, int64_t version, bool check_equal) override {
    int64_t bytes = 0;
    std::vector<std::pair<std::string, uint64_t>> sent;  // per-tensor digests, all buckets
    backend.update_weights([&](const std::vector<std::pair<std::string, at::Tensor>>& bucket) {
      if (!engine_) return;
      engine_->update_weights_from_tensors(bucket, version);
      bytes += tensor_bytes(bucket);
      if (check_equal) {
        for (const auto& [name, t] : bucket) sent.emplace_back(name, tensor_digest(name, t));
      }
    });
    if (engine_ && check_equal) {
      const auto want = combine_tensor_digests(std::move(sent));
      const auto held = engine_->weights_digest();
      FURLONG_CHECK(want == held, "--check-weight-update-equal: the engine's weights (digest ",
                    held, ") differ from the trainer's (", want, ") after update ", version);
    }
    return bytes;
  }

  std::string describe() const override { return "colocated engine on rank 0"; }

 private:
  std::unique_ptr<engine::Engine> engine_;
};

}  // namespace

std::unique_ptr<RolloutEngines> make_colocated_engines(const TrainOptions& options, int rank) {
  return std::make_unique<ColocatedEngines>(options, rank);
}

}  // namespace furlong::train
