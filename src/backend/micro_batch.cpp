#include "backend/micro_batch.h"

#include <ATen/ATen.h>

namespace furlong::backend {

MicroBatch pack_micro_batch(const std::vector<const rl::Sample*>& samples, bool share_prompts) {
  MicroBatch mb;
  std::vector<const std::vector<int64_t>*> tokens;
  std::vector<int64_t> prompts;
  for (const auto* sample : samples) {
    tokens.push_back(&sample->tokens);
    prompts.push_back(sample->prompt_length());
  }
  models::PackedSequences packed;
  if (samples.empty()) {
    packed.batch = models::PackedBatch::from_documents({{0}});
  } else {
    packed = models::pack_sequences(tokens, prompts, share_prompts);
  }
  std::vector<int64_t> rows, targets, lengths;
  std::vector<float> mask;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = *samples[i];
    const int64_t prompt = s.prompt_length();
    for (int64_t j = 0; j < s.response_length; ++j) {
      rows.push_back(packed.row(i, prompt + j - 1));
      targets.push_back(s.tokens[static_cast<size_t>(prompt + j)]);
      mask.push_back(s.remove ? 0.0f : s.loss_mask[static_cast<size_t>(j)]);
    }
    lengths.push_back(s.response_length);
  }
  mb.batch = std::move(packed.batch);
  auto n = static_cast<int64_t>(rows.size());
  mb.rows_T = at::tensor(rows, at::kLong).reshape({n});
  mb.targets_T = at::tensor(targets, at::kLong).reshape({n});
  mb.layout =
      rl::make_response_layout(std::move(lengths), at::tensor(mask, at::kFloat).reshape({n}));
  return mb;
}

}  // namespace furlong::backend
