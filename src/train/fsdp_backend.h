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
#include "train/batching.h"
#include "train/loss.h"
#include "train/micro_batch.h"

namespace furlong {
class ProgressBar;
}

namespace furlong::train {

class FsdpBackend : public TrainBackend {
 public:
  FsdpBackend(const TrainOptions& options, dist::ProcessGroups& groups);
  ~FsdpBackend() override;

  int64_t init() override;
  std::vector<StepMetrics> train(int64_t rollout_id,
                                 const std::vector<rl::Sample>& samples) override;
  void update_weights(const WeightSink& sink) override;
  void save_model(int64_t rollout_id, const Json& driver_state) override;
  Json loaded_driver_state() const override { return loaded_driver_state_; }
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
  // Per local sample of the current rollout, fp32 [response_length] CPU tensors (RL only).
  struct PolicyData {
    std::vector<at::Tensor> old_log_probs, ref_log_probs, rollout_log_probs, advantages;
  };

  StepMetrics train_step(const std::vector<const rl::Sample*>& local,
                         const std::vector<std::vector<size_t>>& micro_batches);
  // Forward + loss + backward of one micro-batch (`items`: its local sample indices); adds
  // metric sums to `sums`. `step_tokens`: the step's masked tokens over all ranks.
  void train_micro_batch(const MicroBatch& mb, const std::vector<size_t>& items, double step_tokens,
                         std::map<std::string, double>& sums);
  models::ForwardOptions forward_options() const;
  bool policy_loss_mode() const { return options_.batch.loss_type == "policy_loss"; }

  // ---- RL (fsdp_backend_rl.cpp) ----
  void load_reference_model();
  // Forward-only log-probs of every local sample's response (at the rollout temperature),
  // micro-batched as `plan` (so the values are bit-identical to the first training forward).
  std::vector<at::Tensor> score_samples(fsdp::FsdpModel& model,
                                        const std::vector<const rl::Sample*>& local,
                                        const BatchPlan& plan);
  // Old-policy and reference log-probs and advantages of this rollout; returns the train-side
  // rollout/* metrics (means over all ranks).
  std::map<std::string, double> prepare_policy_data(const std::vector<const rl::Sample*>& local,
                                                    const BatchPlan& plan);
  LossOutput policy_loss(const MicroBatch& mb, const std::vector<size_t>& items,
                         const models::TokenLogProbs& lp) const;

  TrainOptions options_;
  dist::ProcessGroups* groups_;
  std::unique_ptr<dist::Mesh> mesh_;
  std::unique_ptr<fsdp::FsdpModel> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::LrScheduler> scheduler_;
  std::unique_ptr<fsdp::FsdpModel> ref_model_;  // frozen initial weights (KL), RL only
  PolicyData policy_;
  Json loaded_driver_state_ = Json::object();
  ProgressBar* progress_ = nullptr;  // rank 0's bar over the micro-batches of train()
  int64_t global_step_ = 0;
  bool asleep_ = false;
};

}  // namespace furlong::train
