#include "backend/loss.h"

#include <ATen/ATen.h>

#include "rl/layout.h"

namespace furlong::backend {

LossOutput sft_loss(const MicroBatch& mb, const models::TokenLogProbs& lp, bool per_token) {
  LossOutput out;
  out.loss = rl::reduce_tokens(-lp.logprobs_T, mb.layout.to(lp.logprobs_T.device()), per_token);
  out.metrics["loss"] = out.loss.item<double>();
  return out;
}

}  // namespace furlong::backend
