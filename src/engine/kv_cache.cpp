#include "engine/kv_cache.h"

#include <ATen/ATen.h>

#include "core/error.h"

namespace furlong::engine {

KvCache::KvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t kv_heads,
                 int64_t head_dim, const c10::TensorOptions& options)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      options_(options) {
  FURLONG_CHECK(block_size > 0, "kv cache: block size must be positive, got ", block_size);
  FURLONG_CHECK(num_blocks > 0, "kv cache: needs at least one block");
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
  rebuild();
}

void KvCache::rebuild() {
  k_.clear();
  v_.clear();
  for (int64_t l = 0; l < num_layers_; ++l) {
    k_.push_back(at::zeros({num_blocks_ * block_size_, kv_heads_, head_dim_}, options_));
    v_.push_back(at::zeros({num_blocks_ * block_size_, kv_heads_, head_dim_}, options_));
  }
  released_ = false;
}

void KvCache::release() {
  FURLONG_CHECK(num_free_blocks() == num_blocks_,
                "kv cache: cannot release memory while sequences hold blocks");
  k_.clear();
  v_.clear();
  released_ = true;
}

std::optional<std::vector<int64_t>> KvCache::allocate(int64_t tokens) {
  int64_t need = blocks_for(tokens);
  if (need > num_free_blocks()) return std::nullopt;
  std::vector<int64_t> blocks;
  blocks.reserve(need);
  for (int64_t i = 0; i < need; ++i) {
    blocks.push_back(free_.back());
    free_.pop_back();
  }
  return blocks;
}

void KvCache::free(const std::vector<int64_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) free_.push_back(*it);
}

at::Tensor KvCache::slots_for(const std::vector<int64_t>& blocks, int64_t tokens) const {
  FURLONG_ASSERT(blocks_for(tokens) <= static_cast<int64_t>(blocks.size()), "block table of ",
                 blocks.size(), " blocks cannot hold ", tokens, " tokens");
  auto slots = at::empty({tokens}, at::kLong);
  auto* s = slots.data_ptr<int64_t>();
  for (int64_t p = 0; p < tokens; ++p) {
    s[p] = blocks[p / block_size_] * block_size_ + p % block_size_;
  }
  return slots.to(options_.device());
}

}  // namespace furlong::engine
