// The paged KV cache: per layer, K and V pools of `num_blocks` fixed-size blocks of
// `block_size` token slots each ([num_blocks * block_size, K, H], addressed by slot index =
// block * block_size + offset). A sequence owns a list of blocks (its block table); token
// position p of the sequence lives in slot table[p / block_size] * block_size + p % block_size.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace furlong::engine {

class KvCache {
 public:
  KvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_heads,
          int64_t head_dim, const c10::TensorOptions& options);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Blocks for `tokens` token slots, or nullopt when not enough are free (nothing taken).
  std::optional<std::vector<int64_t>> allocate(int64_t tokens);
  void free(const std::vector<int64_t>& blocks);

  // Slot index of every position 0..tokens-1 under a block table (int64 [tokens]).
  at::Tensor slots_for(const std::vector<int64_t>& blocks, int64_t tokens) const;

  at::Tensor& k(int64_t layer) { return k_[layer]; }  // [S, K, H], S = num_blocks * block_size
  at::Tensor& v(int64_t layer) { return v_[layer]; }

  // Frees the pools' memory (allocation state is kept; every block must be free).
  void release();
  void rebuild();
  bool released() const { return released_; }

 private:
  int64_t num_layers_, num_blocks_, block_size_, kv_heads_, head_dim_;
  c10::TensorOptions options_;
  std::vector<at::Tensor> k_, v_;
  std::vector<int64_t> free_;  // a stack: lowest block ids handed out first
  bool released_ = false;
};

}  // namespace furlong::engine
