#include "train/loss.h"

#include <ATen/ATen.h>

namespace furlong::train {

LossOutput sft_loss(const MicroBatch& mb, const models::TokenLogProbs& lp, bool per_token) {
  LossOutput out;
  out.loss = reduce_per_sample(-lp.logprobs_T, mb, per_token);
  out.metrics["loss"] = out.loss.item<double>();
  return out;
}

}  // namespace furlong::train
