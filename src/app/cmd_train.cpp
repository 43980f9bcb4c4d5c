// furlong train: the training job: the RL loop (--loss-type policy_loss, the default) or
// supervised fine-tuning (--loss-type sft_loss), with the FSDP backend; every rank runs this
// (torchrun --no-python or furlong launch).
#include "app/common.h"
#include "core/log.h"
#include "train/rl_trainer.h"
#include "train/sft_trainer.h"

namespace furlong::app {

int run_train(const std::vector<std::string>& args) {
  train::TrainOptions o;
  config::FlagSet flags("furlong train",
                        "RL (--loss-type policy_loss, default) or SFT (--loss-type sft) of a HF "
                        "model with the FSDP backend (run on every rank: torchrun "
                        "--no-python ... or furlong launch).");
  register_flags(flags, o);
  if (!flags.parse(args)) return 0;
  apply_runtime_options({.num_threads = o.logging.num_threads});
  if (o.batch.loss_type == train::LossType::kPolicyLoss) return train::run_rl(o);
  return train::run_sft(o);
}

}  // namespace furlong::app
