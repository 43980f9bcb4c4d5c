// The FSDP training backend (`--train-backend fsdp`): a HF model sharded over the mesh
// (fsdp::FsdpModel), AdamW on the shards, the LR schedule, micro-batching and losses, and the
// resharding checkpoints. One instance per rank; every public method is collective.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/batching.h"
#include "backend/loss.h"
#include "backend/micro_batch.h"
#include "dist/mesh.h"
#include "fsdp/fsdp_model.h"
#include "optim/adamw.h"
#include "optim/lr_scheduler.h"

namespace furlong {
class ProgressBar;
}

namespace furlong::backend {

// Routing replay helpers (fsdp_backend_moe.cpp). The R3 replay ids of one sample: its
// routed_experts as int64 [tokens, L, K] (-1 for dense layers and the last token), checked
// against the model's L and K; fails naming the sample when the engine recorded none.
at::Tensor rollout_routing_TLK(const rl::Sample& sample, int64_t num_layers, int64_t top_k);
// The replay tensor of one packed micro-batch: the samples' [T_i, L, K] concatenated in packing
// order (pack_micro_batch), or one row of -1 for the placeholder batch of an empty list.
at::Tensor pack_routing_PLK(const std::vector<at::Tensor>& per_sample_TLK, int64_t num_layers,
                            int64_t top_k);

class FsdpBackend : public TrainBackend {
 public:
  FsdpBackend(const BackendOptions& options, dist::ProcessGroups& groups);
  ~FsdpBackend() override;

  int64_t init() override;
  std::vector<StepMetrics> train(int64_t rollout_id,
                                 const std::vector<rl::Sample>& samples) override;
  void update_weights(const WeightSink& sink) override;
  void save_model(int64_t rollout_id, const Json& driver_state) override;
  Json loaded_driver_state() const override { return loaded_driver_state_; }
  void sleep() override;
  void wake_up() override;

