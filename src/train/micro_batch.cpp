#include "train/micro_batch.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace furlong::train {

MicroBatch pack_micro_batch(const std::vector<const rl::Sample*>& samples) {
  MicroBatch mb;
  std::vector<std::vector<int64_t>> docs;
  std::vector<int64_t> rows, targets, sample_of_row;
  std::vector<float> mask;
  int64_t offset = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = *samples[i];
    docs.push_back(s.tokens);
    const int64_t prompt = s.prompt_length();
    for (int64_t j = 0; j < s.response_length; ++j) {
      rows.push_back(offset + prompt + j - 1);
      targets.push_back(s.tokens[prompt + j]);
      sample_of_row.push_back(static_cast<int64_t>(i));
      mask.push_back(s.remove ? 0.0f : s.loss_mask[j]);
    }
    mb.response_lengths.push_back(s.response_length);
    mb.mask_sums.push_back(s.mask_sum());
    offset += static_cast<int64_t>(s.tokens.size());
  }
  if (docs.empty()) docs.push_back({0});
  mb.batch = models::PackedBatch::from_documents(docs);
  auto n = static_cast<int64_t>(rows.size());
  mb.rows_R = at::tensor(rows, at::kLong).reshape({n});
  mb.targets_R = at::tensor(targets, at::kLong).reshape({n});
  mb.sample_R = at::tensor(sample_of_row, at::kLong).reshape({n});
  mb.mask_R = at::tensor(mask, at::kFloat).reshape({n});
  return mb;
}

at::Tensor reduce_per_sample(const at::Tensor& values_R, const MicroBatch& mb, bool per_token) {
  auto masked = values_R * mb.mask_R.to(values_R.device());
  if (per_token) return masked.sum();
  std::vector<float> inv;
  for (double s : mb.mask_sums) inv.push_back(static_cast<float>(1.0 / std::max(s, 1.0)));
  auto inv_S = at::tensor(inv, at::kFloat).reshape({mb.num_samples()}).to(values_R.device());
  auto per_sample = at::zeros({mb.num_samples()}, masked.options())
                        .index_add(0, mb.sample_R.to(values_R.device()), masked);
  return (per_sample * inv_S).sum();
}

}  // namespace furlong::train
