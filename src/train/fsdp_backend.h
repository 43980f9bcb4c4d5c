// The FSDP training backend (`--train-backend fsdp`): a HF model sharded over the mesh
// (fsdp::FsdpModel), AdamW on the shards, the LR schedule, micro-batching and losses, and the
// resharding checkpoints. One instance per rank; every public method is collective.
#pragma once

#include <map>
#include <memory>
#include <string>
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
  // What the policy loss reads of this rollout, per local sample (fp32 [response_length] CPU
  // tensors): made once per rollout by prepare_policy_data, then passed to every step.
  struct PolicyData {
    std::vector<at::Tensor> old_log_probs, ref_log_probs, rollout_log_probs, advantages;
    std::map<std::string, double> metrics;  // train-side rollout/* metrics (all ranks' means)
  };

  // One optimizer step over `micro_batches` (local sample indices); `policy` is null for SFT.
  StepMetrics train_step(const std::vector<const rl::Sample*>& local,
                         const std::vector<std::vector<size_t>>& micro_batches,
                         const PolicyData* policy);
  // Forward + loss + backward of one micro-batch (`items`: its local sample indices); adds
  // metric sums to `sums`.
  void train_micro_batch(const MicroBatch& mb, const std::vector<size_t>& items,
                         const PolicyData* policy, std::map<std::string, double>& sums);
  models::ForwardOptions forward_options() const;
  // Collective: fails, naming `what` and the first parameter found, if any rank's weight
  // shards hold NaN or inf (nothing non-finite is saved or sent to an engine).
  void check_weights_finite(const std::string& what);
  // A non-finite gradient norm before the update: stops the run naming the step, or with
  // --skip-nonfinite-steps drops the update (returns true). Warns once about a non-finite loss.
  bool skip_nonfinite_step(double grad_norm, double loss);
  bool policy_loss_mode() const { return options_.batch.loss_type == LossType::kPolicyLoss; }

  // ---- RL (fsdp_backend_rl.cpp) ----
  void load_reference_model();
  // Forward-only log-probs of every local sample's response (at the rollout temperature),
  // micro-batched as `plan` (so the values are bit-identical to the first training forward).
  std::vector<at::Tensor> score_samples(fsdp::FsdpModel& model,
                                        const std::vector<const rl::Sample*>& local,
                                        const BatchPlan& plan);
  // Old-policy and reference log-probs of this rank's samples, then the advantage stage
  // (rl::compute_rollout_advantages) over the whole rollout.
  PolicyData prepare_policy_data(const std::vector<rl::Sample>& rollout,
                                 const std::vector<size_t>& local_indices,
                                 const std::vector<const rl::Sample*>& local,
                                 const BatchPlan& plan);
  LossOutput policy_loss(const MicroBatch& mb, const std::vector<size_t>& items,
                         const models::TokenLogProbs& lp, const PolicyData& policy) const;

  TrainOptions options_;
  dist::ProcessGroups* groups_;
  std::unique_ptr<dist::Mesh> mesh_;
  std::unique_ptr<fsdp::FsdpModel> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::LrScheduler> scheduler_;
  std::unique_ptr<fsdp::FsdpModel> ref_model_;  // frozen initial weights (KL), RL only
  Json loaded_driver_state_ = Json::object();
  ProgressBar* progress_ = nullptr;  // rank 0's bar over the micro-batches of train()
  int64_t global_step_ = 0;
  int64_t current_rollout_ = 0;  // the rollout train() is working on (for messages)
  bool asleep_ = false;
  bool warned_nonfinite_loss_ = false;
};

}  // namespace furlong::train
