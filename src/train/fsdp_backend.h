// The FSDP training backend (`--train-backend fsdp`): a HF model sharded over the mesh
// (fsdp::FsdpModel), AdamW on the shards, the LR schedule, micro-batching and losses, and the
// resharding checkpoints. One instance per rank; every public method is collective.
#pragma once

#include <memory>
#include <vector>

#include "dist/mesh.h"
#include "fsdp/fsdp_model.h"
#include "optim/adamw.h"
#include "optim/lr_scheduler.h"
#include "train/backend.h"
#include "train/micro_batch.h"

namespace furlong::train {

class FsdpBackend : public TrainBackend {
 public:
  FsdpBackend(const TrainOptions& options, dist::ProcessGroups& groups);
  ~FsdpBackend() override;

  int64_t init() override;
  std::vector<StepMetrics> train(int64_t rollout_id,
                                 const std::vector<rl::Sample>& samples) override;
  void update_weights(const WeightSink& sink) override;
  void save_model(int64_t rollout_id) override;
  void sleep() override;
  void wake_up() override;

  const TrainOptions& options() const { return options_; }
  dist::ProcessGroups& groups() { return *groups_; }
  void set_global_step(int64_t step) { global_step_ = step; }
  fsdp::FsdpModel& model() { return *model_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  optim::LrScheduler& scheduler() { return *scheduler_; }
  dist::Mesh& mesh() { return *mesh_; }
  int64_t global_step() const { return global_step_; }
  bool asleep() const { return asleep_; }

 private:
  StepMetrics train_step(const std::vector<const rl::Sample*>& local,
                         const std::vector<std::vector<size_t>>& micro_batches);
  // Forward + loss + backward of one micro-batch; adds metric sums to `sums`.
  void train_micro_batch(const MicroBatch& mb, std::map<std::string, double>& sums);
  models::ForwardOptions forward_options() const;

  TrainOptions options_;
  dist::ProcessGroups* groups_;
  std::unique_ptr<dist::Mesh> mesh_;
  std::unique_ptr<fsdp::FsdpModel> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::LrScheduler> scheduler_;
  int64_t global_step_ = 0;
  bool asleep_ = false;
};

}  // namespace furlong::train
