// Content digests of tensors: a fast, non-cryptographic 64-bit hash over each tensor's name,
// dtype, shape and raw bytes, combined in name order, rendered as 16 hex digits. Two parties
// that hold the same named tensors (same bits, dtypes, shapes) compute the same digest; any
// flipped bit changes it (with probability 1 - 2^-64 for random corruption). Used to prove that
// the rollout engine holds exactly the weights the trainer sent.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace furlong {

// Incremental 64-bit hash (four independent multiply-rotate lanes over 8-byte words, then a
// final avalanche). Feeding the same bytes in the same chunks or in different chunks gives
// different results only if the chunk boundaries differ: callers always feed whole fields.
class Digest64 {
 public:
  explicit Digest64(uint64_t seed = 0);
  void update(const void* data, size_t size);
  void update(std::string_view text);
  void update_u64(uint64_t value);
  uint64_t value() const;
  std::string hex() const;  // 16 lowercase hex digits

 private:
  uint64_t lanes_[4];
  uint64_t total_ = 0;
};

// Hash of one tensor: name, dtype name, shape, then its bytes in row-major order (copied to a
// contiguous CPU tensor first when needed).
uint64_t tensor_digest(const std::string& name, const at::Tensor& tensor);

// Digest of named tensors in name order (the order given does not matter; names must be
// unique), as 16 hex digits.
std::string tensors_digest(const std::vector<std::pair<std::string, at::Tensor>>& named);
// The same digest from per-tensor digests (tensor_digest), e.g. collected bucket by bucket.
std::string combine_tensor_digests(std::vector<std::pair<std::string, uint64_t>> per_tensor);

}  // namespace furlong
