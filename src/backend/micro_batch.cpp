#include "backend/micro_batch.h"

#include <ATen/ATen.h>

namespace furlong::backend {

MicroBatch pack_micro_batch(const std::vector<const rl::Sample*>& samples) {
  MicroBatch mb;
  std::vector<std::vector<int64_t>> docs;
  std::vector<int64_t> rows, targets, lengths;
  std::vector<float> mask;
  int64_t offset = 0;
  for (const auto* sample : samples) {
    const auto& s = *sample;
    docs.push_back(s.tokens);
    const int64_t prompt = s.prompt_length();
    for (int64_t j = 0; j < s.response_length; ++j) {
      rows.push_back(offset + prompt + j - 1);
      targets.push_back(s.tokens[prompt + j]);
      mask.push_back(s.remove ? 0.0f : s.loss_mask[j]);
    }
    lengths.push_back(s.response_length);
    offset += static_cast<int64_t>(s.tokens.size());
  }
  if (docs.empty()) docs.push_back({0});
  mb.batch = models::PackedBatch::from_documents(docs);
  auto n = static_cast<int64_t>(rows.size());
  mb.rows_T = at::tensor(rows, at::kLong).reshape({n});
  mb.targets_T = at::tensor(targets, at::kLong).reshape({n});
  mb.layout =
      rl::make_response_layout(std::move(lengths), at::tensor(mask, at::kFloat).reshape({n}));
  return mb;
}

}  // namespace furlong::backend
