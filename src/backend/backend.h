// The contract between the RL loop and a training backend (the seeds' names): init, train,
// update_weights, save_model, sleep, wake_up. `--train-backend` selects the implementation;
// everything above this interface (rollout, rewards, algorithms, layout) is backend-agnostic.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/options.h"
#include "core/json_util.h"
#include "core/weight_stream.h"
#include "rl/sample.h"

namespace furlong::dist {
class ProcessGroups;
}

namespace furlong::backend {

// Metrics of one optimizer step (already averaged over ranks).
struct StepMetrics {
  int64_t step = 0;                      // global optimizer step
  std::map<std::string, double> values;  // "loss", "grad_norm", "lr-pg_0", ...
};

// WeightSink (core/weight_stream.h) receives full weights in the checkpoint's dtype, in model
// order, in buckets of about --update-weight-buffer-size bytes (a bucket closes at that size).

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;
  // Builds the model and optimizer and loads weights (a checkpoint from --load if one exists,
  // else --hf-checkpoint). Returns the rollout id to start from.
  virtual int64_t init() = 0;
  // Trains on one rollout's samples (the same list on every rank; each takes its share).
  virtual std::vector<StepMetrics> train(int64_t rollout_id,
                                         const std::vector<rl::Sample>& samples) = 0;
  // Streams the current weights to `sink` (collective; only rank 0's sink is called, or every
  // rank's with --colocate, where each rank may host an engine).
  virtual void update_weights(const WeightSink& sink) = 0;
  // Saves a checkpoint after `rollout_id`; `driver_state` (the loop's data position, ...) is
  // stored with it and handed back by loaded_driver_state() after init() resumes from it.
  virtual void save_model(int64_t rollout_id, const Json& driver_state) = 0;
  virtual Json loaded_driver_state() const = 0;
  virtual void sleep() = 0;
  virtual void wake_up() = 0;
};

std::unique_ptr<TrainBackend> make_backend(const BackendOptions& options,
                                           dist::ProcessGroups& groups);

}  // namespace furlong::backend