  const BackendOptions& options() const { return options_; }
  dist::ProcessGroups& groups() { return *groups_; }
  void set_global_step(int64_t step) { global_step_ = step; }
  fsdp::FsdpModel& model() { return *model_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  optim::LrScheduler& scheduler() { return *scheduler_; }
  dist::Mesh& mesh() { return *mesh_; }
  int64_t global_step() const { return global_step_; }
  bool asleep() const { return asleep_; }

  // Forward-only log-probs (at the rollout temperature) of every given sample's response, on
  // this rank alone, in micro-batches of --micro-batch-size, with the routing of the old-policy
  // pass: R3 replays the samples' routed_experts, otherwise free routing. Tools and tests
  // compare these with the engines' log-probs. Collective (FSDP gathers): every rank calls it.
  std::vector<at::Tensor> score(const std::vector<rl::Sample>& samples);

  // Test hook (MoE models): called with the pass ("log_probs", "train_forward" after a
  // training forward, "train_backward" after its backward, where a checkpointed block's
  // recomputation has re-recorded), the micro-batch's local sample indices and its trace,
  // which then records the expert ids every MoE layer used.
  using MoeObserver = std::function<void(const std::string& pass, const std::vector<size_t>& items,
                                         const models::MoeTrace& trace)>;
  void set_moe_observer(MoeObserver observer) { moe_observer_ = std::move(observer); }

 private:
  // What the policy loss reads of this rollout, per local sample (fp32 [response_length] CPU
  // tensors): made once per rollout by prepare_policy_data, then passed to every step.
  struct PolicyData {
    std::vector<at::Tensor> old_log_probs, ref_log_probs, rollout_log_probs, advantages;
    // Routing replay: per local sample, int64 [tokens, L, K] ids that the training forwards
    // replay (R3: the engines'; R2: recorded by the old-policy pass); empty without replay.
    std::vector<at::Tensor> routing_TLK;
    std::map<std::string, double> metrics;  // train-side rollout/* metrics (all ranks' means)
    // --old-logprobs auto without the pass: the rollout trains in one optimizer step, so the old
    // policy's log-probs are that step's own forward, detached (same weights, same
    // micro-batches: the bits the pass would compute). The step adds up the per-sample means
    // of them here for rollout/log_probs (mutable: the loss reads PolicyData as const).
    bool old_is_current = false;
    mutable double old_log_prob_mean_sum = 0.0;
  };

  // --old-logprobs auto: whether the old-policy pass is redundant for this rollout (the same on
  // every rank): one optimizer step, and nothing reads old log-probs before it.
  bool old_pass_redundant(const BatchPlan& plan) const;
  // The rollout/log_probs metric from the first step's sums (all ranks).
  void finish_old_is_current(PolicyData& policy, size_t local_samples);

  // One optimizer step over `micro_batches` (local sample indices); `policy` is null for SFT.
  StepMetrics train_step(const std::vector<const rl::Sample*>& local,
                         const std::vector<std::vector<size_t>>& micro_batches,
                         const PolicyData* policy);
  // Forward + loss + backward of one micro-batch (`items`: its local sample indices); adds
  // metric sums to `sums`.
  void train_micro_batch(const MicroBatch& mb, const std::vector<size_t>& items,
                         const PolicyData* policy, std::map<std::string, double>& sums);
  models::ForwardOptions forward_options(std::shared_ptr<models::MoeTrace> moe = {}) const;
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
  // MoE actor: `replay_TLK` (per local sample) is replayed, else with `record_TLK` the
  // routing is recorded into it per sample; neither: free routing (the reference model).
  std::vector<at::Tensor> score_samples(fsdp::FsdpModel& model,
                                        const std::vector<const rl::Sample*>& local,
                                        const BatchPlan& plan,
                                        const std::vector<at::Tensor>* replay_TLK = nullptr,
                                        std::vector<at::Tensor>* record_TLK = nullptr);
  // Old-policy and reference log-probs of this rank's samples, then the advantage stage
  // (rl::compute_rollout_advantages) over the whole rollout.
  PolicyData prepare_policy_data(const std::vector<rl::Sample>& rollout,
                                 const std::vector<size_t>& local_indices,
                                 const std::vector<const rl::Sample*>& local,
                                 const BatchPlan& plan);
  LossOutput policy_loss(const MicroBatch& mb, const std::vector<size_t>& items,
                         const models::TokenLogProbs& lp, const PolicyData& policy) const;

  // ---- MoE (fsdp_backend_moe.cpp) ----
  // Fails on a dense model given MoE flags; logs the replay mode.
  void check_moe_options();
  bool moe_model() const { return model_->model().config().moe.enabled(); }
  bool routing_replay() const { return moe_model() && options_.moe.use_routing_replay; }
  // Micro-batches hold each distinct prompt once (--pack-shared-prompts) where that computes
  // the same thing: softmax attention, and no MoE bookkeeping over every sample's prompt rows
  // (routing replay data and the load-balancing loss are per sample token).
  bool share_prompts() const {
    return options_.batch.pack_shared_prompts && model_->model().supports_shared_prefixes() &&
           !routing_replay() && options_.moe.moe_aux_loss_coeff == 0.0;
  }
  // The routing the training forwards of this rollout replay, per local sample (R3: the
  // samples'; R2: recorded by the old-policy pass, run for that even under
  // --use-rollout-logprobs); `old_log_probs` receives that pass's values when it runs.
  std::vector<at::Tensor> prepare_routing(const std::vector<const rl::Sample*>& local,
                                          const BatchPlan& plan,
                                          std::vector<at::Tensor>* old_log_probs);
  // The trace of one micro-batch's forward (null for dense models).
  std::shared_ptr<models::MoeTrace> make_trace(const std::vector<size_t>& items,
                                               const std::vector<at::Tensor>* replay_TLK,
                                               bool record, bool collect_router_probs) const;
  // After a training forward: adds coeff * load-balancing loss to `loss` (weighted as the
  // micro-batch's share of the step, see docs/training.md) and the router metrics to `sums`.
  void add_moe_loss_and_metrics(const models::MoeTrace& trace, double weight, at::Tensor& loss,
                                std::map<std::string, double>& sums);
  // Per step: router load per layer (tokens per expert, summed over micro-batches and ranks)
  // as moe/layer_<l>/{max,min}_expert_share; resets the sums.
  void finish_moe_step_metrics(std::map<std::string, double>& values);
  void count_replay_check(const models::MoeTrace& trace);
  // Per rollout, with --ci-test and replay: ci/r3_mismatch_fraction over all ranks, failing
  // above miles' 1% threshold.
  void finish_replay_check(std::map<std::string, double>& values);

  BackendOptions options_;
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
  MoeObserver moe_observer_;
  std::vector<at::Tensor> step_tokens_per_expert_;  // per layer int64 [E] (this step, this rank)
  int64_t replay_checked_tokens_ = 0, replay_mismatched_tokens_ = 0;  // this rollout
};

}  // namespace furlong::backend
