#include "models/packed_batch.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"

namespace furlong::models {

int64_t PackedBatch::max_document_length() const {
  int64_t longest = 0;
  for (size_t i = 0; i + 1 < cu_seqlens.size(); ++i)
    longest = std::max(longest, cu_seqlens[i + 1] - cu_seqlens[i]);
  return longest;
}

PackedBatch PackedBatch::from_documents(const std::vector<std::vector<int64_t>>& documents) {
  std::vector<int64_t> tokens, positions;
  PackedBatch batch;
  batch.cu_seqlens.push_back(0);
  for (const auto& doc : documents) {
    FURLONG_CHECK(!doc.empty(), "packed batch: empty documents are not allowed");
    for (size_t i = 0; i < doc.size(); ++i) {
      tokens.push_back(doc[i]);
      positions.push_back(static_cast<int64_t>(i));
    }
    batch.cu_seqlens.push_back(static_cast<int64_t>(tokens.size()));
  }
  auto n = static_cast<int64_t>(tokens.size());
  batch.tokens_P = at::from_blob(tokens.data(), {n}, at::kLong).clone();
  batch.position_ids_P = at::from_blob(positions.data(), {n}, at::kLong).clone();
  return batch;
}

PackedBatch PackedBatch::from_positions(const at::Tensor& tokens_P,
                                        const at::Tensor& position_ids_P) {
  FURLONG_CHECK(tokens_P.dim() == 1 && position_ids_P.dim() == 1 &&
                    tokens_P.size(0) == position_ids_P.size(0),
                "packed batch: tokens and position ids must be 1-D of equal length, got ",
                tokens_P.sizes(), " and ", position_ids_P.sizes());
  PackedBatch batch;
  batch.tokens_P = tokens_P.to(at::kLong);
  batch.position_ids_P = position_ids_P.to(at::kLong);
  auto pos = batch.position_ids_P.cpu().contiguous();
  const int64_t* p = pos.data_ptr<int64_t>();
  int64_t n = pos.size(0);
  batch.cu_seqlens.push_back(0);
  for (int64_t t = 1; t < n; ++t) {
    if (p[t] != p[t - 1] + 1) batch.cu_seqlens.push_back(t);
  }
  if (n > 0) batch.cu_seqlens.push_back(n);
  return batch;
}

PackedBatch PackedBatch::to(c10::Device device) const {
  PackedBatch out = *this;
  out.tokens_P = tokens_P.to(device);
  out.position_ids_P = position_ids_P.to(device);
  return out;
}

}  // namespace furlong::models
