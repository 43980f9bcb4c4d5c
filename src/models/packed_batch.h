// Packed inputs: several documents concatenated into one token sequence.
//
// P = total tokens. A document starts wherever position_ids does not continue the previous
// position by +1 (transformers' rule for packed rows; in practice positions restart at 0).
// Attention never crosses a document boundary.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace furlong::models {

struct PackedBatch {
  at::Tensor tokens_P;        // int64 [P]
  at::Tensor position_ids_P;  // int64 [P]
  // Document boundaries: doc i is [cu_seqlens[i], cu_seqlens[i+1]). Host-side copy.
  std::vector<int64_t> cu_seqlens;

  int64_t num_tokens() const { return cu_seqlens.empty() ? 0 : cu_seqlens.back(); }
  int64_t num_documents() const {
    return cu_seqlens.empty() ? 0 : static_cast<int64_t>(cu_seqlens.size()) - 1;
  }
  int64_t max_document_length() const;

  // Documents given as token lists; positions restart at 0 for each.
  static PackedBatch from_documents(const std::vector<std::vector<int64_t>>& documents);
  // Tokens and positions as given (1-D, same length); boundaries derived from positions.
  static PackedBatch from_positions(const at::Tensor& tokens_P, const at::Tensor& position_ids_P);
  // Moves the token/position tensors to `device`.
  PackedBatch to(c10::Device device) const;
};

}  // namespace furlong::models
